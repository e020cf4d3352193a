"""What the suites of keyed StatefulProcessor queries share (``spark_driver``, ``spark_jvm``):
the output schema of the running aggregate, its checksums, the sink and waiting for a batch.

* :data:`OUTPUT_DDL` / :data:`OUTPUT_TYPE`: the running aggregate's output ``(k, n, s)``
  (:class:`bench.harness.operator_queries.RunningAgg` and ``RunningAggRow``);
* :class:`RowsCell`: what a cell's rows per batch and timed batches give (its keys, its
  column in the row names, its timed batch ids and the workload text of its notes);
* :class:`Idle`: a processor that does nothing (the per-key cost rows: Spark's Python workers
  and the in-process measurements import it from here);
* :func:`expected_checksum` / :func:`checksum`: (rows, sum n, sum s, sum crc32(k)) of the
  running aggregate's output, from the input files with Arrow or from an output table;
* :class:`ChecksumSink`: the ``foreachBatch`` function of every Python-side query;
* :func:`wait_batch`: a query's ``triggerExecution`` of one batch, once its input rows are in.
* :data:`JVM_SIDES_ENV`: the environment variable that narrows ``spark_jvm``'s sides (set by
  ``spark_minors`` for its runs of ``spark_jvm`` on each PySpark minor).

Invariants: a checksum is a pure function of the rows (order-free); a :class:`RowsCell`'s
figures are pure functions of its ``rows`` and ``steady``; :class:`ChecksumSink`
writes every batch it does not check to Spark's ``noop`` format, so a checked batch is never
a timed one; :func:`wait_batch` returns a batch only once its input rows are known.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.harness.spark import batch_progress

OUTPUT_DDL = "k STRING, n BIGINT, s BIGINT"
OUTPUT_TYPE = StructType(
    [
        StructField("k", StringType()),
        StructField("n", LongType()),
        StructField("s", LongType()),
    ]
)

Checksum = tuple[int, int, int, int]

JVM_SIDES_ENV = "FSSTATE_BENCH_JVM_SIDES"
"""``fast,stock`` (a comma-separated subset of ``spark_jvm``'s sides per flavour: ``fast``,
``stock``, ``handles``, ``driver``): the only sides ``spark_jvm`` runs, the others published
as skipped rows; unset or empty: every side. The Java query always runs."""


class RowsCell:
    """Rows per batch over ``rows // 2`` keys (~2 rows per key, as ``spark_operators``) and
    ``steady`` timed batches after the warm-up: mixed into the frozen dataclasses of a cell of
    ``spark_driver`` (its shapes) and of ``spark_jvm``, which hold the two fields."""

    rows: int
    steady: int

    @property
    def keys(self) -> int:
        """Keys the rows are drawn over."""
        return self.rows // 2

    @property
    def column(self) -> str:
        """``50k rows/batch``."""
        return f"{self.rows // 1000}k rows/batch"

    @property
    def batches(self) -> list[int]:
        """The timed batches (batch 0 warms up)."""
        return list(range(1, self.steady + 1))

    def work(self, partitions: str) -> str:
        """The workload text of the notes, ``partitions`` (e.g. ``4 partitions``) as given."""
        s = self.batches
        return (
            f"{self.rows:,} rows per batch over {self.keys:,} keys, running count + sum per "
            f"key in a value state, one output row per key, time mode None, local[2], "
            f"{partitions}, foreachBatch to noop, batches {s[0]}-{s[-1]} (batch 0 warms up)"
        )


class Idle(StatefulProcessor):
    """Does nothing: no state, never reads its rows, no output (either flavour)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Nothing to declare."""

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Any:
        """An empty iterator; ``rows`` is left untouched."""
        return iter(())

    def close(self) -> None:
        """Nothing to release."""


def expected_checksum(inputs: list[pa.Table]) -> Checksum:
    """(rows, sum n, sum s, sum crc32(k)) of the running aggregate's output for the last of
    ``inputs`` (every batch so far, in order), computed with Arrow."""
    last_keys = pc.unique(inputs[-1].column("k").combine_chunks())
    seen = pa.concat_tables([t.select(["k", "v"]) for t in inputs])
    totals = seen.filter(pc.is_in(seen.column("k"), value_set=last_keys))
    agg = totals.group_by("k").aggregate([("v", "count"), ("v", "sum")])
    return (
        len(last_keys),
        int(pc.sum(agg.column("v_count")).as_py() or 0),
        int(pc.sum(agg.column("v_sum")).as_py() or 0),
        sum(zlib.crc32(k.encode()) for k in last_keys.to_pylist()),
    )


def checksum(out: pa.Table) -> Checksum:
    """The same figures of an output table (``k``, ``n``, ``s``)."""
    return (
        out.num_rows,
        int(pc.sum(out.column("n")).as_py() or 0),
        int(pc.sum(out.column("s")).as_py() or 0),
        sum(zlib.crc32(k.encode()) for k in out.column("k").to_pylist()),
    )


class ChecksumSink:
    """The ``foreachBatch`` function of every query: the batch's rows to Spark's ``noop``
    format, or, for the checked batch ids, its checksum (kept in ``sums``)."""

    def __init__(self, checked: set[int]) -> None:
        self.checked = checked
        self.sums: dict[int, Checksum] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        if batch_id not in self.checked:
            df.write.format("noop").mode("overwrite").save()
            return
        row = df.agg(
            F.count(F.lit(1)), F.sum("n"), F.sum("s"), F.sum(F.crc32(F.col("k")))
        ).collect()[0]
        self.sums[batch_id] = (int(row[0]), int(row[1] or 0), int(row[2] or 0), int(row[3] or 0))


def wait_batch(query: Any, tag: str, batch: int, rows: int) -> tuple[float, int]:
    """Wait until ``query`` (a started ``StreamingQuery``) has run ``batch`` with input rows;
    returns its ``triggerExecution`` (ms) and input rows
    (:func:`bench.harness.spark.batch_progress`).

    Raises:
        RuntimeError: the query failed or stopped.
        TimeoutError: the batch took over ``max(900 s, rows / 50 rows/s)``.
    """
    p = batch_progress(query, batch, tag, max(900.0, rows / 50))  # 50 rows/s: 10 times too slow
    return float(p["durationMs"]["triggerExecution"]), int(p["numInputRows"])
