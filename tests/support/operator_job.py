"""A standalone streaming job of fsstate's whole-batch operators, meant to be killed.

Reads JSON-lines files (``{"k": ..., "t": <epoch seconds>, "v": ...}``) from ``--input``, one
file per micro-batch, and runs a chain of two stateful stages (:mod:`fsstate_spark.operators`)
with a watermark of :data:`WATERMARK_DELAY` on ``t``:

1. ``dedup``: ``deduplicate(keys=["k", "v"], time="t")``, Spark's
   ``dropDuplicatesWithinWatermark`` (a ``(k, v)`` is remembered for the watermark delay);
2. ``windows``: a tumbling :data:`WINDOW_MS` window per ``k`` with ``count`` and ``sum(v)`` in
   append mode (a window is output once, in the first batch whose watermark passes its end).

Every micro-batch's output is written by ``foreachBatch`` to ``--sink`` as
``batch-<id>.json``: rows ``[k, window start, window end, count, sum(v)]`` (times in epoch
seconds), sorted.

Run it (from the repository root)::

    python -m tests.support.operator_job --input in/ --checkpoint ckpt/ \\
        --state-uri state/ --sink out/

Kill it at any moment (even ``kill -9`` of its whole process group) and run the same command
again: the query resumes from its checkpoint, re-runs the batch Spark had not committed (its
stages adopt the state versions they had already published) and the sink ends up exactly as
after an uninterrupted run.

Invariants:

* The sink is idempotent per batch id: a batch's file is written under a temporary name and
  renamed to ``batch-<id>.json`` (:func:`examples.recovery_job.write_batch_file`), replacing
  the file of an earlier attempt of the same batch. Readers see either no file or a complete one.
* Input files are read in modification-time order, one per micro-batch
  (``maxFilesPerTrigger=1``), with an ``availableNow`` trigger: the job ends once every file
  present at start is processed.
* The Spark session is :func:`devkit.spark_local.local_session`'s
  (``conf/spark-defaults.conf``), which makes the repository root importable by Spark's Python
  workers (the job runs as ``python -m tests.support.operator_job`` from there).
* Each stage runs in :data:`PARTITIONS` partitions; its fsstate stores live under
  ``<state-uri>/<stage name>/<partition>`` (names in :data:`STAGES`).
* ``--slow-ms N`` widens three moments of every batch, for a test to kill the job in
  (with fewer cores than :data:`PARTITIONS`, as ``conf/spark-defaults.conf``'s ``local[2,2]``):
  every task of the first stage sleeps N ms right after its partition committed the batch's
  ``dedup`` version, so meanwhile the last partition's task waits for a core (``dedup``
  committed by some partitions only) and then sleeps alone (``dedup`` committed by all,
  ``windows`` by none); the sink sleeps N ms after the output is computed (both stages
  committed everywhere) and before it writes the batch's file. Sleeping changes no result.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from devkit.jobs import job_arguments
from devkit.spark_local import local_session
from examples.recovery_job import write_batch_file
from fsstate_spark import operators as ops

INPUT_SCHEMA = "k STRING, t BIGINT, v BIGINT"
WATERMARK_DELAY = "5 seconds"
WINDOW_MS = 10_000
PARTITIONS = 3
STAGES = ("dedup", "windows")  # the stages' operator names, in flow order


def slow_pass(slow_ms: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function passing its partition's rows on after sleeping ``slow_ms``.

    The rows are read first: once they are, the stage before has run its task's epoch, i.e.
    committed the partition's version.
    """

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = list(batches)
        if slow_ms > 0 and TaskContext.get() is not None:
            time.sleep(slow_ms / 1000)
        yield from rows

    return task


