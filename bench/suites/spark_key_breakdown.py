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

Each function's own time in the profiles is charged to a phase: the phase of the function if
it is one of a phase's entry points (:data:`PHASES`, matched by file and function), else the
phases of its callers, in the shares of its cumulative time each caller's calls took
(cProfile keeps per-caller times), so a helper called by both the commit and the input
conversion is split between them.
The phases: reading and converting the input (Arrow to Rows), the processor's own code (its
module), state reads on hot views, first-touch reads (a key without a view: the table's
whole-load or a point lookup), state writes, the commit (sealing, Parquet, manifest; its fsync
apart), the store's open or catch-up, the output's conversion (Rows to Arrow) and the loop with
Spark's protocol (the rest of fsstate's loop and PySpark's state-server client).

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

import pstats
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median
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
FSSTATE = ("state reads", "first-touch reads", "state writes", "commit", "fsync", "open")

# phase entry points: (file path part, function name or "*" for the whole file)
PHASES: list[tuple[str, str, str]] = [
    ("fsync", "~", "<built-in method posix.fsync>"),
    ("first-touch reads", "fsstate/tables/base.py", "_load"),
    ("first-touch reads", "fsstate/tables/base.py", "_complete"),
    ("commit", "fsstate/store/epoch.py", "commit"),
    ("commit", "fsstate/store/partition.py", "commit"),
    ("open", "fsstate_spark/tiered/lifecycle.py", "open_store"),
    ("open", "fsstate_spark/tiered/processor.py", "begin_fast"),
    ("state reads", "fsstate-generated/value-accessors", "get"),
    ("state reads", "fsstate_spark/state/handles.py", "get"),
    ("state reads", "fsstate_spark/state/handles.py", "exists"),
    ("state writes", "fsstate-generated/value-accessors", "update"),
    ("state writes", "fsstate_spark/state/handles.py", "update"),
    ("processor", "bench/harness/operator_queries.py", "*"),
    ("input", "fsstate_spark/state/keyed.py", "_make_rows"),
    ("input", "fsstate_spark/state/keyed.py", "_py_values"),
    ("input", "fsstate_spark/state/keyed.py", "__init__"),
    ("input", "fsstate_spark/state/keyed.py", "_row_range"),
    ("input", "fsstate_spark/tiered/fast_loop.py", "_windows"),
    ("input", "fsstate_spark/tiered/fast_loop.py", "_sides"),
    ("input", "fsstate_spark/tiered/fast_loop.py", "load_stream"),
    ("output", "fsstate_spark/state/keyed.py", "add"),
    ("output", "fsstate_spark/state/keyed.py", "table"),
    ("output", "fsstate_spark/tiered/fast_loop.py", "_emit"),
    ("output", "fsstate_spark/tiered/fast_loop.py", "dump_stream"),
    ("loop and protocol", "fsstate_spark/tiered/fast_loop.py", "*"),
    ("loop and protocol", "fsstate_spark/state/keyed.py", "run_keys"),
    ("loop and protocol", "pyspark/sql/streaming/", "*"),
]
ORDER = [
    "input",
    "processor",
    "state reads",
    "first-touch reads",
    "state writes",
    "output",
    "commit",
    "fsync",
    "open",
    "loop and protocol",
    "other",
]

Func = tuple[str, int, str]


def _root(func: Func) -> str | None:
    path, _, name = func
    for phase, part, fn in PHASES:
        if part in path and (fn == "*" or fn == name):
            return phase
    return None


