"""Whole-batch fsstate operators against Spark's built-in operators and transformWithState.

Two queries, each in four implementations, over the same Parquet micro-batches (``ROWS``
rows per batch over ``KEYS`` string keys, event times of batch ``b`` in ``[10 b, 10 b + 10)``
seconds, so each batch fills one 10-second window and the watermark closes the one before):

* **windowed count**: ``withWatermark("t", "5 seconds").groupBy(window("t", "10 seconds"),
  "k").count()``, append output;
* **keyed running aggregate**: ``groupBy("k").agg(count, sum(v))``, update output.

Implementations: ``builtin`` (Spark's own operator, RocksDB state), ``fsstate``
(:mod:`fsstate_spark.operators`: a window aggregate, and a retracting aggregate over an
insert-only stream with upsert output), ``tws_native`` (``transformWithStateInPandas`` with
Spark's handles; the windowed count keeps a MapState window -> count per key and emits a
window from an event-time timer at its end) and ``tws_tiered`` (the same processors under
``tiered()``).

All eight queries run at once, each on its own copy of the input directory, with a
processing-time trigger and ``noDataMicroBatches`` disabled (so a window closed by the
watermark is emitted, in every implementation, by the next batch with data: the same work).
Round by round a batch file is given to one query at a time (the order rotating) and the
round waits for it; a query's batch time is Spark's ``triggerExecution``. Per round and
query group, the ratio of another implementation's time to fsstate's is a sample; a row's
value is the median over the steady rounds (batch 0 excluded), its status decided on it.
Goals: fsstate >= 1.5x the built-in operator and >= 20x transformWithState.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from bench.harness.common import BenchContext, Result, median, ratio_result, spread_text
from bench.harness.operator_queries import (
    DELAY,
    INPUT_SCHEMA,
    WINDOW_MS,
    RunningAgg,
    batch_table,
    builtin_query,
    fsstate_flow,
)
from bench.harness.spark import (
    batch_progress,
    hand_in,
    require_pyspark,
    session,
    stop_queries,
)

SUITE = "spark_operators"
GOAL_BUILTIN = 1.5
GOAL_TWS = 20.0
PARTITIONS = 4
GROUPS = {"window": "windowed count", "running": "keyed running aggregate"}
KINDS = ("builtin", "fsstate", "tws_native", "tws_tiered")
TRIGGER = "500 milliseconds"


# -- transformWithState processors (imported by Spark's Python workers) -------------------------
class WindowCount(StatefulProcessor):
    """Tumbling-window counts per key: a MapState window start -> count, and an event-time
    timer at each window's end that emits and forgets it (append output)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """The counts and the handle (for timers)."""
        self.handle = handle
        self.counts = handle.getMapState("counts", "start BIGINT", "n BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Count the rows of each window; a new window gets a timer at its end."""
        wm = timerValues.getCurrentWatermarkInMs()
        for frame in rows:
            ms = frame["t"].astype("int64") // 1_000_000  # pandas datetime64[ns] -> ms
            ms = ms[ms > wm]  # late rows are dropped, as Spark's aggregation does
            starts = (ms - ms % WINDOW_MS).value_counts()
            for start, n in starts.items():
                start = int(start)
                if self.counts.containsKey((start,)):
                    old = self.counts.getValue((start,))
                    assert old is not None  # containsKey said so; no extra state call
                    self.counts.updateValue((start,), (old[0] + int(n),))
                else:
                    self.counts.updateValue((start,), (int(n),))
                    self.handle.registerTimer(start + WINDOW_MS - 1)
        return iter([])

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        """Emit the window that ended and forget it."""
        start = expiredTimerInfo.getExpiryTimeInMs() + 1 - WINDOW_MS
        value = self.counts.getValue((start,))
        assert value is not None  # the window's timer is registered with its first row
        self.counts.removeKey((start,))
        yield pd.DataFrame({"k": [key[0]], "start": [start], "n": [value[0]]})

    def close(self) -> None:
        """Nothing to release."""


# -- the driver side ------------------------------------------------------------------------------
@dataclass
class Job:
    """One running query and its per-batch times."""

    group: str
    kind: str
    input_dir: Path
    checkpoint: Path
    query: Any = None
    wall_ms: dict[int, float] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        """``group/kind``."""
        return f"{self.group}/{self.kind}"


def _sizes(ctx: BenchContext) -> tuple[int, int, int]:
    """(rows per batch, keys, batches)."""
    if ctx.mode == "full":  # transformWithState takes ~20-60 s per batch of 50,000 rows here
        return 50_000, 25_000, 6
    return 20_000, 10_000, 3


def _write(path: Path, batch: int, rows: int, keys: int) -> None:
    pq.write_table(batch_table(batch, rows, keys), path)


def _start(spark: Any, job: Job) -> None:
    from fsstate_spark import operators as ops
    from fsstate_spark import tiered

    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.input_dir))
    )
    if job.kind == "fsstate":
        writer = ops.write_stream(
            fsstate_flow(df, job.group),
            checkpoint_location=str(job.checkpoint),
            partitions=PARTITIONS,
        )
    else:
        if job.kind == "builtin":
            out, mode = builtin_query(df, job.group)
        else:
            proc: StatefulProcessor = WindowCount() if job.group == "window" else RunningAgg()
            if job.kind == "tws_tiered":
                proc = tiered(proc, state_uri=str(job.checkpoint.parent / "tiered-state"))
            if job.group == "window":
                out = (
                    df.withWatermark("t", DELAY)
                    .groupBy("k")
                    .transformWithStateInPandas(
                        proc, "k STRING, start BIGINT, n BIGINT", "Append", "EventTime"
                    )
                )
                mode = "append"
            else:
                out = df.groupBy("k").transformWithStateInPandas(
                    proc, "k STRING, n BIGINT, s BIGINT", "Update", "None"
                )
                mode = "update"
        writer = (
            out.writeStream.outputMode(mode)
            .format("noop")
            .option("checkpointLocation", str(job.checkpoint))
        )
    job.query = writer.trigger(processingTime=TRIGGER).start()