class WindowCounts(StatefulProcessor):
    """The ``windows`` stage as an unchanged StatefulProcessor (``EventTime``): per key, a map
    window start -> (count, sum) and a timer at each window's end; an expired timer outputs
    the window as ``window_aggregate`` does (struct ``window``, ``k``, ``count``, ``sum(v)``)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.windows = handle.getMapState("windows", "start BIGINT", "n BIGINT, total BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        for df in rows:
            for t, v in zip(df["t"], df["v"], strict=True):
                ms = int(t.value // 1_000_000)
                start = ms - ms % WINDOW_MS
                cur = self.windows.getValue((start,)) or (0, 0)
                total = cur[1] + (0 if pd.isna(v) else int(v))
                self.windows.updateValue((start,), (cur[0] + 1, total))
                self.handle.registerTimer(start + WINDOW_MS)
        yield from ()

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        start = expiredTimerInfo.getExpiryTimeInMs() - WINDOW_MS
        cur = self.windows.getValue((start,))
        if cur is not None:
            self.windows.removeKey((start,))
            yield pd.DataFrame(
                {
                    "window": [
                        {
                            "start": pd.Timestamp(start, unit="ms"),
                            "end": pd.Timestamp(start + WINDOW_MS, unit="ms"),
                        }
                    ],
                    "k": [key[0]],
                    "count": [cur[0]],
                    "sum(v)": [cur[1]],
                }
            )

    def close(self) -> None:
        pass


WINDOW_SCHEMA = (
    "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, k STRING, count BIGINT, `sum(v)` BIGINT"
)


def build_flow(events: DataFrame, slow_ms: int = 0, processor: bool = False) -> ops.Flow:
    """The job's flow over the raw input (``t`` in epoch seconds)."""
    flow = ops.source(
        events.withColumn("t", F.timestamp_seconds("t")), watermark=("t", WATERMARK_DELAY)
    ).deduplicate(keys=["k", "v"], time="t", name=STAGES[0])
    if slow_ms > 0:
        flow = flow.transform(lambda df: df.mapInArrow(slow_pass(slow_ms), df.schema))
    if processor:
        return ops.transform_with_state_in_pandas(
            flow.group_by("k"),
            WindowCounts(),
            WINDOW_SCHEMA,
            "Append",
            "EventTime",
            name=STAGES[1],
        )
    return flow.window_aggregate(
        keys=["k"],
        time="t",
        window=ops.Window(size_ms=WINDOW_MS),
        aggs=[ops.Agg("count"), ops.Agg("sum", "v")],
        mode="append",
        name=STAGES[1],
    )


def output_rows(df: DataFrame) -> list[list[Any]]:
    """A batch's output as sorted ``[k, window start, window end, count, sum(v)]`` rows."""
    flat = df.select(
        "k",
        F.col("window.start").cast("long").alias("start"),
        F.col("window.end").cast("long").alias("end"),
        "count",
        F.col("`sum(v)`").alias("total"),
    )
    rows = [list(r) for r in flat.collect()]
    return sorted(rows, key=lambda r: [(x is None, x if x is not None else 0) for x in r])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the job."""
    parser = job_arguments((__doc__ or "").splitlines()[0], "directory of batch-<id>.json outputs")
    parser.add_argument(
        "--processor",
        action="store_true",
        help="count the windows with an unchanged StatefulProcessor run by the flow driver",
    )
    parser.add_argument(
        "--slow-ms",
        type=int,
        default=0,
        help=(
            "slow every batch down: each first-stage task sleeps this long after its state "
            "commit, the sink as long after all commits and before writing the batch's file"
        ),
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the query until every input file present at start is processed."""
    args = parse_args(argv)
    sink = Path(args.sink)
    sink.mkdir(parents=True, exist_ok=True)
    for stale in sink.glob(".batch-*.tmp"):  # left behind by a killed run
        stale.unlink(missing_ok=True)

    spark = local_session("fsstate-operator-job")
    events = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = output_rows(batch)  # runs the batch's stages: they commit its state versions
        if args.slow_ms > 0:
            time.sleep(args.slow_ms / 1000)
        path = write_batch_file(sink, batch_id, rows)
        print(f"batch {batch_id}: {len(rows)} rows -> {path.name}", flush=True)

    query = (
        ops.write_stream(
            build_flow(events, args.slow_ms, args.processor),
            checkpoint_location=args.checkpoint,
            sink=write,
            partitions=PARTITIONS,
            state_uri=args.state_uri,
        )
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"done: {len(list(sink.glob('batch-*.json')))} batch files in {sink}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
