"""fsstate's whole-batch operators against Spark's built-ins over a matrix of shapes, side by side.

Cells: {4, 200 partitions} x {2, 20 rows per key per batch} x {windowed count, running
aggregate}. The queries are those of ``spark_operators`` (:mod:`bench.harness.operator_queries`:
``fsstate_flow`` and ``builtin_query``), the cells' shapes and input those of
:mod:`bench.harness.matrix`: the windowed count is ``withWatermark("t", "5 seconds")`` then a
count per (10-second window, key), append output; the running aggregate is ``count`` and
``sum(v)`` per key, update output (fsstate: a retracting aggregate over an insert-only stream,
upsert output).

Shapes (full run; quick runs are smaller): 2 rows/key is 100,000 rows per batch over 50,000
keys, 20 rows/key 400,000 rows over 20,000 keys. Every key of the shape appears exactly that
many times in every batch (a seeded permutation), with event times of batch ``b`` in
``[10 b, 10 b + 10)`` seconds, so each batch fills one window and the watermark closes the one
before.

Per cell three queries run: ``builtin`` (Spark's operator, RocksDB state), ``fsstate``
(``ops.write_stream``, its default store settings: commits fsync'ed) and ``fsstate fsync=False``
(the same with ``fsync=False``). Spark does not fsync its checkpoint or RocksDB files on local
disk, so the fsync=False rows compare like with like on durability, and the default rows show
what fsstate's durability costs on top.

Invariants (both sides do the same work):

* Every query of every cell runs at once in one SparkSession (local[2]), each on its own copy
  (hard links) of the same Parquet micro-batch files, with a processing-time trigger and
  ``noDataMicroBatches`` disabled (a window closed by the watermark is emitted by the next
  batch with data, on both sides), writing to Spark's ``noop`` sink.
* The partition count N of a cell is ``spark.sql.shuffle.partitions`` when the built-in query
  starts (checked on every batch in its progress: ``numShufflePartitions``) and the flow's
  ``partitions=N`` (checked in the epoch log: N partitions committed every epoch). The
  session's shuffle partitions are also N when a flow starts.
* fsstate's stores stay cached in the Python workers between batches
  (``max_cached_stores`` large enough for every query of the run; one query alone at 200
  partitions fits the default), as Spark keeps every query's loaded state store providers.
  A task runs in either Python worker, so an epoch finds its store cached at the previous
  version (hit), an older copy it catches up, or none (restored from disk); and Spark stops
  a Python worker idle for a minute (a constant of its worker factory), so if the other
  queries' batches keep the workers idle that long (the built-in's at 200 partitions on a
  loaded machine), the next fsstate batch restores every store. The notes count the
  outcomes of the measured epochs.
* Round by round, a batch file is given to one query at a time and the round waits for it:
  cells in a rotating order, the three queries of a cell one after the other, the one going
  first rotating. A query's batch time is Spark's ``triggerExecution``; batch 0 (the first
  load) is not measured; every query's input rows are checked per batch.
* Each row's samples are per measured batch, paired within the cell: the built-in's batch time
  over fsstate's (so > 1 means fsstate is faster). Value: their median; status decided on it
  (goal: >= 1.5x in every cell); the fsync=False rows are informative.
* The workers log every committed epoch (``FSSTATE_EPOCH_LOG``, one JSON line each: a few
  microseconds per epoch) for the checks and counts above.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median, ratio_result, spread_text
from bench.harness.matrix import (
    EPOCH_LOG_ENV,
    GROUPS,
    PER_KEY,
    TRIGGER,
    Cell,
    Job,
    matrix_table,
    read_epoch_log,
    shapes,
    wait_batch,
)
from bench.harness.operator_queries import INPUT_SCHEMA, builtin_query, fsstate_flow
from bench.harness.spark import hand_in, require_pyspark, session, stop_queries

SUITE = "spark_matrix"
GOAL_BUILTIN = 1.5
PARTITIONS = (4, 200)
SIDES = ("builtin", "fsstate", "fsstate_nofsync")
SIDE_LABEL = {"builtin": "builtin", "fsstate": "fsstate", "fsstate_nofsync": "fsstate fsync=False"}
MAX_CACHED_STORES = 4096  # every fsstate store of the run fits in each worker's pool


def batch_counts(ctx: BenchContext) -> tuple[int, int]:
    """(warm-up batches, measured batches): 9 samples give a 95 % interval of the median."""
    return (1, 9) if ctx.mode == "full" else (1, 3)


def _start(spark: Any, job: Job) -> None:
    from fsstate_spark import operators as ops

    n = job.cell.partitions
    spark.conf.set("spark.sql.shuffle.partitions", str(n))  # read when the query starts
    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.input_dir))
    )
    if job.side == "builtin":
        out, mode = builtin_query(df, job.cell.group)
        writer = (
            out.writeStream.outputMode(mode)
            .format("noop")
            .option("checkpointLocation", str(job.checkpoint))
        )
    else:
        store: dict[str, Any] = {"fsync": False} if job.side == "fsstate_nofsync" else {}
        writer = ops.write_stream(
            fsstate_flow(df, job.cell.group, name=job.name),
            checkpoint_location=str(job.checkpoint),
            partitions=n,
            max_cached_stores=MAX_CACHED_STORES,
            **store,
        )
    job.query = writer.queryName(job.name).trigger(processingTime=TRIGGER).start()


def run(ctx: BenchContext) -> list[Result]:
    """Run every cell's three queries side by side."""
    require_pyspark()
    sizes = shapes(ctx)
    warm, measured = batch_counts(ctx)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    epoch_log = scratch / "epochs.jsonl"
    spark = session(
        ctx,
        "fsstate-bench-matrix",
        **{
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            f"spark.executorEnv.{EPOCH_LOG_ENV}": str(epoch_log),
        },
    )
    cells = [Cell(g, n, r) for g in GROUPS for n in PARTITIONS for r in PER_KEY]
    jobs = {
        (c, s): Job(c, s, scratch / c.tag / s / "input", scratch / c.tag / s / "checkpoint")
        for c in cells
        for s in SIDES
    }
    try:
        for job in jobs.values():
            job.input_dir.mkdir(parents=True)
            _start(spark, job)
        source = scratch / "batches"
        source.mkdir()
        for b in range(warm + measured):
            paths = {}
            for r, (_, keys) in sizes.items():
                paths[r] = source / f"r{r}-batch-{b:05d}.parquet"
                pq.write_table(matrix_table(b, keys, r), paths[r])
            mtime = 1_600_000_000 + 10 * b
            for cell in cells[b % len(cells) :] + cells[: b % len(cells)]:
                for side in SIDES[b % len(SIDES) :] + SIDES[: b % len(SIDES)]:
                    job = jobs[(cell, side)]
                    target = job.input_dir / f"batch-{b:05d}.parquet"
                    hand_in(paths[cell.per_key], target, mtime)
                    wait_batch(job, b, sizes[cell.per_key][0])
                    ctx.log(f"  batch {b} {job.name:<34} {job.wall_ms(b) / 1000:7.2f} s")
        epochs = read_epoch_log(epoch_log)
    finally:
        stop_queries((job.query for job in jobs.values()), spark)
        shutil.rmtree(scratch, ignore_errors=True)
    steady = list(range(warm, warm + measured))
    return _results(cells, jobs, epochs, sizes, steady)


