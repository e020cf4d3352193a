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
* :func:`batch_progress` waits for a query's progress of one batch with input rows by polling
  ``lastProgress`` (one progress converted per call) and, at most once every
  :data:`SCAN_EVERY_S`, ``recentProgress`` (for a batch whose progress an idle one has
  followed). A suite's waiting costs the measured queries almost nothing: polling
  ``recentProgress`` every 50 ms, as the suites did, converted up to 100 kept progresses per
  call, and as a query's idle progresses (one per 10 s) filled the list, the suite's driver
  process and the JVM's Py4J threads used up to half a core of this 2-core machine by the
  fifth batch of a cell (``spark_jvm``, 50k rows, 4 partitions, a per-thread ``/proc``
  sampler), slowing every side's later batches.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bench.harness.common import BenchContext, SuiteSkipped

POLL_S = 0.05  # batch_progress: between two reads of lastProgress
SCAN_EVERY_S = 2.0  # batch_progress: between two reads of recentProgress


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


def _is_batch(progress: Any, batch: int) -> bool:
    return (
        progress is not None
        and int(progress["batchId"]) == batch
        and int(progress["numInputRows"] or 0) > 0
    )


def batch_progress(query: Any, batch: int, name: str, timeout_s: float = 900.0) -> Any:
    """Wait until ``query`` (a started ``StreamingQuery``) has run ``batch`` with input rows.

    Args:
        query: the query.
        batch: the batch id.
        name: the query's name in errors.
        timeout_s: how long to wait.

    Returns:
        The batch's progress (``StreamingQueryProgress``; ``p["durationMs"]`` etc.).

    Raises:
        RuntimeError: the query failed, or stopped without the batch (Spark stops a query's
            run when another run of the same query id starts).
        TimeoutError: no such progress within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    scan_at = time.monotonic() + SCAN_EVERY_S
    while True:
        last = query.lastProgress
        if _is_batch(last, batch):
            return last
        if time.monotonic() >= scan_at:
            for p in query.recentProgress:
                if _is_batch(p, batch):
                    return p
            scan_at = time.monotonic() + SCAN_EVERY_S
        if query.exception() is not None:
            raise RuntimeError(f"{name} failed: {query.exception()}")
        if not query.isActive:
            raise RuntimeError(f"{name} stopped before batch {batch} (stopped by another run?)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: batch {batch} did not finish")
        time.sleep(POLL_S)
