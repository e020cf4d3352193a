"""Where a micro-batch's time goes: fsstate's windowed count at 4 and at 200 partitions.

The query is the windowed count of :mod:`bench.suites.spark_matrix` (2 rows per key: 100,000
rows per batch over 50,000 keys in full runs, 20,000 over 10,000 in quick ones), one query per
partition count, side by side in one SparkSession (local[2]), each on its own hard links of the same
Parquet batch files, the two taking turns to go first. Per measured batch, in ms:

* Spark's progress (``durationMs``): ``latestOffset``, ``getBatch``, ``queryPlanning``,
  ``walCommit``, ``addBatch`` (the ``foreachBatch`` call), ``commitOffsets`` and the rest of
  ``triggerExecution``;
* the driver, inside ``addBatch`` (the flow's :class:`fsstate_spark.operators.driver.Driver`,
  its methods wrapped by this module, nothing changed in what they do): the watermarks from
  the previous batch's receipts, building the plan, the job (the sink: the same ``noop``
  write the driver does without one), the commit check (receipts; manifests only for
  partitions without one: counted) and the rest;
* the job, from Spark's event log (``spark.eventLog.enabled``, read after the session
  stops): the stage before the shuffle (read, combine, shuffle write) and the stage of the
  operator's tasks, each from submission to completion, and the time between the sink's call
  and the job's stages (planning the write, submitting);
* the operator's tasks, summed over the batch's N tasks: wall time (launch to finish), the
  executor's deserialization and run time, the scheduler's share (wall minus those and the
  result's serialization), shuffle fetch waits, and, from the epoch log the workers append to
  (``FSSTATE_EPOCH_LOG``, :mod:`fsstate.operators.runner`), each epoch's acquire, process
  and commit; run time minus the epoch is the task's own work outside fsstate's epoch (the
  Arrow transfer between the JVM and the Python worker, concatenating and casting the input,
  handing the output back). With 2 cores a stage's wall time is about half its tasks' sum.

Invariants: nothing is compared, so no goal; every row is informative, its value the median
over the measured batches (batch 0 loads, batch 1 warms up), its samples one per batch. The
event log and the epoch log cost both queries alike (the event log is written by Spark's
listener thread; an epoch line is one append).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median
from bench.harness.matrix import (
    EPOCH_LOG_ENV,
    TRIGGER,
    Cell,
    Job,
    matrix_table,
    read_epoch_log,
    wait_batch,
)
from bench.harness.operator_queries import INPUT_SCHEMA, fsstate_flow
from bench.harness.spark import hand_in, require_pyspark, session, stop_queries

SUITE = "spark_breakdown"
PARTITIONS = (4, 200)
PER_KEY = 2
TITLE = "windowed count"
PROGRESS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
DRIVER = ("watermarks", "plan", "job", "commit check")

Timings = dict[int, dict[str, float]]  # batch -> part -> ms


def _sizes(ctx: BenchContext) -> tuple[int, int, int, int]:
    """(rows per batch, keys, unmeasured batches, measured batches)."""
    return (100_000, 50_000, 2, 6) if ctx.mode == "full" else (20_000, 10_000, 2, 3)


def _marking_sink(timings: Timings) -> Callable[[Any, int], None]:
    """The query's sink: it notes when each batch's job starts and writes to ``noop`` (the
    driver times its own steps, ``Driver.batch_ms``, copied into ``timings`` at the end)."""

    def sink(df: Any, batch_id: int) -> None:
        timings.setdefault(batch_id, defaultdict(float))["sink_start_unix_ms"] = time.time() * 1000
        df.write.format("noop").mode("overwrite").save()

    return sink


def _start(spark: Any, job: Job, timings: Timings) -> Any:
    from fsstate_spark import operators as ops

    n = job.cell.partitions
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.input_dir))
    )
    flow = fsstate_flow(df, job.cell.group, name=job.name)
    writer = ops.write_stream(flow, checkpoint_location=str(job.checkpoint), partitions=n)
    driver = writer.fsstate_driver  # type: ignore[union-attr]
    driver.sink = _marking_sink(timings)
    job.query = writer.queryName(job.name).trigger(processingTime=TRIGGER).start()
    return driver


def run(ctx: BenchContext) -> list[Result]:
    """Run the two queries and break their batches down."""
    require_pyspark()
    rows, keys, unmeasured, measured = _sizes(ctx)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    spark = session(ctx, "fsstate-bench-breakdown", **_logs(scratch))
    jobs = [Job(Cell("window", n, PER_KEY), "fsstate", scratch / f"p{n}" / "input",
                scratch / f"p{n}" / "checkpoint") for n in PARTITIONS]  # fmt: skip
    timings: dict[str, Timings] = {j.name: {} for j in jobs}
    ids: dict[str, str] = {}
    drivers: dict[str, Any] = {}
    try:
        for job in jobs:
            job.input_dir.mkdir(parents=True)
            drivers[job.name] = _start(spark, job, timings[job.name])
            ids[job.name] = str(job.query.id)
        _feed(ctx, scratch, jobs, rows, keys, unmeasured + measured)
    finally:
        stop_queries((job.query for job in jobs), spark)
    for name, driver in drivers.items():
        for batch, steps in driver.batch_ms.items():
            timings[name].setdefault(batch, defaultdict(float)).update(steps)
    try:
        events = [
            json.loads(x)
            for p in (scratch / "events").iterdir()
            for x in p.read_text().splitlines()
        ]
        epochs = read_epoch_log(scratch / "epochs.jsonl")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    steady = list(range(unmeasured, unmeasured + measured))
    out: list[Result] = []
    for job in jobs:
        parts = breakdown(job, timings[job.name], _spark_jobs(events, ids[job.name]), epochs)
        work = (
            f"{rows:,} rows per batch over {keys:,} keys, {job.cell.partitions} partitions, "
            f"local[2], batches {steady[0]}-{steady[-1]}"
        )
        out += _rows(ctx, job, parts, steady, work)
    return out


def _logs(scratch: Path) -> dict[str, str]:
    """The session's settings: Spark's event log under ``scratch/events`` (made here) and the
    workers' epoch log ``scratch/epochs.jsonl``; no no-data micro-batches."""
    events_dir = scratch / "events"
    events_dir.mkdir()
    return {
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(events_dir),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        f"spark.executorEnv.{EPOCH_LOG_ENV}": str(scratch / "epochs.jsonl"),
    }