def phase_times(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per phase: each function's own time, charged as the module docstring says."""
    table: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
    memo: dict[Func, dict[str, float]] = {}

    def share(func: Func, depth: int) -> dict[str, float]:
        """The phases ``func``'s time belongs to, as fractions summing to 1."""
        got = memo.get(func)
        if got is not None:
            return got
        phase = _root(func)
        if phase is not None or depth > 40:
            out = {phase or "other": 1.0}
        else:
            callers = table[func][4] if func in table else {}
            # each caller's share of the function's cumulative time (what came through it)
            weights = {c: v[3] for c, v in callers.items() if c != func}
            total = sum(weights.values())
            out = defaultdict(float)
            if total <= 0:
                out["other"] = 1.0
            else:
                for caller, w in weights.items():
                    for p, f in share(caller, depth + 1).items():
                        out[p] += f * w / total
            out = dict(out)
        memo[func] = out
        return out

    times: dict[str, float] = defaultdict(float)
    for func, (_cc, _nc, tt, _ct, _callers) in table.items():
        for p, f in share(func, 0).items():
            times[p] += tt * f
    return dict(times)


def _profiles(where: Path) -> dict[str, list[list[Path]]]:
    """Per processor class, its profile files grouped per stage (one stage a batch), in
    stage order."""
    by: dict[str, dict[int, list[Path]]] = defaultdict(lambda: defaultdict(list))
    for f in where.glob("*.prof"):
        m = re.match(r"(\w+)-s(\d+)-p\d+-a\d+-\d+\.prof$", f.name)
        if m:
            by[m.group(1)][int(m.group(2))].append(f)
    return {cls: [stages[s] for s in sorted(stages)] for cls, stages in by.items()}


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
        return _results(_profiles(profiles), distinct, rows)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _results(by_class: dict[str, list[list[Path]]], distinct: list[int], rows: int) -> list[Result]:
    work = (
        f"{rows:,} rows per batch over {rows // 2:,} keys (about {distinct[-1]:,} distinct a "
        f"batch), Row running aggregate, {PARTITIONS} partitions, local[2], every task "
        "profiled (cProfile: absolute figures inflated, shares meaningful)"
    )
    per_key: dict[str, list[dict[str, float]]] = {}
    for cls in QUERIES:
        stages = by_class.get(cls, [])
        if len(stages) != len(distinct):
            raise RuntimeError(f"{cls}: {len(stages)} profiled batches, {len(distinct)} fed")
        per_key[cls] = []
        for files, n in zip(stages, distinct, strict=True):
            times = phase_times(pstats.Stats(*[str(f) for f in files]))
            per_key[cls].append({p: t * 1e6 / n for p, t in times.items()})
    out: list[Result] = []
    for first, label in ((True, "batch 0 (first touch)"), (False, "batches 1+")):
        picked = {c: (v[:1] if first else v[1:]) for c, v in per_key.items()}
        for cls, title in QUERIES.items():
            for phase in ORDER:
                samples = [b.get(phase, 0.0) for b in picked[cls]]
                out.append(
                    Result(
                        SUITE,
                        f"{title}, {label}: {phase}",
                        median(samples),
                        "µs/key",
                        notes=f"profiled µs per distinct key of the batch; {work}",
                        samples=samples,
                    )
                )
        run_total = [sum(b.values()) for b in picked["RunningAggRow"]]
        dict_total = [sum(b.values()) for b in picked["DictAggRow"]]
        diff = [a - b for a, b in zip(run_total, dict_total, strict=True)]
        out.append(
            Result(
                SUITE,
                f"fsstate's share, {label}: running aggregate minus dict state",
                median(diff),
                "µs/key",
                notes=f"whole task per key, the running aggregate's minus the dict's; {work}",
                samples=diff,
            )
        )
        fractions = [d / t for d, t in zip(diff, run_total, strict=True) if t > 0]
        out.append(
            Result(
                SUITE,
                f"fsstate's share, {label}: of the running aggregate's task time",
                median(fractions),
                "x",
                notes=(
                    "(running aggregate - dict state) / running aggregate, per batch; the "
                    f"phases that are fsstate's own ({', '.join(FSSTATE)}) are the rows above; "
                    f"{work}"
                ),
                samples=fractions,
            )
        )
    return out
