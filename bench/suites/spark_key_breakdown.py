"""Where a key's time goes in ``tiered()`` at half a million rows per batch, from one profiled run.

Issue 46's breakdown: the Row running aggregate of ``spark_jvm`` (:class:`bench.harness.
operator_queries.RunningAggRow`: a value state read and updated per key, one output Row per key)
under ``tiered()`` on fsstate's keyed loop, and the reference that isolates fsstate: the same
processor with its state in a plain dict of the worker process
(:class:`bench.harness.operator_queries.DictAggRow`, also under ``tiered()``: the loop, the
conversions and an empty store's open and commit are the same). The two queries run side by
side in one SparkSession (local[2], 4 shuffle partitions), taking turns to go first, over the
same Parquet micro-batches (500,000 rows over 250,000 keys, 7 batches, in full runs; 50,000
over 25,000, 3 batches, in quick ones), with every task profiled (``FSSTATE_PROFILE_DIR``,
:mod:`fsstate_spark.tiered.task_profile`).

Each function's own time in the profiles is charged to a phase by
:func:`bench.harness.key_phases.phase_times` (the phase of the function if it is one of a
phase's entry points, :data:`~bench.harness.key_phases.PHASES`, else its callers' phases, in
their shares of its cumulative time). The phases: reading and converting the input (Arrow
to Rows), the processor's own code (its module), state reads on hot views, first-touch reads
(a key without a view: the table's whole-load or a point lookup), state writes, the commit
(sealing, Parquet, manifest; its fsync apart), the store's open or catch-up, the output's
conversion (Rows to Arrow) and the loop with Spark's protocol (the rest of fsstate's loop and
PySpark's state-server client).

Rows (informative, no goal): per phase and query, µs per key (the batch's profiled seconds
over its distinct keys), and fsstate's share: the running aggregate's minus the dict's, per
key and as a fraction of the running aggregate's whole task time. cProfile counts every Python
call, so the absolute figures are several times the unprofiled ones (Python-heavy phases more
than Arrow-heavy ones); the shares are what the rows are for. Batch 0 (first touch of every
key) is a row of its own; the others' median over batches 1 on.

``bench/results/spark_key_breakdown_before.json`` is this suite run once on the code before
issue 46's cuts (2cc2af5 with e463797's profiler hook, suite name changed), the performance
page's "before" columns; ``make bench`` does not re-run it.

Invariants: both queries read the same rows per batch (checked in their progress); profiles
are matched to a query by the processor's class in their file names and to a batch by stage
order (each batch of a query runs one stage of its operator).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result
from bench.harness.key_phases import phase_rows, profiles_by_class
from bench.harness.operator_queries import (
    INPUT_SCHEMA,
    DictAggRow,
    RunningAggRow,
    batch_table,
)
from bench.harness.processor_queries import OUTPUT_DDL, ChecksumSink, wait_batch
from bench.harness.spark import hand_in, require_pyspark, session, stop_queries

SUITE = "spark_key_breakdown"
PARTITIONS = 4
TRIGGER = "200 milliseconds"
QUERIES = {"RunningAggRow": "running aggregate", "DictAggRow": "dict state (reference)"}


def _start(spark: Any, name: str, proc: Any, root: Path) -> Any:
    from fsstate_spark import tiered

    (root / "input").mkdir(parents=True)
    wrapped = tiered(proc, state_uri=str(root / "state"), name=name, max_cached_stores=4096)
    return (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(root / "input"))
        .groupBy("k")
        .transformWithState(wrapped, OUTPUT_DDL, "Update", "None")
        .writeStream.outputMode("update")
        .foreachBatch(ChecksumSink(set()))
        .option("checkpointLocation", str(root / "checkpoint"))
        .queryName(name)
        .trigger(processingTime=TRIGGER)
        .start()
    )


def run(ctx: BenchContext) -> list[Result]:
    """Both queries, profiled, over the same batches; the phases per key."""
    require_pyspark()
    rows = ctx.pick(50_000, 500_000)
    keys = rows // 2
    batches = ctx.pick(3, 7)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    profiles = scratch / "profiles"
    spark = session(
        ctx,
        "fsstate-bench-key-breakdown",
        **{
            "spark.sql.shuffle.partitions": str(PARTITIONS),
            "spark.executorEnv.FSSTATE_PROFILE_DIR": str(profiles),
        },
    )
    queries: list[Any] = []
    distinct: list[int] = []
    try:
        jobs = [
            (cls, _start(spark, f"breakdown_{cls}", proc, scratch / cls))
            for cls, proc in (("RunningAggRow", RunningAggRow()), ("DictAggRow", DictAggRow()))
        ]
        queries = [q for _, q in jobs]
        source = scratch / "batches"
        source.mkdir()
        for b in range(batches):
            table = batch_table(b, rows, keys)
            distinct.append(len(pc.unique(table.column("k"))))
            path = source / f"batch-{b:05d}.parquet"
            pq.write_table(table, path)
            for cls, q in jobs if b % 2 == 0 else jobs[::-1]:
                hand_in(path, scratch / cls / "input" / path.name, 1_600_000_000 + 10 * b)
                ms, got = wait_batch(q, cls, b, rows)
                if got != rows:
                    raise RuntimeError(f"{cls}: batch {b} read {got} rows")
                ctx.log(f"  batch {b} {cls:<14} {ms / 1000:6.2f} s (profiled)")
    finally:
        stop_queries(queries, spark)
    try:
        return _results(profiles_by_class(profiles), distinct, rows)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _results(by_class: dict[str, list[list[Path]]], distinct: list[int], rows: int) -> list[Result]:
    work = (
        f"{rows:,} rows per batch over {rows // 2:,} keys (about {distinct[-1]:,} distinct a "
        f"batch), Row running aggregate, {PARTITIONS} partitions, local[2], every task "
        "profiled (cProfile: absolute figures inflated, shares meaningful)"
    )
    return phase_rows(SUITE, by_class, distinct, QUERIES, work)
