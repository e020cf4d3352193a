"""The running aggregate on every path fsstate offers, against the same processor in Java on
Spark's own ``transformWithState`` (RocksDB), side by side.

One keyed processor, the running aggregate of ``spark_driver`` (count and sum(v) per key in a
value state, one output row ``(k, n, s)`` per key and batch, time mode None, update output),
per cell in nine queries over the same Parquet micro-batches:

* per flavour, pandas (:class:`~bench.harness.operator_queries.RunningAgg`,
  ``transformWithStateInPandas``) and Row (:class:`~bench.harness.operator_queries.RunningAggRow`,
  ``transformWithState``), four sides: ``tiered()`` on fsstate's keyed loop
  (:mod:`fsstate_spark.tiered.fast_loop`, the session's ``spark.python.worker.module``),
  ``tiered()`` on PySpark's own per-key loop (``fast_loop=False``), Spark's handles (the
  processor alone), and the flow driver (``ops.transform_with_state(_in_pandas)`` +
  ``ops.write_stream``);
* the same processor in Java (``bench/java/RunningAgg.java``, :mod:`bench.harness.java_processor`:
  compiled by the suite with ``javac`` against PySpark's jars; where no JDK compiler exists its
  side is skipped, said in the log, its rows published as skipped).

Cells: {50k, 500k rows per batch} (over rows / 2 keys, ``spark_driver``'s input) x {4, 200
shuffle partitions} (``spark.sql.shuffle.partitions`` when the cell's queries start, the
driver's ``partitions``). Time, on this 2-core machine: a native pandas batch of 500k rows
takes ~3 minutes (``spark_driver``), ``tiered()`` pandas on PySpark's loop about as long (~1 ms
per key: the loop cost rows), and at 200 partitions every Python transformWithState query pays
its 200 tasks' fixed costs whatever the rows (~35 s per batch, ~175 ms per task, measured with
a load average of 9; the Java query ~20 s). So the full run times 8 batches at 50k rows and 4
partitions and 8 at 500k and 4 (a round of a cell's sides takes ~75-80 s; the issue's goal rows
at 4 partitions are decided on them, and single paired batches spread widely: from 0.9 to 1.3
at 50k rows, where three published runs of 5 gave 1.13, 1.23 and 1.27 and dev runs of 6 to 10
about 1.07, and from 0.95 to 1.52 at 500k rows), 3 at 50k and 200, 2 at 500k and 200, and
the 500k cells drop three sides, published as skipped rows with the reason: pandas on Spark's
handles and on PySpark's loop (~3 minutes per batch each; the 50k cells and ``spark_driver``
measure them) and Row on Spark's handles (informative; ``spark_driver`` measures it).
Estimated from those figures: about 52 minutes on an idle machine (~10 + 14 + 14 + 9 minutes
for the cells in order, 3 for the loop cost), more under load. ``--quick``: 5k and 20k rows
at 4 and 20 partitions, 2 timed batches each, the same drops in the 20k cells (7 minutes with a
load average of 5 to 8).
``--only`` narrows by a cell's label (``50k rows/batch, 200 partitions``); ``loop cost`` runs
only the in-process rows.

Sides left out of the whole run (:func:`left_out`), published as skipped rows with the reason:
those this PySpark cannot run (no Row ``transformWithState`` in 4.0; on a minor whose tasks
fsstate's loop does not read, 4.0, ``tiered()`` runs PySpark's loop whatever ``fast_loop``
says, so the fast side is left out and the stock side measures it), and those the environment
variable ``FSSTATE_BENCH_JVM_SIDES`` (:data:`~bench.harness.processor_queries.JVM_SIDES_ENV`,
e.g. ``fast,stock``) does not name (``spark_minors`` runs the 50k-rows, 4-partitions cell so
on each PySpark minor, in that minor's virtualenv).

Per cell its queries (nine, fewer where sides are dropped) run at once, each on its own copy
(hard links) of the input, with a processing-time trigger and ``noDataMicroBatches`` off; round
by round a batch file is given to one query at a time (the order rotating) and the round waits
for it. A query's batch time is Spark's ``triggerExecution``; batch 0 warms up. Per timed
batch, a side's batch time over the Java query's is a sample of its ratio; stock over fast is
a sample of the loop's speed-up. A row's value is the median of its samples, with the
interval of the median, its status decided on that median. Goals
(:data:`~bench.suites.spark_jvm_cells.GOAL_VS_JAVA`): the flow driver <= 1.0x the Java
processor's batch time (Row) and <= 2.0x (pandas) in every cell; ``tiered()`` on fsstate's
loop <= 1.2x (Row) at 4 partitions and <= 2.0x (pandas) in every cell (Row at 200 partitions:
<= 1.1x the idle floor, a goal of ``spark_python_floor``); fsstate's loop >= 4x PySpark's under
``tiered()``. The suite also holds the keyed loop's own cost per key without Spark
(:mod:`bench.suites.spark_jvm_loop`, goal <= 10 µs).

Invariants:

* Every query does the same work: the same processor logic, input files, output rows and sink
  (``foreachBatch`` writing the batch to Spark's ``noop`` format; the Java query's function
  is Java). ``tiered()`` and driver stores stay cached in the workers (``max_cached_stores``
  fits every store of the run), and so do their views: each worker's memory budget is the
  engine's default 1 GiB (:data:`~bench.suites.spark_jvm_cells.MEMORY_LIMIT`, in the rows'
  notes), which holds every side's state of a cell at once.
* Nothing fast but wrong passes: on batch 0 and on one extra small batch after the timed ones,
  every query's sink computes (rows, sum n, sum s, sum crc32(k)) of its output instead; all
  must equal the figures computed from the input files with Arrow, or the suite fails.
* The ``tiered()`` fast-loop queries ran fsstate's loop: a worker note that one of them ran
  PySpark's loop (or that fsstate's loop is off) in the JVM log, while a cell with fast-loop
  queries runs, fails the suite (a cell without any, e.g. on PySpark 4.0, checks nothing).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result
from bench.harness.java_processor import java_checksum, java_session
from bench.harness.operator_queries import INPUT_SCHEMA, batch_table
from bench.harness.processor_queries import (
    JVM_SIDES_ENV,
    Checksum,
    ChecksumSink,
    expected_checksum,
    wait_batch,
)
from bench.harness.processor_sides import JVM_LOG, start_side, stock_loop_notes
from bench.harness.spark import hand_in, require_pyspark
from bench.suites.spark_jvm_cells import (
    FLAVOUR_NAMES,
    MEMORY_LIMIT,
    SIDES,
    SUITE,
    Cell,
    Job,
    LeftOut,
    cell_results,
)
from bench.suites.spark_jvm_loop import run_loop_cost

TRIGGER = "500 milliseconds"
CHECK_ROWS = 2_000  # rows of the extra, checked batch after the timed ones
MAX_CACHED_STORES = 4096  # every fsstate store of the run fits in each worker's pool


def cells(ctx: BenchContext) -> list[Cell]:
    """The cells of this mode (see the module docstring for the time they take)."""
    drop = (("pandas", "handles"), ("pandas", "stock"), ("row", "handles"))
    if ctx.mode == "full":
        return [
            Cell(50_000, 4, 8),
            Cell(50_000, 200, 3),
            Cell(500_000, 4, 8, drop),
            Cell(500_000, 200, 2, drop),
        ]
    return [
        Cell(5_000, 4, 2),
        Cell(5_000, 20, 2),
        Cell(20_000, 4, 2, drop),
        Cell(20_000, 20, 2, drop),
    ]


def left_out() -> dict[tuple[str, str], str]:
    """The (flavour, side) queries left out of every cell of this run, and why (module
    docstring): what this PySpark cannot run, then what :data:`JVM_SIDES_ENV` does not name.

    Raises:
        ValueError: :data:`JVM_SIDES_ENV` names a side that does not exist.
    """
    import pyspark
    from pyspark.sql import GroupedData

    from fsstate_spark.pyspark import minor as minor_of
    from fsstate_spark.pyspark.worker import ADAPTERS, STOCK_ONLY

    version = pyspark.__version__
    out: dict[tuple[str, str], str] = {}
    if not hasattr(GroupedData, "transformWithState"):
        for side in SIDES:
            out[("row", side)] = (
                f"PySpark {version} has no Row transformWithState (transformWithStateInPandas "
                "only; the Row API arrived in 4.1)"
            )
    minor = minor_of(version)
    if minor not in ADAPTERS:
        why = STOCK_ONLY.get(minor) if minor is not None else None
        why = why or f"fsstate's keyed loop does not read PySpark {version}'s tasks"
        for flavour in FLAVOUR_NAMES:
            out.setdefault(
                (flavour, "fast"), f"{why}; tiered() on PySpark's loop is the stock loop side"
            )
    wanted = [s.strip() for s in os.environ.get(JVM_SIDES_ENV, "").split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(SIDES))
    if unknown:
        raise ValueError(f"{JVM_SIDES_ENV} names unknown sides {unknown}; sides: {SIDES}")
    for flavour in FLAVOUR_NAMES:
        for side in SIDES:
            if wanted and side not in wanted:
                why = f"left out of this run ({JVM_SIDES_ENV}={','.join(wanted)})"
                out.setdefault((flavour, side), why)
    return out


def _jobs(cell: Cell, scratch: Path, java: bool, gone: LeftOut) -> list[Job]:
    """The cell's queries (the dropped sides, those ``gone`` from the run and, without Java,
    the Java one left out)."""
    checked = {0, cell.steady + 1}
    kinds = [
        (f, s)
        for f in FLAVOUR_NAMES
        for s in SIDES
        if (f, s) not in cell.drop and (f, s) not in gone
    ]
    if java:
        kinds.append(("java", "java"))
    out = []
    for f, s in kinds:
        name = f"jvm_{cell.tag}_{f}_{s}" if s != "java" else f"jvm_{cell.tag}_java"
        out.append(Job(f, s, scratch / name, name, ChecksumSink(checked)))
    return out


def _start(spark: Any, job: Job, cell: Cell) -> None:
    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.input_dir))
    )
    job.query = start_side(
        spark,
        df,
        flavour=job.flavour,
        side=job.side,
        name=job.name,
        root=job.root,
        sink=job.sink,
        trigger=TRIGGER,
        partitions=cell.partitions,
        max_cached_stores=MAX_CACHED_STORES,
    )


def _feed(ctx: BenchContext, cell: Cell, jobs: list[Job], source: Path) -> dict[int, Checksum]:
    """Hand every batch to every query, one query at a time (the order rotating), waiting for
    each; returns the expected checksums of the checked batches."""
    check_batch = cell.steady + 1
    inputs: list[pa.Table] = []
    want: dict[int, Checksum] = {}
    for b in range(check_batch + 1):
        rows = CHECK_ROWS if b == check_batch else cell.rows
        table = batch_table(b, rows, cell.keys)
        inputs.append(table)
        if b in (0, check_batch):
            want[b] = expected_checksum(inputs)
        path = source / f"batch-{b:05d}.parquet"
        pq.write_table(table, path)
        order = jobs[b % len(jobs) :] + jobs[: b % len(jobs)]
        for job in order:
            hand_in(path, job.input_dir / path.name, 1_600_000_000 + 10 * b)
            job.wall_ms[b], job.rows[b] = wait_batch(job.query, job.tag, b, rows)
            if job.rows[b] != rows:
                raise RuntimeError(f"{job.name}: batch {b} read {job.rows[b]} rows, not {rows}")
            ctx.log(f"  {cell.label} batch {b} {job.tag:<15} {job.wall_ms[b] / 1000:8.2f} s")
    return want


def _check(spark: Any, cell: Cell, jobs: list[Job], want: dict[int, Checksum]) -> None:
    """Every query's checked outputs equal the input's figures."""
    for b, w in want.items():
        got = {
            job.tag: java_checksum(spark, job.name, b)
            if job.side == "java"
            else job.sink.sums.get(b)
            for job in jobs
        }
        if any(g != w for g in got.values()):
            raise AssertionError(
                f"{cell.label}, batch {b}: output checksums (rows, sum n, sum s, sum crc32 k) "
                f"{got} differ from the input's {w}"
            )


def _check_loops(log: Path, start: int, jobs: list[Job]) -> None:
    """No worker note since byte ``start`` of the JVM log says that a fast-loop query ran
    PySpark's loop, or that fsstate's loop is off in a worker
    (:func:`bench.harness.processor_sides.stock_loop_notes`)."""
    bad = stock_loop_notes(log, start, {j.name for j in jobs if j.side == "fast"})
    if bad:
        raise RuntimeError(f"tiered() fast-loop queries ran PySpark's loop: {bad[:3]}")


def _run_cell(
    ctx: BenchContext, spark: Any, cell: Cell, scratch: Path, java: bool, gone: LeftOut
) -> list[Job]:
    """Run the cell's queries side by side; check their outputs and loops."""
    jobs = _jobs(cell, scratch, java, gone)
    source = scratch / "batches"
    source.mkdir(parents=True)
    log = ctx.tmp_dir / JVM_LOG
    log_at = log.stat().st_size if log.exists() else 0
    spark.conf.set("spark.sql.shuffle.partitions", str(cell.partitions))  # read at start
    try:
        for job in jobs:
            job.input_dir.mkdir(parents=True)
            _start(spark, job, cell)
        want = _feed(ctx, cell, jobs, source)
    finally:
        for job in jobs:
            if job.query is not None:
                job.query.stop()
    _check(spark, cell, jobs, want)
    _check_loops(log, log_at, jobs)
    ctx.log(f"  {cell.label}: outputs of batches {sorted(want)} agree with the input")
    return jobs


def run(ctx: BenchContext) -> list[Result]:
    """The loop's cost per key, then each cell's queries side by side."""
    require_pyspark()
    out: list[Result] = []
    if ctx.wants("loop cost"):
        out += run_loop_cost(ctx)
    todo = [c for c in cells(ctx) if ctx.wants(c.label)]
    if not todo:
        return out
    gone = left_out()
    for why in dict.fromkeys(gone.values()):
        which = ", ".join(f"{f}/{s}" for (f, s), w in gone.items() if w == why)
        ctx.log(f"{SUITE}: {which} left out: {why}")
    conf = {"spark.fsstate.memoryLimit": MEMORY_LIMIT}
    with java_session(ctx, SUITE, "fsstate-bench-jvm", conf) as js:
        for cell in todo:
            jobs = _run_cell(ctx, js.spark, cell, js.scratch / cell.tag, js.java, gone)
            out += cell_results(cell, jobs, js.java_skip, gone)
    return out
