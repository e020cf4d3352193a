"""Spark plumbing every Spark suite shares: the session, handing in batch files, stopping.

Invariants:

* :func:`require_pyspark` runs first in every Spark suite: without pyspark the suite is skipped
  (:class:`~bench.harness.common.SuiteSkipped`), not failed; nothing here imports pyspark at
  module import.
* :func:`session` is :func:`devkit.spark_local.local_session` (``conf/spark-defaults.conf``,
  the repository root on the workers' ``PYTHONPATH``) with the benchmarks' settings on top
  (``local[2]``, no UI, 2 shuffle partitions, 2 GiB driver), then the suite's ``overrides``;
  the JVM's and its workers' stderr go to ``<tmp_dir>/spark-jvm.log``.
* :func:`hand_in` gives every query the same bytes (a hard link), with the modification time
  that orders it among the query's files.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bench.harness.common import BenchContext, SuiteSkipped


def require_pyspark() -> None:
    """Skip a Spark suite without pyspark; otherwise point Spark's Python workers (and the
    driver) at this interpreter, as every Spark suite needs before its session exists.

    Raises:
        SuiteSkipped: pyspark is not installed.
    """
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SuiteSkipped("pyspark is not installed") from exc
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Point fd 2 at ``path`` while the block runs (processes started in it keep it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def session(ctx: BenchContext, app: str, **overrides: str) -> Any:
    """A local SparkSession from conf/spark-defaults.conf (local[2], no UI).

    Args:
        ctx: the run's context (its ``tmp_dir`` gets the JVM's log).
        app: the application name.
        **overrides: Spark settings applied last.

    Returns:
        The session (``pyspark.sql.SparkSession``).
    """
    from devkit.spark_local import local_session

    settings = {
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "2g",
    }
    settings.update(overrides)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    with stderr_to(ctx.tmp_dir / "spark-jvm.log"):
        return local_session(app, **settings)


def hand_in(source: Path, target: Path, mtime: int) -> None:
    """Give a streaming query one micro-batch file: ``target`` is a hard link to ``source``
    (the same bytes for every query) with modification time ``mtime`` (Spark's file source
    orders files by it)."""
    os.link(source, target)
    os.utime(target, (mtime, mtime))


def stop_queries(queries: Iterable[Any], spark: Any) -> None:
    """Stop the suite's streaming queries that started (None: never started), then Spark."""
    for query in queries:
        if query is not None:
            query.stop()
    spark.stop()