def _feed(
    ctx: BenchContext, scratch: Path, jobs: list[Job], rows: int, keys: int, batches: int
) -> None:
    """Give every query each batch in turn (the one going first alternating), waiting for it."""
    for b in range(batches):
        path = scratch / f"batch-{b:05d}.parquet"
        pq.write_table(matrix_table(b, keys, PER_KEY), path)
        mtime = 1_600_000_000 + 10 * b
        for job in jobs[b % 2 :] + jobs[: b % 2]:
            target = job.input_dir / path.name
            hand_in(path, target, mtime)
            wait_batch(job, b, rows)
            ctx.log(f"  batch {b} {job.name:<28} {job.wall_ms(b) / 1000:7.2f} s")


def _rows(
    ctx: BenchContext, job: Job, parts: dict[int, dict[str, float]], steady: list[int], work: str
) -> list[Result]:
    """One row per part of ``job``'s batches (ms, or a count), its samples one per batch."""
    for b in steady:
        ctx.log(
            f"  {job.name} batch {b}: " + ", ".join(f"{k} {v:.0f}" for k, v in parts[b].items())
        )
    out: list[Result] = []
    for name in parts[steady[0]]:
        xs = [parts[b][name] for b in steady]
        out.append(
            Result(
                SUITE,
                f"{TITLE}, {job.cell.partitions} partitions: {name}",
                median(xs),
                "count" if name.startswith(("tasks:", "stores:")) else "ms",
                notes=work,
                samples=xs,
            )
        )
    return out


