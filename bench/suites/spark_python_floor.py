"""The floor under ``tiered()`` inside Spark's operator: what a task of Spark's Python
transformWithState operator costs with nothing to do, against the Java processor's whole task.

``spark_jvm`` finds ``tiered()`` (Row, fsstate's loop) ~2x the Java processor's batch time at
200 partitions, and fsstate's loop no faster than PySpark's there. This suite says how much of
that any Python processor pays, and (issue 46) how much of the running aggregate's time is
fsstate's state. Per cell ({50k, 500k} rows per batch over rows / 2 keys x {4, 200} shuffle
partitions in full runs, 4, 3, 3 and 2 timed batches, ~23 minutes on 2 cores; 5k rows at 4
and 20 partitions in quick ones), five queries run side by side in one SparkSession
(local[2]) over the same Parquet micro-batches (hard links), taking turns to go first:

* ``Java``: the running aggregate of ``spark_jvm`` in Java on Spark's ``transformWithState``
  (RocksDB, :mod:`bench.harness.java_processor`): the reference, doing the work;
* ``idle Python processor``: a Row processor that declares no state, never reads its rows and
  returns nothing (:class:`bench.harness.processor_queries.Idle`) on PySpark's
  ``transformWithState`` and PySpark's own loop: what every Python processor pays for Spark's
  Python operator (its Python runner and state server per task, Spark's store of the operator);
* ``tiered() idle``: that processor under ``tiered()`` on fsstate's loop (adds fsstate's store
  per task: acquire at the previous version, commit);
* ``tiered() running aggregate``: ``spark_jvm``'s Row processor under ``tiered()`` on
  fsstate's loop, doing the work;
* ``tiered() dict state``: the same processor with its state in a plain dict of the worker
  (:class:`bench.harness.operator_queries.DictAggRow`) under ``tiered()``: what it would cost
  with free state (a cost reference: its outputs are not checked).

Goal rows, per cell: ``tiered() running aggregate / tiered() idle`` (paired per batch; goal
<= 1.1x at 200 partitions, where every Python processor pays Spark's per-task fixed costs
and the Java processor is not the bar; informative at 4) and ``fsstate's share (running
aggregate - dict state) / Java`` (per batch, the difference of the two ``tiered()`` queries
over the Java batch; goal <= 0.25x at 500k rows and 4 partitions, informative elsewhere).
``spark_jvm`` holds the goals against Java (Row ``tiered()`` <= 1.2x at 4 partitions).

Other rows (informative), per cell ``<N> partitions, <R>k rows/batch: ...``: each Python
query's batch time over the Java query's (paired per batch); each query's batch time and its
time per task over the Java query's ((batch - Java's batch) x 2 cores / N tasks, ms); from
Spark's progress of the operator (``stateOperators[0]``, summed over its tasks) per task:
Spark's store commit (``commitTimeMs``) and the operator's processing (``allUpdatesTimeMs``:
for a Python operator the time its tasks wait for the Python worker).

Invariants: every query reads the same rows per batch (checked in its progress); batch 0 warms
up and is not measured; the Java side is skipped with the reason where no JDK compiler exists
(:func:`bench.harness.java_processor.build_jar`), its rows published as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median, ratio_result, skipped_result
from bench.harness.java_processor import java_session, start_java
from bench.harness.operator_queries import INPUT_SCHEMA, DictAggRow, RunningAggRow, batch_table
from bench.harness.processor_queries import OUTPUT_DDL, ChecksumSink, Idle
from bench.harness.spark import batch_progress, hand_in, require_pyspark

SUITE = "spark_python_floor"
TRIGGER = "500 milliseconds"
CORES = 2  # local[2]
MAX_CACHED_STORES = 4096
SIDES = {
    "java": "Java",
    "idle": "idle Python processor",
    "tiered_idle": "tiered() idle",
    "tiered": "tiered() running aggregate",
    "tiered_dict": "tiered() dict state",
}
GOAL_VS_FLOOR = 1.1  # tiered() running aggregate / tiered() idle, at most, at 200 partitions
GOAL_SHARE = 0.25  # (running aggregate - dict state) / Java batch time, at most, 500k rows, 4p
FLOOR_GOAL_PARTITIONS = 200
SHARE_GOAL_CELL = (500_000, 4)


@dataclass(frozen=True)
class FloorCell:
    """Rows per batch (over ``rows // 2`` keys) at a partition count, ``steady`` timed batches."""

    rows: int
    partitions: int
    steady: int

    @property
    def label(self) -> str:
        """``200 partitions, 50k rows/batch``."""
        return f"{self.partitions} partitions, {self.rows // 1000}k rows/batch"


@dataclass
class FloorJob:
    """One query of a cell: its per-batch figures from Spark's progress."""

    side: str
    root: Path
    query: Any = None
    batch_ms: dict[int, float] = field(default_factory=dict)
    commit_ms: dict[int, float] = field(default_factory=dict)
    updates_ms: dict[int, float] = field(default_factory=dict)


def cells(ctx: BenchContext) -> list[FloorCell]:
    """The cells of this mode (see the module docstring for the time they take)."""
    if ctx.mode == "full":
        return [
            FloorCell(50_000, 4, 4),
            FloorCell(50_000, 200, 3),
            FloorCell(500_000, 4, 3),
            FloorCell(500_000, 200, 2),
        ]
    return [FloorCell(5_000, 4, 2), FloorCell(5_000, 20, 2)]


def _start(spark: Any, job: FloorJob) -> None:
    from fsstate_spark import tiered

    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.root / "input"))
    )
    name = f"floor_{job.root.name}"
    if job.side == "java":
        job.query = start_java(spark, df, job.root / "checkpoint", name, TRIGGER, set())
        return
    proc: Any = {"tiered": RunningAggRow, "tiered_dict": DictAggRow}.get(job.side, Idle)()
    if job.side != "idle":
        state = str(job.root / "state")
        proc = tiered(proc, state_uri=state, name=name, max_cached_stores=MAX_CACHED_STORES)
    job.query = (
        df.groupBy("k")
        .transformWithState(proc, OUTPUT_DDL, "Update", "None")
        .writeStream.outputMode("update")
        .foreachBatch(ChecksumSink(set()))
        .option("checkpointLocation", str(job.root / "checkpoint"))
        .queryName(name)
        .trigger(processingTime=TRIGGER)
        .start()
    )


