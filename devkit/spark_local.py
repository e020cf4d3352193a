"""A small local SparkSession configured from ``conf/spark-defaults.conf``, plus stream helpers.

Used by the examples, the demo, the benchmarks and the Spark test suite, so they all run with
the same settings. The session is built after :func:`devkit.repo.worker_paths`, so Spark's
Python workers import the repository root's packages (processors defined under ``examples/``,
``bench/`` and ``tests/`` are imported there as ``examples.<module>``, ``bench.<...>`` and
``tests.<...>``).

Invariants:

* The session is built from the conf file, then ``overrides``; nothing else is guessed.
* :func:`session_conf` puts back exactly the settings a block found (an unset key stays unset).
* ``write_batches`` gives each file a distinct, increasing modification time, so a file source
  read with ``maxFilesPerTrigger=1`` sees exactly one file per micro-batch, in order.

Environment: ``FSSTATE_TEST_NO_WORKER_MODULE=1`` drops ``spark.python.worker.module`` from the
conf file's settings (executors then run PySpark's own worker for every UDF, and ``tiered()``
runs its processor through PySpark's transformWithState loop), e.g. to test on a PySpark whose
fsstate worker is not ready.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from devkit.repo import ROOT, worker_paths

CONF_FILE = ROOT / "conf" / "spark-defaults.conf"
NO_WORKER_MODULE_ENV = "FSSTATE_TEST_NO_WORKER_MODULE"
"""Set to ``1`` (or ``true``): sessions leave ``spark.python.worker.module`` unset."""


def read_conf(path: Path = CONF_FILE) -> dict[str, str]:
    """Parse a spark-defaults style file: ``key value`` per line, ``#`` comments."""
    conf: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        conf[key.strip()] = value.strip()
    return conf


def local_session(app_name: str, **overrides: str) -> SparkSession:
    """A SparkSession from ``conf/spark-defaults.conf`` with ``overrides`` applied (without
    ``spark.python.worker.module`` if :data:`NO_WORKER_MODULE_ENV` is set)."""
    worker_paths()
    conf = read_conf()
    if os.environ.get(NO_WORKER_MODULE_ENV, "").strip().lower() in ("1", "true", "yes"):
        conf.pop("spark.python.worker.module", None)
    conf.update(overrides)
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def session_conf(spark: SparkSession, **settings: str | None) -> Iterator[None]:
    """Set SQL confs of ``spark`` for a block, then put back exactly what was there.

    Pass the keys as a dict (``session_conf(spark, **{"spark.sql.shuffle.partitions": "3"})``);
    a value of None unsets the key for the block.
    ``spark.conf.unset`` alone is no restore: it falls back to Spark's default (200 shuffle
    partitions), not to the session's value from ``conf/spark-defaults.conf``, and every later
    test of the shared session would run 100 times the tasks.
    """
    old = {k: spark.conf.get(k, None) for k in settings}  # None: not set
    try:
        for key, value in settings.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
        yield
    finally:
        for key, value in old.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def write_batches(directory: str | Path, batches: Sequence[Iterable[dict[str, Any]]]) -> None:
    """Write one JSON-lines file per batch, with increasing modification times."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    existing = len(list(directory.glob("batch-*.json")))
    base = 1_600_000_000
    for i, rows in enumerate(batches, start=existing):
        path = directory / f"batch-{i:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (base + 10 * i, base + 10 * i))
