"""fsstate's whole-batch operators against Spark's built-ins over a matrix of shapes, side by side.

Cells: {4, 200 partitions} x {2, 20 rows per key per batch} x {windowed count, running
aggregate}. The queries are those of :mod:`bench.spark_operators` (``fsstate_flow`` and
``builtin_query``): the windowed count is ``withWatermark("t", "5 seconds")`` then a count per
(10-second window, key), append output; the running aggregate is ``count`` and ``sum(v)`` per
key, update output (fsstate: a retracting aggregate over an insert-only stream, upsert output).

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

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import (
    BenchContext,
    Result,
    hand_in,
    median,
    require_pyspark,
    spread_text,
    stop_queries,
)
from bench.datagen import key_strings

SUITE = "spark_matrix"
GOAL_BUILTIN = 1.5
PARTITIONS = (4, 200)
PER_KEY = (2, 20)
GROUPS = {"window": "windowed count", "running": "running aggregate"}
SIDES = ("builtin", "fsstate", "fsstate_nofsync")
SIDE_LABEL = {"builtin": "builtin", "fsstate": "fsstate", "fsstate_nofsync": "fsstate fsync=False"}
MAX_CACHED_STORES = 4096  # every fsstate store of the run fits in each worker's pool
TRIGGER = "500 milliseconds"
WINDOW_MS = 10_000
EPOCH_LOG_ENV = "FSSTATE_EPOCH_LOG"  # fsstate.operators.runner.EPOCH_LOG_ENV


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix."""

    group: str
    partitions: int
    per_key: int

    @property
    def title(self) -> str:
        """``windowed count, 200 partitions, 20 rows/key``: the start of the cell's rows."""
        return f"{GROUPS[self.group]}, {self.partitions} partitions, {self.per_key} rows/key"

    @property
    def tag(self) -> str:
        """A short name (directories, operator names)."""
        return f"{self.group}_p{self.partitions}_r{self.per_key}"


@dataclass
class Job:
    """One running query of a cell and its progress per batch."""

    cell: Cell
    side: str
    input_dir: Path
    checkpoint: Path
    query: Any = None
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The query's name, also its fsstate operator's name (the epoch log's key)."""
        return f"{self.cell.tag}_{self.side}"

    def wall_ms(self, batch: int) -> float:
        """Spark's ``triggerExecution`` of ``batch``."""
        return float(self.progress[batch]["durationMs"]["triggerExecution"])


def shapes(ctx: BenchContext) -> dict[int, tuple[int, int]]:
    """rows per key -> (rows per batch, keys)."""
    if ctx.mode == "full":
        return {2: (100_000, 50_000), 20: (400_000, 20_000)}
    return {2: (20_000, 10_000), 20: (80_000, 4_000)}


def batch_counts(ctx: BenchContext) -> tuple[int, int]:
    """(warm-up batches, measured batches): 9 samples give a 95 % interval of the median."""
    return (1, 9) if ctx.mode == "full" else (1, 3)


def matrix_table(batch: int, keys: int, per_key: int) -> pa.Table:
    """Micro-batch ``batch``: every key ``per_key`` times in a seeded order, event times in
    ``[10 batch, 10 batch + 10)`` seconds."""
    rng = np.random.default_rng([batch, per_key])
    ids = rng.permutation(np.repeat(np.arange(keys, dtype=np.int64), per_key))
    rows = len(ids)
    t_ms = batch * WINDOW_MS + rng.integers(0, WINDOW_MS, rows, dtype=np.int64)
    return pa.table(
        {
            "k": key_strings(ids),
            "v": pa.array(rng.integers(0, 100, rows, dtype=np.int64)),
            "t": pa.array(t_ms * 1000, pa.timestamp("us", "UTC")),
        }
    )


def _start(spark: Any, job: Job) -> None:
    from bench.spark_operators import INPUT_SCHEMA, builtin_query, fsstate_flow
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


def wait_batch(job: Job, batch: int, rows: int, timeout_s: float = 1800) -> None:
    """Wait for ``job``'s progress of ``batch`` and check its input rows and partitions."""
    deadline = time.monotonic() + timeout_s
    while True:
        for p in job.query.recentProgress:
            if int(p["batchId"]) == batch and int(p["numInputRows"] or 0):
                got = int(p["numInputRows"])
                if got != rows:
                    raise RuntimeError(f"{job.name}: batch {batch} read {got} rows, not {rows}")
                ops = [dict(o) for o in (p["stateOperators"] or [])]
                job.progress[batch] = {"durationMs": dict(p["durationMs"]), "ops": ops}
                if job.side == "builtin":
                    parts = {int(o["numShufflePartitions"]) for o in ops}
                    if parts != {job.cell.partitions}:
                        raise RuntimeError(f"{job.name}: {parts} shuffle partitions")
                return
        if job.query.exception() is not None:
            raise RuntimeError(f"{job.name} failed: {job.query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job.name}: batch {batch} did not finish")
        time.sleep(0.05)


def read_epoch_log(path: Path) -> list[dict[str, Any]]:
    """The epoch lines the workers appended (:mod:`fsstate.operators.runner`)."""
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run(ctx: BenchContext) -> list[Result]:
    """Run every cell's three queries side by side."""
    require_pyspark()
    from bench.spark_runner import _session

    sizes = shapes(ctx)
    warm, measured = batch_counts(ctx)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    epoch_log = scratch / "epochs.jsonl"
    spark = _session(
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
            extra = ""
            if side == "fsstate_nofsync":
                cost = [a / c for a, c in zip(times["fsstate"], times["fsstate_nofsync"])]
                extra = (
                    f"; durability cost, fsstate batch time with fsync over without: "
                    f"{median(cost):.2f}x ({spread_text(cost)})"
                )
            out.append(
                Result(
                    suite=SUITE,
                    name=f"{cell.title}: {SIDE_LABEL[side]} vs builtin",
                    value=median(ratios),
                    unit="x",
                    goal=goal,
                    notes=f"builtin batch time / {what} batch time (> 1: fsstate faster), "
                    f"triggerExecution paired by batch ({spread_text(ratios)}){extra}; "
                    f"{secs}; {work}; {stores}",
                    samples=ratios,
                )
            )
    return out
