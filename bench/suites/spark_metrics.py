"""What recording and reporting fsstate's metrics costs a batch: the same queries, on and off.

Issue 47's goal: recording each version's summary (rows total, updated, removed, expired, bytes
and files written and read, memory, spill, commit time: the manifest's ``summary``), the tasks'
receipts, and the driver's reporting (:func:`fsstate_spark.metrics.listen`: a
StreamingQueryListener computing each batch's :class:`fsstate_spark.metrics.model.BatchProgress`,
writing its JSON line and feeding a Prometheus exporter) cost at most 2 % of batch time, at 4
and at 200 partitions.

Per cell (50k rows per batch over 25k keys, Row running aggregate; 4 and 200 partitions) and
product (``tiered()`` on fsstate's keyed loop, the flow driver), two queries run side by side in
one SparkSession (local[2]), each on its own hard links of the same Parquet batch files, taking
turns to go first: metrics on (the session's listener reports it, JSON lines and a Prometheus
sink) and off (``metrics=False``: no summary recorded, no receipt, the listener skips the
query). Half way the pair stops and restarts from its checkpoints in the other order (the
first batch after is not measured): a query started before the other one in the same session
waits longer for Spark's state server in its tasks' first calls (~5 ms a task at 200
partitions, measured with timing wrappers around ``init`` in the workers, whichever side was
first), so a fixed order biased the ratio by ~2-3 %. A batch's time is Spark's
``triggerExecution``, read with :func:`~bench.harness.spark.batch_progress` (``lastProgress``;
polling ``recentProgress`` converts every kept progress on each call and loaded the driver),
plus, on
the "on" side, the driver's reporting of that batch: the listener's own time in its
``onQueryProgress`` from the JVM's call on (its reads of the event, figures, JSON line,
Prometheus), which runs after the batch on Spark's listener bus and so is outside
``triggerExecution``. The next file is handed in only once the
listener has reported the batch, so its work never runs inside another query's batch.

Rows: per product and cell, ``metrics on / metrics off`` batch time, paired by batch (goal
<= 1.02); each query's batch time and the listener's time per batch (informative).

Invariants: the same input rows per batch for all (checked in each query's progress); batch 0
and 1 and the first after the restart are not measured; every query's output of the last
batch is checked against the input (:class:`bench.harness.processor_queries.ChecksumSink`);
the "on" queries' reported figures exist for every measured batch (the listener's lines are
counted), the "off" queries' never.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median, ratio_result, spread_text
from bench.harness.operator_queries import INPUT_SCHEMA, RunningAggRow, batch_table
from bench.harness.processor_queries import OUTPUT_DDL, ChecksumSink, expected_checksum
from bench.harness.spark import (
    batch_progress,
    hand_in,
    require_pyspark,
    session,
    stop_queries,
)

SUITE = "spark_metrics"
PRODUCTS = {"tiered": "tiered() fast loop", "driver": "flow driver"}
SIDES = ("on", "off")
GOAL = 1.02  # metrics on / off, at most
TRIGGER = "100 milliseconds"  # the idle query's polling (a listing) competes less often
MAX_CACHED_STORES = 4096
WARM = 2  # batches not measured at the start (and one after the restart)


@dataclass(frozen=True)
class Cell:
    """Rows per batch (over ``rows // 2`` keys) at a partition count."""

    rows: int
    partitions: int

    @property
    def label(self) -> str:
        """``50k rows/batch, 4 partitions``."""
        return f"{self.rows // 1000}k rows/batch, {self.partitions} partitions"


@dataclass
class _Job:
    product: str
    side: str
    root: Path
    name: str
    sink: ChecksumSink
    query: Any = None
    wall_ms: dict[int, float] = field(default_factory=dict)
    report_ms: dict[int, float] = field(default_factory=dict)  # the listener's time per batch

    @property
    def input_dir(self) -> Path:
        return self.root / "input"


def cells(ctx: BenchContext) -> list[Cell]:
    """50k rows at 4 and 200 partitions (quick: 20k rows)."""
    rows = 50_000 if ctx.mode == "full" else 20_000
    return [Cell(rows, 4), Cell(rows, 200)]


def _start(spark: Any, job: _Job, cell: Cell) -> None:
    from fsstate_spark import operators as ops
    from fsstate_spark import tiered

    on = job.side == "on"
    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.input_dir))
    )
    grouped = df.groupBy("k")
    checkpoint = str(job.root / "checkpoint")
    if job.product == "driver":
        writer = ops.write_stream(
            ops.transform_with_state(grouped, RunningAggRow(), OUTPUT_DDL, "Update", "None"),
            checkpoint_location=checkpoint,
            sink=job.sink,
            partitions=cell.partitions,
            max_cached_stores=MAX_CACHED_STORES,
            metrics=on,
        )
    else:
        proc = tiered(
            RunningAggRow(),
            state_uri=str(job.root / "state"),
            name=job.name,
            max_cached_stores=MAX_CACHED_STORES,
            metrics=on,
        )
        writer = (
            grouped.transformWithState(proc, OUTPUT_DDL, "Update", "None")
            .writeStream.outputMode("update")
            .foreachBatch(job.sink)
            .option("checkpointLocation", checkpoint)
        )
    job.query = writer.queryName(job.name).trigger(processingTime=TRIGGER).start()