def _spark_jobs(events: list[dict[str, Any]], query_id: str) -> dict[int, dict[str, Any]]:
    """Per batch of the query, its Spark jobs' stages and tasks from the event log."""
    stage_batch: dict[int, int] = {}
    jobs: dict[int, dict[str, Any]] = {}
    for e in events:
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            if props.get("sql.streaming.queryId") != query_id:
                continue
            b = int(props.get("streaming.sql.batchId", -1))
            entry = jobs.setdefault(b, {"submitted": [], "completed": [], "stages": {}})
            entry["submitted"].append(e["Submission Time"])
            for s in e["Stage IDs"]:
                stage_batch[s] = b
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            b = stage_batch.get(info["Stage ID"], -1)
            if b in jobs:
                stage = jobs[b]["stages"].setdefault(info["Stage ID"], {"tasks": []})
                stage.update(
                    n=info["Number of Tasks"],
                    start=info["Submission Time"],
                    end=info["Completion Time"],
                )
        elif kind == "SparkListenerTaskEnd":
            b = stage_batch.get(e["Stage ID"], -1)
            if b in jobs:
                stage = jobs[b]["stages"].setdefault(e["Stage ID"], {"tasks": []})
                stage["tasks"].append(e)
    return jobs


def breakdown(
    job: Job,
    driver: Timings,
    spark_jobs: dict[int, dict[str, Any]],
    epochs: list[dict[str, Any]],
) -> dict[int, dict[str, float]]:
    """Per batch of ``job``, the parts of its time in ms (see the module docstring)."""
    out: dict[int, dict[str, float]] = {}
    for b, progress in job.progress.items():
        d = progress["durationMs"]
        parts: dict[str, float] = {"triggerExecution": float(d["triggerExecution"])}
        for k in PROGRESS:
            parts[k] = float(d.get(k, 0))
        parts["other progress"] = parts["triggerExecution"] - sum(parts[k] for k in PROGRESS)
        mine = driver.get(b, {})
        for k in DRIVER:
            parts[f"driver {k}"] = mine.get(k, 0.0)
        parts["driver rest of addBatch"] = parts["addBatch"] - sum(mine.get(k, 0.0) for k in DRIVER)
        parts["stores: manifest reads"] = mine.get("manifest reads", 0.0)
        stages = sorted(spark_jobs.get(b, {}).get("stages", {}).items())
        with_end = [s for _, s in stages if "end" in s]
        if with_end:
            first = min(s["start"] for s in with_end)
            parts["job: before its stages"] = first - mine.get("sink_start_unix_ms", first)
        op_stage = max(with_end, key=lambda s: s["n"], default=None) if with_end else None
        for s in with_end:
            name = "job: operator stage" if s is op_stage else "job: pre-shuffle stage"
            parts[name] = parts.get(name, 0.0) + s["end"] - s["start"]
        tasks = op_stage["tasks"] if op_stage else []
        parts["tasks: operator tasks"] = float(len(tasks))
        _task_parts(parts, tasks)
        ep = [e for e in epochs if e["operator"] == job.name and e["epoch"] == b]
        for k in ("acquire_ms", "process_ms", "commit_ms", "total_ms"):
            parts[f"task sum: epoch {k[:-3]}"] = sum(e[k] for e in ep)
        parts["task sum: run outside the epoch"] = (
            parts.get("task sum: executor run", 0.0) - parts["task sum: epoch total"]
        )
        for s in ("hit", "caught_up", "restored"):
            parts[f"stores: {s.replace('_', ' ')}"] = float(sum(e["store"] == s for e in ep))
        out[b] = parts
    return out


def _task_parts(parts: dict[str, float], tasks: list[dict[str, Any]]) -> None:
    """Sums over the operator stage's tasks (ms), from their TaskEnd events."""
    wall = run = deser = ser = fetch = 0.0
    for t in tasks:
        info, metrics = t["Task Info"], t.get("Task Metrics") or {}
        wall += info["Finish Time"] - info["Launch Time"]
        run += metrics.get("Executor Run Time", 0)
        deser += metrics.get("Executor Deserialize Time", 0)
        ser += metrics.get("Result Serialization Time", 0)
        fetch += (metrics.get("Shuffle Read Metrics") or {}).get("Fetch Wait Time", 0)
    parts["task sum: wall"] = wall
    parts["task sum: executor run"] = run
    parts["task sum: deserialize"] = deser
    parts["task sum: scheduler and rest"] = wall - run - deser - ser
    parts["task sum: shuffle fetch wait"] = fetch