def _wait(job: Job, batch: int, timeout_s: float = 900) -> None:
    p = batch_progress(job.query, batch, job.tag, timeout_s)
    job.wall_ms[batch] = float(p["durationMs"]["triggerExecution"])
    job.rows[batch] = int(p["numInputRows"])


def run(ctx: BenchContext) -> list[Result]:
    """Run the eight queries side by side."""
    require_pyspark()
    rows, keys, batches = _sizes(ctx)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    spark = session(
        ctx,
        "fsstate-bench-operators",
        **{
            "spark.sql.shuffle.partitions": str(PARTITIONS),
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        },
    )
    jobs = [
        Job(g, k, scratch / g / k / "input", scratch / g / k / "checkpoint")
        for g in GROUPS
        for k in KINDS
    ]
    try:
        for job in jobs:
            job.input_dir.mkdir(parents=True)
            _start(spark, job)
        source = scratch / "batches"
        source.mkdir()
        for b in range(batches):
            path = source / f"batch-{b:05d}.parquet"
            _write(path, b, rows, keys)
            mtime = 1_600_000_000 + 10 * b
            order = jobs[b % len(jobs) :] + jobs[: b % len(jobs)]
            for job in order:
                target = job.input_dir / path.name
                hand_in(path, target, mtime)
                _wait(job, b)
                ctx.log(f"  batch {b} {job.tag:<22} {job.wall_ms[b] / 1000:7.2f} s")
    finally:
        stop_queries((job.query for job in jobs), spark)
        shutil.rmtree(scratch, ignore_errors=True)
    return _results(jobs, rows, keys, batches)


def _results(jobs: list[Job], rows: int, keys: int, batches: int) -> list[Result]:
    steady = list(range(1, batches))
    by = {(j.group, j.kind): j for j in jobs}
    out: list[Result] = []
    work = (
        f"{rows:,} rows per batch over {keys:,} keys, local[2], {PARTITIONS} partitions, noop "
        f"sink, batches {steady[0]}-{steady[-1]} (batch 0 warms up)"
    )
    for group, title in GROUPS.items():
        ours = by[(group, "fsstate")]
        for kind in KINDS:
            j = by[(group, kind)]
            rates = [j.rows[b] / (j.wall_ms[b] / 1000) for b in steady]
            out.append(
                Result(
                    suite=SUITE,
                    name=f"{title}: {kind} rows/s",
                    value=median(rates),
                    unit="rows/s",
                    notes=f"{work}; triggerExecution per batch ({spread_text(rates)})",
                    samples=rates,
                )
            )
        for kind, goal in (("builtin", GOAL_BUILTIN), ("tws_native", GOAL_TWS)):
            other = by[(group, kind)]
            ratios = [other.wall_ms[b] / ours.wall_ms[b] for b in steady]
            what = f"{kind} batch time / fsstate batch time, same batch, paired"
            out.append(ratio_result(SUITE, f"{title}: fsstate vs {kind}", ratios, what, work, goal))
        tiered = by[(group, "tws_tiered")]
        ratios = [tiered.wall_ms[b] / ours.wall_ms[b] for b in steady]
        what = "transformWithStateInPandas under tiered() / fsstate operators"
        out.append(
            ratio_result(SUITE, f"{title}: fsstate vs tws_tiered", ratios, what, work, GOAL_TWS)
        )
    return out