def _store_counts(epochs: list[dict[str, Any]], job: Job, steady: list[int]) -> str:
    """How the job's measured epochs got their stores; checks N partitions per epoch."""
    mine = [e for e in epochs if e["operator"] == job.name and e["epoch"] in steady]
    for b in steady:
        parts = {e["partition"] for e in mine if e["epoch"] == b}
        if len(parts) != job.cell.partitions:
            raise RuntimeError(f"{job.name}: epoch {b} committed {len(parts)} partitions")
    counts = {k: sum(e["store"] == k for e in mine) for k in ("hit", "caught_up", "restored")}
    return ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items())


def _results(
    cells: list[Cell],
    jobs: dict[tuple[Cell, str], Job],
    epochs: list[dict[str, Any]],
    sizes: dict[int, tuple[int, int]],
    steady: list[int],
) -> list[Result]:
    out: list[Result] = []
    for cell in cells:
        rows, keys = sizes[cell.per_key]
        times = {s: [jobs[(cell, s)].wall_ms(b) / 1000 for b in steady] for s in SIDES}
        work = (
            f"{rows:,} rows per batch over {keys:,} keys ({cell.per_key} rows per key), "
            f"{cell.partitions} partitions on both sides, local[2], noop sink, batches "
            f"{steady[0]}-{steady[-1]} (batch 0 loads)"
        )
        secs = "; ".join(
            f"{SIDE_LABEL[s]} {median(times[s]):.3g} s/batch ({spread_text(times[s])})"
            for s in SIDES
        )
        stores = "; ".join(
            f"{SIDE_LABEL[s]} stores: {_store_counts(epochs, jobs[(cell, s)], steady)}"
            for s in SIDES[1:]
        )
        for side, goal in (("fsstate", GOAL_BUILTIN), ("fsstate_nofsync", None)):
            ratios = [a / c for a, c in zip(times["builtin"], times[side])]
            what = (
                "fsstate with its default fsync'ed commits"
                if side == "fsstate"
                else "fsstate with fsync=False, like Spark's unsynced checkpoint files"
            )
            context = f"{secs}; {work}; {stores}"
            if side == "fsstate_nofsync":
                cost = [a / c for a, c in zip(times["fsstate"], times["fsstate_nofsync"])]
                context = (
                    f"durability cost, fsstate batch time with fsync over without: "
                    f"{median(cost):.2f}x ({spread_text(cost)}); {context}"
                )
            out.append(
                ratio_result(
                    SUITE,
                    f"{cell.title}: {SIDE_LABEL[side]} vs builtin",
                    ratios,
                    f"builtin batch time / {what} batch time (> 1: fsstate faster), "
                    "triggerExecution paired by batch",
                    context,
                    goal,
                )
            )
    return out