def _record(job: FloorJob, batch: int, cell: FloorCell) -> None:
    """The batch's time and the operator's progress figures (per task)."""
    progress = batch_progress(job.query, batch, job.side, max(900.0, cell.rows / 50))
    rows = int(progress["numInputRows"])
    if rows != cell.rows:
        raise RuntimeError(f"{job.side}: batch {batch} read {rows} rows, not {cell.rows}")
    job.batch_ms[batch] = float(progress["durationMs"]["triggerExecution"])
    op = progress["stateOperators"][0]
    job.commit_ms[batch] = float(op["commitTimeMs"]) / cell.partitions
    job.updates_ms[batch] = float(op["allUpdatesTimeMs"]) / cell.partitions


def _run_cell(
    ctx: BenchContext, spark: Any, cell: FloorCell, scratch: Path, java: bool
) -> dict[str, FloorJob]:
    sides = [s for s in SIDES if java or s != "java"]
    jobs = {s: FloorJob(s, scratch / s) for s in sides}
    spark.conf.set("spark.sql.shuffle.partitions", str(cell.partitions))  # read at start
    source = scratch / "batches"
    source.mkdir(parents=True)
    try:
        for job in jobs.values():
            (job.root / "input").mkdir(parents=True)
            _start(spark, job)
        order = list(jobs.values())
        for b in range(cell.steady + 1):
            path = source / f"batch-{b:05d}.parquet"
            pq.write_table(batch_table(b, cell.rows, cell.rows // 2), path)
            for job in order[b % len(order) :] + order[: b % len(order)]:
                hand_in(path, job.root / "input" / path.name, 1_600_000_000 + 10 * b)
                _record(job, b, cell)
                ctx.log(f"  {cell.label} batch {b} {job.side:<12} {job.batch_ms[b] / 1000:7.2f} s")
    finally:
        for job in jobs.values():
            if job.query is not None:
                job.query.stop()
    return jobs


def _work(cell: FloorCell) -> str:
    return (
        f"{cell.rows:,} rows per batch over {cell.rows // 2:,} keys, {cell.partitions} shuffle "
        f"partitions, local[2], transformWithState (Row), time mode None, foreachBatch to noop, "
        f"batches 1-{cell.steady} (batch 0 warms up)"
    )


def cell_results(cell: FloorCell, jobs: dict[str, FloorJob], java_skip: str | None) -> list[Result]:
    """The cell's rows (module docstring); ``java_skip``: why there is no Java query."""
    out: list[Result] = []
    prefix, work = cell.label, _work(cell)
    steady = range(1, cell.steady + 1)
    java = jobs.get("java")
    for side in ("idle", "tiered_idle", "tiered", "tiered_dict"):
        job, what = jobs[side], SIDES[side]
        if java is None:
            reason = f"no Java query: {java_skip}"
            out.append(skipped_result(SUITE, f"{prefix}: {what} / Java", "x", reason))
            out.append(skipped_result(SUITE, f"{prefix}: {what} over Java per task", "ms", reason))
            continue
        ratios = [job.batch_ms[b] / java.batch_ms[b] for b in steady]
        out.append(
            ratio_result(
                SUITE,
                f"{prefix}: {what} / Java",
                ratios,
                f"{what} batch time / the Java running aggregate's, same batch, paired",
                work,
            )
        )
        extra = [(job.batch_ms[b] - java.batch_ms[b]) * CORES / cell.partitions for b in steady]
        out.append(
            _ms_row(
                f"{prefix}: {what} over Java per task",
                extra,
                f"(batch time - the Java query's) x {CORES} cores / {cell.partitions} tasks",
                work,
            )
        )
    for side, job in jobs.items():
        what = SIDES[side]
        for key, figures, how in (
            ("batch time", job.batch_ms, "Spark's triggerExecution per batch"),
            ("Spark's store commit per task", job.commit_ms, "stateOperators commitTimeMs / tasks"),
            ("operator processing per task", job.updates_ms, "allUpdatesTimeMs / tasks"),
        ):
            out.append(_ms_row(f"{prefix}: {what} {key}", [figures[b] for b in steady], how, work))
    return out + _goal_rows(cell, jobs, java_skip)


def _goal_rows(cell: FloorCell, jobs: dict[str, FloorJob], java_skip: str | None) -> list[Result]:
    """``tiered() running aggregate / tiered() idle`` (goal at 200 partitions) and fsstate's
    share, ``(running aggregate - dict state) / Java`` (goal at 500k rows and 4 partitions)."""
    prefix, work = cell.label, _work(cell)
    steady = range(1, cell.steady + 1)
    agg, idle, free = jobs["tiered"], jobs["tiered_idle"], jobs["tiered_dict"]
    floor_goal = GOAL_VS_FLOOR if cell.partitions == FLOOR_GOAL_PARTITIONS else None
    out = [
        ratio_result(
            SUITE,
            f"{prefix}: tiered() running aggregate / tiered() idle",
            [agg.batch_ms[b] / idle.batch_ms[b] for b in steady],
            "tiered() running aggregate batch time / tiered() idle's (the floor: Spark's "
            "Python operator, fsstate's loop and store, a processor that does nothing), "
            "same batch, paired",
            work,
            floor_goal,
            "<=",
        )
    ]
    name = f"{prefix}: fsstate's share (running aggregate - dict state) / Java"
    share_goal = GOAL_SHARE if (cell.rows, cell.partitions) == SHARE_GOAL_CELL else None
    java = jobs.get("java")
    if java is None:
        reason = f"no Java query: {java_skip}"
        out.append(skipped_result(SUITE, name, "x", reason, share_goal, "<="))
        return out
    out.append(
        ratio_result(
            SUITE,
            name,
            [(agg.batch_ms[b] - free.batch_ms[b]) / java.batch_ms[b] for b in steady],
            "(tiered() running aggregate batch time - the same processor's with its state in a "
            "dict of the worker, under tiered()) / the Java running aggregate's batch time, "
            "same batch: what fsstate's state costs against the whole Java batch",
            work,
            share_goal,
            "<=",
        )
    )
    return out


def _ms_row(name: str, samples: list[float], how: str, work: str) -> Result:
    return Result(
        suite=SUITE,
        name=name,
        value=median(samples),
        unit="ms",
        notes=f"{how}; {work}",
        samples=samples,
    )


def run(ctx: BenchContext) -> list[Result]:
    """Each cell's five queries side by side, in one SparkSession."""
    require_pyspark()
    todo = [c for c in cells(ctx) if ctx.wants(c.label)]
    out: list[Result] = []
    if not todo:
        return out
    with java_session(ctx, SUITE, "fsstate-bench-python-floor") as js:
        for cell in todo:
            scratch = js.scratch / f"p{cell.partitions}_{cell.rows // 1000}k"
            jobs = _run_cell(ctx, js.spark, cell, scratch, js.java)
            out += cell_results(cell, jobs, js.java_skip)
    return out