def _wait(job: _Job, batch: int, rows: int) -> float:
    """The query's ``triggerExecution`` (ms) of ``batch``, once its input rows are in."""
    p = batch_progress(job.query, batch, job.name)
    if int(p["numInputRows"]) != rows:
        raise RuntimeError(f"{job.name}: batch {batch} read {p['numInputRows']} rows")
    return float(p["durationMs"]["triggerExecution"])


def _reported_ms(reports: dict[tuple[str, int], float], job: _Job, batch: int) -> float:
    """The listener's time on ``job``'s ``batch`` (ms), once it has handled its progress."""
    import time

    deadline = time.monotonic() + 120
    while (job.name, batch) not in reports:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job.name}: the listener never saw batch {batch}")
        time.sleep(0.01)
    return reports[(job.name, batch)]


def _feed(
    ctx: BenchContext,
    cell: Cell,
    jobs: list[_Job],
    source: Path,
    batch_ids: range,
    reports: dict[tuple[str, int], float],
) -> None:
    """Batches ``batch_ids`` to every query, one query at a time (the order rotating), each
    after the listener has handled the previous one."""
    for b in batch_ids:
        path = source / f"batch-{b:05d}.parquet"
        pq.write_table(batch_table(b, cell.rows, cell.rows // 2), path)
        for job in jobs[b % len(jobs) :] + jobs[: b % len(jobs)]:
            hand_in(path, job.input_dir / path.name, 1_600_000_000 + 10 * b)
            job.wall_ms[b] = _wait(job, b, cell.rows)
            job.report_ms[b] = _reported_ms(reports, job, b)
            ctx.log(
                f"  {cell.label} batch {b} {job.name:<28} {job.wall_ms[b] / 1000:7.2f} s"
                f" + listener {job.report_ms[b]:.1f} ms"
            )


def _check_output(cell: Cell, jobs: list[_Job], batches: int) -> None:
    """Every query's output of the last batch matches the input's checksum."""
    want = expected_checksum([batch_table(b, cell.rows, cell.rows // 2) for b in range(batches)])
    for job in jobs:
        if job.sink.sums.get(batches - 1) != want:
            raise AssertionError(
                f"{job.name}: batch {batches - 1} output {job.sink.sums.get(batches - 1)} "
                f"differs from the input's {want}"
            )


def _reported(lines: Path) -> dict[str, set[int]]:
    """Query name -> the batches the listener wrote a line for."""
    out: dict[str, set[int]] = {}
    if lines.exists():
        for line in lines.read_text().splitlines():
            obj = json.loads(line)
            out.setdefault(str(obj.get("name")), set()).add(int(obj["batchId"]))
    return out


def _run_cell(
    ctx: BenchContext,
    spark: Any,
    cell: Cell,
    scratch: Path,
    batches: dict[str, int],
    lines: Path,
    reports: dict[tuple[str, int], float],
) -> list[_Job]:
    jobs = [
        _Job(
            p,
            s,
            scratch / f"{p}-{s}",
            f"metrics_p{cell.partitions}_{p}_{s}",
            ChecksumSink({batches[p] - 1}),
        )
        for p in PRODUCTS
        for s in SIDES
    ]
    spark.conf.set("spark.sql.shuffle.partitions", str(cell.partitions))
    for product in PRODUCTS:  # a pair at a time: on and off, side by side
        pair = [j for j in jobs if j.product == product]
        source = scratch / f"batches-{product}"
        source.mkdir(parents=True)
        for job in pair:
            job.input_dir.mkdir(parents=True)
        restart = restart_batch(batches[product])
        try:  # the first half started on, off; the second off, on (from their checkpoints)
            for order, ids in (
                (pair, range(restart)),
                (pair[::-1], range(restart, batches[product])),
            ):
                for job in order:
                    _start(spark, job, cell)
                _feed(ctx, cell, order, source, ids, reports)
                for job in order:
                    job.query.stop()
                    job.query = None
        finally:
            for job in pair:
                if job.query is not None:
                    job.query.stop()
        _check_output(cell, pair, batches[product])
    reported = _reported(lines)
    for job in jobs:
        got = reported.get(job.name, set())
        if job.side == "on" and not set(range(2, batches[job.product])) <= got:
            raise AssertionError(f"{job.name}: the listener reported batches {sorted(got)}")
        if job.side == "off" and got:
            raise AssertionError(f"{job.name}: metrics off, yet reported {sorted(got)}")
    return jobs


def _results(cell: Cell, jobs: list[_Job], steady: dict[str, list[int]]) -> list[Result]:
    by = {(j.product, j.side): j for j in jobs}
    out: list[Result] = []
    for product, label in PRODUCTS.items():
        batches = steady[product]
        work = (
            f"{cell.rows:,} rows per batch over {cell.rows // 2:,} keys, Row running aggregate, "
            f"{cell.partitions} partitions, local[2], batches {batches[0]}-{batches[-1]} but "
            f"{restart_batch(batches[-1] + 1)} (restarted in the other order before it)"
        )
        on, off = by[(product, "on")], by[(product, "off")]
        on_ms = {b: on.wall_ms[b] + on.report_ms[b] for b in batches}
        ratios = [on_ms[b] / off.wall_ms[b] for b in batches]
        secs = "; ".join(
            f"{side} {median(list(ms)) / 1000:.3g} s/batch"
            for side, ms in (("on", on_ms.values()), ("off", [off.wall_ms[b] for b in batches]))
        )
        out.append(
            ratio_result(
                SUITE,
                f"{label}, {cell.label}: metrics on / off",
                ratios,
                "batch time with fsstate's metrics recorded and reported (summary, receipts; "
                "on the on side plus the listener's time on the batch: figures, JSON line, "
                "Prometheus sink) / without, paired by batch",
                f"{secs}; {work}",
                GOAL,
                "<=",
            )
        )
        for side in SIDES:
            ms = [by[(product, side)].wall_ms[b] for b in batches]
            out.append(
                Result(
                    suite=SUITE,
                    name=f"{label}, {cell.label}, metrics {side}: batch time",
                    value=median(ms),
                    unit="ms",
                    notes=f"Spark's triggerExecution per batch ({spread_text(ms)}); {work}",
                    samples=ms,
                )
            )
        ms = [on.report_ms[b] for b in batches]
        out.append(
            Result(
                suite=SUITE,
                name=f"{label}, {cell.label}, metrics on: listener time per batch",
                value=median(ms),
                unit="ms",
                notes=(
                    "the listener's onQueryProgress on the batch (its figures from the tasks' "
                    f"receipts, the JSON line, the Prometheus sink; {spread_text(ms)}); {work}"
                ),
                samples=ms,
            )
        )
    return out


@contextmanager
def _timed_listeners() -> Iterator[dict[tuple[str, int], float]]:
    """Time the listener's handling of each progress event per (query name, batch) in ms, from
    the JVM's call on (its reads of the event included): the returned dict fills as Spark's
    listener bus calls it. fsstate's Py4J listener class is patched while the context is
    open."""
    import importlib
    import time

    listen_module = importlib.import_module("fsstate_spark.metrics.listen")
    reports: dict[tuple[str, int], float] = {}
    cls: Any = listen_module._ProgressOnly  # the bench times fsstate's own listener
    inner = cls.onQueryProgress

    def timed(self: Any, jevent: Any) -> None:
        t0 = time.perf_counter()
        try:
            inner(self, jevent)
        finally:
            ms = (time.perf_counter() - t0) * 1000
            p = jevent.progress()
            reports[(str(p.name()), int(p.batchId()))] = ms

    cls.onQueryProgress = timed
    try:
        yield reports
    finally:
        cls.onQueryProgress = inner


def restart_batch(batches: int) -> int:
    """The batch after which both queries of a pair restart in the other order: the first
    batch of the second half, a warm-up (Spark plans the restarted query in it)."""
    return WARM + (batches - WARM) // 2


def measured_batches(ctx: BenchContext, product: str, cell: Cell) -> int:
    """Batches measured per query: 19 (quick: 4), except ``tiered()`` at 200 partitions,
    whose batch takes ~25 s here: 11."""
    if ctx.mode != "full":
        return 4
    return 11 if product == "tiered" and cell.partitions >= 100 else 19


def run(ctx: BenchContext) -> list[Result]:
    """Every cell's four queries side by side."""
    require_pyspark()
    from fsstate_spark.metrics import listen
    from fsstate_spark.metrics.prometheus import PrometheusExporter

    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    spark = session(ctx, "fsstate-bench-metrics")
    lines = scratch / "progress.jsonl"
    listen(spark, path=str(lines), sinks=[PrometheusExporter()])
    out: list[Result] = []
    with _timed_listeners() as reports:
        try:
            for cell in cells(ctx):
                if not ctx.wants(cell.label):
                    continue
                counts = {p: WARM + measured_batches(ctx, p, cell) + 1 for p in PRODUCTS}
                steady = {
                    p: [b for b in range(WARM, n) if b != restart_batch(n)]
                    for p, n in counts.items()
                }
                jobs = _run_cell(
                    ctx, spark, cell, scratch / f"p{cell.partitions}", counts, lines, reports
                )
                out += _results(cell, jobs, steady)
        finally:
            stop_queries(spark.streams.active, spark)  # a failure's leftovers
            shutil.rmtree(scratch, ignore_errors=True)
    return out
