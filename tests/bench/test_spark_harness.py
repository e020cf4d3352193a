"""Waiting for a streaming query's batch (:func:`bench.harness.spark.batch_progress`), on a real
query of the shared session: the batch's own progress, also once idle progresses followed it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from bench.harness import spark as harness
from bench.harness.spark import batch_progress, hand_in

IDLE_MS = 100  # the query's idle progress every 100 ms (Spark's default: 10 s)


@pytest.fixture
def query(spark: SparkSession, tmp_path: Path) -> Iterator[Any]:
    """A processing-time query over a directory of Parquet files, one file per batch."""
    key = "spark.sql.streaming.noDataProgressEventInterval"
    before = spark.conf.get(key)
    spark.conf.set(key, f"{IDLE_MS}ms")  # read when the query starts
    (tmp_path / "in").mkdir()
    try:
        q = (
            spark.readStream.schema("v BIGINT")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(tmp_path / "in"))
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="50 milliseconds")
            .start()
        )
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
    try:
        yield q
    finally:
        q.stop()


def _hand(tmp_path: Path, batch: int, rows: int) -> None:
    src = tmp_path / f"src-{batch}.parquet"
    pq.write_table(pa.table({"v": pa.array(range(rows), pa.int64())}), src)
    hand_in(src, tmp_path / "in" / src.name, 1_600_000_000 + 10 * batch)


def test_the_batchs_own_progress(query: Any, tmp_path: Path) -> None:
    for batch, rows in ((0, 3), (1, 5)):
        _hand(tmp_path, batch, rows)
        p = batch_progress(query, batch, "q", timeout_s=120)
        assert (int(p["batchId"]), int(p["numInputRows"])) == (batch, rows)
        assert float(p["durationMs"]["triggerExecution"]) > 0


def test_a_batch_followed_by_idle_progresses(query: Any, tmp_path: Path) -> None:
    _hand(tmp_path, 0, 7)
    batch_progress(query, 0, "q", timeout_s=120)
    deadline = time.monotonic() + 60
    while int(query.lastProgress["numInputRows"] or 0):  # an idle progress comes last
        assert time.monotonic() < deadline, "no idle progress within a minute"
        time.sleep(IDLE_MS / 1000)
    t0 = time.monotonic()
    p = batch_progress(query, 0, "q", timeout_s=120)
    assert (int(p["batchId"]), int(p["numInputRows"])) == (0, 7)
    assert time.monotonic() - t0 < harness.SCAN_EVERY_S + 5  # found by the rare scan


def test_a_batch_that_never_comes_times_out(query: Any) -> None:
    with pytest.raises(TimeoutError, match="q: batch 3 did not finish"):
        batch_progress(query, 3, "q", timeout_s=0.5)
