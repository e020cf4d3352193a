"""The running aggregate with large state: 1 to 30 million keys, under a 64 MiB and a 1 GiB
budget, uniform and skewed keys, against the Java processor on RocksDB (issue 68).

The processor is ``spark_jvm``'s running aggregate (count and sum(v) per key in a value state,
one output row ``(k, n, s)`` per key and batch, time mode None, update output), per cell in
up to eight queries side by side in one SparkSession (local[2]), each restarted from state
loaded beforehand:

* ``Row tiered()`` and ``pandas tiered()``: ``tiered()`` on fsstate's keyed loop
  (:class:`~bench.harness.operator_queries.RunningAggRow`, ``RunningAgg``);
* ``Row flow driver`` and ``pandas flow driver``: ``ops.transform_with_state(_in_pandas)`` +
  ``ops.write_stream``;
* ``pandas dict state``: the pandas processor with its state in a dict of the task
  (:class:`~bench.harness.operator_queries.TaskDictAgg`), under ``tiered()``, started fresh:
  the reference that isolates fsstate's share of a pandas batch, as ``spark_key_breakdown``'s
  dict-state query does for Row (outputs not checked);
* ``Java``: the same processor in Java on Spark's ``transformWithState`` with Spark's default
  RocksDB settings, and ``Java changelog``: the same with RocksDB's changelog checkpointing on,
  the setting Spark's docs recommend for stateful queries (:mod:`bench.harness.java_processor`;
  without a JDK compiler both are skipped rows);
* ``Row tiered() on S3`` (10 M-key cells): Row ``tiered()`` with its state on SeaweedFS's S3
  server on loopback (:mod:`bench.harness.s3`; without ``weed`` a skipped row).

**State.** Each origin (Row ``tiered()``, pandas ``tiered()``, the flow driver, Java) is loaded
once per partition count by a loader query that takes every key once, in load batches of
1 M rows (5 M at 200 partitions; Parquet files made with numpy and Arrow, one file a
micro-batch, ``maxFilesPerTrigger`` 1), through :class:`~bench.harness.operator_queries.LoadAgg`
(the Python origins: it writes a key's state from the key alone, never building PySpark's
per-key pandas frames) or the Java processor itself; at 1 M, 10 M and 30 M keys the loaders
stop and their checkpoints and state are copied to a base (:mod:`~bench.suites.spark_scale_state`).
Not timed. Every cell restarts its queries from hard-linked copies of its base: the same
checkpoint and state files, so a cell's first batch is a restart, and no cell sees another's
writes. The pandas flow driver restarts from the Row driver's base (the flow driver's
checkpoint holds no Spark operator), the S3 side from Row ``tiered()``'s (its state uploaded),
the Java changelog side from Java's; each of these copies gets a query id of its own, since
Spark runs one run of a query id at a time. pandas ``tiered()`` has its own origin: Spark
refuses a Row operator's checkpoint to a pandas operator.

**Cells** (full run; the key counts in the labels):

* 4 partitions: {1 M, 10 M, 30 M keys} x {64 MiB, 1 GiB} x {uniform, Zipf 1.1}, 100,000-row
  steady batches: the restart batch, 4 steady batches and a checked batch of 2,000 rows; the
  S3 side in the 10 M cells; pandas ``tiered()`` and its dict-state reference in the 64 MiB
  cells only, and the pandas flow driver in the 30 M-key 64 MiB cells only, on the restart
  batch, the first 2 steady batches and the checked one (a pandas batch of 100,000 rows costs
  ~20 s a side on 2 cores, the processor's own pandas work: in every cell they would take
  most of the hour; ``spark_jvm`` measures the pandas flow driver against Java);
* 200 partitions: 10 M keys, 64 MiB, uniform, the core sides (no pandas), 2 steady batches
  (every Python query pays Spark's ~175 ms per task there: ~20 s a batch);
* profiled: 30 M keys, 64 MiB, uniform: Row ``tiered()`` restarted from the base beside the
  dict-state Row processor (:class:`~bench.harness.operator_queries.DictAggRow`), every task
  profiled, the restart batch and 2 steady ones.

The budget is ``spark.fsstate.memoryLimit``, per Python worker process: every fsstate side of
a cell shares each worker's budget, as queries of one application do. Each cell (and the
profiled run) has a SparkSession of its own, so new Python workers; Spark's JVM stays up
between sessions, so the Java sides restart with a warm JIT (their RocksDB stores load from
the checkpoint all the same). Within a cell, round by round a batch file is handed to one
query at a time (the order rotating) and the round waits for it; a query's batch time is
Spark's ``triggerExecution``.

**Rows** (``<cell label>: <what>``, e.g. ``30M keys, 64 MiB, Zipf 1.1, 4 partitions: Row
tiered() / Java``; :mod:`~bench.suites.spark_scale_rows`):

* ``<side> / Java``: the side's steady batch time over the Java query's, same batch, paired
  (goals at 64 MiB: Row ``tiered()`` <= 1.0, Row flow driver <= 0.8; the others informative);
* ``<side> batch time / the 1M cell's`` (10 M and 30 M cells): the ``i``-th steady batch over
  the 1 M cell's ``i``-th (same seed, same budget, distribution and partitions): how cost grows
  with state (goal: Row ``tiered()`` <= 1.2 at 30 M keys);
* ``Row tiered() first batch after restart / its steady batch`` (goal <= 1.5 at 30 M keys) and
  ``/ Java's`` (the Java query's restart batch, RocksDB loading its snapshot; goal <= 0.5 at
  30 M keys); the flow driver's over Java's, informative;
* ``Row tiered() S3 / local disk`` (10 M cells): steady batches paired (goal <= 1.3), and the
  restart batch's, informative;
* ``<side> MiB written per batch`` and ``MiB on disk``: what the side's files (checkpoint and
  state, not its input) grew by per steady batch, the mean over the window (files written in
  the background count in the batch they land in), and their size after its last steady
  batch; ``Row tiered() / Java changelog, bytes ...`` (goals <= 0.5 both), against the default
  Java and the flow driver's, informative;
* ``peak worker RSS``: the largest peak resident set (``VmHWM``) of the cell's Python worker
  processes (goal <= the budget + 200 MiB);
* ``pandas tiered() fsstate's share of the batch``: (pandas ``tiered()`` - the dict-state
  reference) / pandas ``tiered()``, same batch (goal <= 0.25);
* ``<side> batch time`` and ``<side> first batch after restart``: each query's medians, ms;
* ``..., profiled: ...``: ``spark_key_breakdown``'s phases per key at 30 M keys
  (:mod:`bench.harness.key_phases`: input, processor, state reads, first-touch reads, state
  writes, output, commit, fsync, open, loop and protocol), batch 0 the restart, and fsstate's
  share against the dict-state query: the cold path's cost by name.

A side a cell leaves out gives skipped rows with the reason (no goal when left out for time);
one that could not run here (no JDK compiler, no S3 server) keeps its goal.

**Time.** The full run is estimated at about 55 minutes on an idle 2-core machine: ~19 for
the loads (four origins to 30 M keys at ~5-8 µs a key each, three to 10 M at 200 partitions
with their ~25 s of per-task costs a load batch), ~15 for the core sides of the twelve
4-partition cells (~70 s a cell: a new session, the restart round, four steady rounds of
~8 s, the checked one; the S3 side ~20 s more in the 10 M cells), ~15 for the pandas sides
of the six 64 MiB cells (~130 s a cell, ~65 s more with the flow driver at 30 M keys), ~5 for
the 200-partition cell and ~2 for the profiled run. An estimate, not a measurement: it scales
the quick cell and load batches of 100,000 keys, measured here on a shared machine (load
average 6 to 20; the quick run took 7 to 12 minutes), by the ratio of their batch times to
``spark_jvm``'s published figures for the same processors (~4-5x), and the load rates are the
least certain part (±50 %). Figures worth publishing come from a quiet machine only.
``--quick``: one cell, 200 k keys, 64 MiB, uniform, 20,000-row
batches, 2 timed batches, every side including S3, and the profiled run on it (a few minutes
on an idle machine). ``--only`` narrows by a cell's label (``30M keys, 64 MiB``) and
``profiled`` runs the profiled run alone (the growth rows need the 1 M cell in the same run).

Invariants:

* Nothing fast but wrong passes: every query but the reference computes the checksum (rows,
  sum n, sum s, sum crc32 k) of its output for the checked batch instead of writing it, and it
  must equal the figure computed from the rows the query was handed (the load's and the
  cell's, :func:`~bench.suites.spark_scale_data.expected_checksum`), or the suite fails; so do
  a ``tiered()`` query that ran PySpark's loop and a batch that read other than its rows.
* Loads are not timed and run in sessions of their own (budget 1 GiB); copies, uploads and
  listings happen between batches, never inside one.
* Every query of a cell restarts from its own copy, with a query id no other running query
  has.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, SuiteSkipped
from bench.harness.java_processor import build_jar, java_checksum
from bench.harness.key_phases import phase_rows, profiles_by_class
from bench.harness.operator_queries import INPUT_SCHEMA, DictAggRow, RunningAggRow, TaskDictAgg
from bench.harness.processor_queries import Checksum, ChecksumSink, wait_batch
from bench.harness.processor_sides import JVM_LOG, start_side, stock_loop_notes
from bench.harness.s3 import s3_options, s3_server
from bench.harness.spark import hand_in, require_pyspark, session
from bench.suites.spark_scale_data import Batch, cell_batch, check_batch, expected_checksum, table
from bench.suites.spark_scale_plan import CHECK_ROWS, SIDES, SUITE, Cell, Plan, Side, plan
from bench.suites.spark_scale_rows import CellRecord, cell_rows, growth_rows
from bench.suites.spark_scale_state import (
    MAX_CACHED_STORES,
    MTIME0,
    STATE_NAME,
    TRIGGER,
    Base,
    Listing,
    WorkerPeaks,
    bytes_on_disk,
    bytes_written,
    link_tree,
    listing,
    load_bases,
    mib,
    new_query_id,
    upload_tree,
)

REFERENCE_NAME = "dict_agg"  # the dict-state reference's tiered() operator
PROFILED = {"RunningAggRow": "running aggregate", "DictAggRow": "dict state (reference)"}


@dataclass
class Env:
    """What every session of a run shares: the scratch directory, the Java processor's jar
    (or why there is none) and the S3 server's settings (or why there are none)."""

    scratch: Path
    jar: Path | None
    java_skip: str | None
    s3: dict[str, str] | None
    s3_bucket: str
    s3_skip: str | None

    def conf(self, partitions: int, budget_mib: int) -> dict[str, str]:
        """The settings of a session at ``partitions`` shuffle partitions and a budget of
        ``budget_mib`` per worker."""
        jars = {"spark.jars": str(self.jar)} if self.jar is not None else {}
        return {
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            "spark.sql.shuffle.partitions": str(partitions),
            "spark.fsstate.memoryLimit": f"{budget_mib}MiB",
            **jars,
        }


@dataclass
class SideRun:
    """One query of a running cell."""

    side: Side
    root: Path
    first_id: int  # the query's batch id of the cell's batch 0
    indices: list[int]  # the cell's batches it takes, in order
    sink: ChecksumSink
    state_uri: str | None = None
    query: Any = None
    last: Listing = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The query's name."""
        return f"scale_{self.side.key}"

    def batch_id(self, i: int) -> int:
        """The query's batch id of the cell's batch ``i`` (a side that skips batches, as the
        pandas ones do, numbers only those it takes)."""
        return self.first_id + self.indices.index(i)

    @property
    def local(self) -> bool:
        """Whether its bytes are counted (its state on local disk, not the reference)."""
        return not self.side.s3 and not self.side.reference


@contextmanager
def _env(ctx: BenchContext, todo: list[Cell]) -> Iterator[Env]:
    """The run's scratch directory, the Java processor's jar and, when a cell runs the S3 side,
    the S3 server; all removed or stopped on exit."""
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    server = None
    try:
        jar = build_jar(scratch / "java")
        java_skip = jar if isinstance(jar, str) else None
        if java_skip is not None:
            ctx.log(f"{SUITE}: the Java sides are skipped: {java_skip}")
        s3: dict[str, str] | None = None
        bucket, s3_skip = "", None
        if any("row_tiered_s3" in c.sides for c in todo):
            try:
                server = s3_server(ctx)
                info = server.start()
                s3, bucket = s3_options(info), info.bucket
            except SuiteSkipped as exc:
                s3_skip = str(exc)
                ctx.log(f"{SUITE}: the S3 side is skipped: {s3_skip}")
        path = None if isinstance(jar, str) else jar
        yield Env(scratch, path, java_skip, s3, bucket, s3_skip)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


LOAD_BUDGET_MIB = 1024  # the loads' sessions (not timed)


def _load_all(
    ctx: BenchContext, env: Env, p: Plan, todo: list[Cell], profiled: bool
) -> dict[tuple[int, int], Base]:
    """Every base the run's cells (and the profiled run) restart from, by (partitions, keys)."""
    out: dict[tuple[int, int], Base] = {}
    for partitions, wanted in p.bases(todo, profiled).items():
        if env.jar is None:
            wanted = {k: o - {"java"} for k, o in wanted.items()}
        conf = env.conf(partitions, LOAD_BUDGET_MIB)
        spark = session(ctx, f"fsstate-bench-scale-load-p{partitions}", **conf)
        try:
            bases = load_bases(ctx, spark, partitions, wanted, p.load_rows[partitions], env.scratch)
        finally:
            spark.stop()
        out.update({(partitions, k): b for k, b in bases.items()})
    return out


def _prepare(env: Env, cell: Cell, base: Base, rec: CellRecord) -> list[SideRun]:
    """Each side's directory: a hard-linked copy of its origin's base, with a query id of its
    own where the side shares its origin (the S3 side's state uploaded to the server); the
    sides that cannot run here go to ``rec.missing``."""
    runs = []
    for key in cell.sides:
        side = SIDES[key]
        if side.flavour == "java" and env.jar is None:
            rec.missing[key] = f"no Java query: {env.java_skip}"
            continue
        if side.s3 and env.s3 is None:
            rec.missing[key] = f"no S3 server: {env.s3_skip}"
            continue
        root = env.scratch / "cells" / cell.tag / key
        state_uri = None
        if side.origin is not None:
            link_tree(base.root / side.origin, root)
        if side.own_id:
            new_query_id(root)
        if side.s3:  # its state goes up to the server, under its own query id
            state_uri = f"s3://{env.s3_bucket}/{cell.tag}"
            sent = upload_tree(root / "state", state_uri, env.s3 or {})
            rec.s3_mib = mib(sent)
            shutil.rmtree(root / "state")
        (root / "input").mkdir(parents=True)
        first = 0 if side.origin is None else base.last_batch + 1
        indices = [0, *cell.batches(key), cell.check_index]
        run = SideRun(side, root, first, indices, ChecksumSink({first + len(indices) - 1}))
        run.state_uri = state_uri
        if run.local:
            run.last = listing(root)
        runs.append(run)
    return runs


def _start(spark: Any, run: SideRun, cell: Cell, env: Env) -> Any:
    """Start a side's query. It reads its own input directory through a one-character glob
    (``inpu[t]``): on a restart Spark's file source lists the files of the last batch in the
    checkpoint (the loader's, in the origin's directory) under the source path as base path,
    and a glob path has none."""
    side = run.side
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
    return start_side(
        spark,
        df.parquet(str(run.root / "inpu[t]")),
        flavour=side.flavour,
        side=side.how,
        name=run.name,
        root=run.root,
        sink=run.sink,
        trigger=TRIGGER,
        partitions=cell.partitions,
        max_cached_stores=MAX_CACHED_STORES,
        processor=TaskDictAgg() if side.reference else None,
        state_uri=run.state_uri,
        state_name=REFERENCE_NAME if side.reference else STATE_NAME,
        options={"storage_options": env.s3} if side.s3 else None,
        changelog=side.changelog,
    )


def _one(ctx: BenchContext, cell: Cell, run: SideRun, i: int, rec: CellRecord) -> None:
    """Wait for batch ``i`` of ``run`` (its file handed in); record its time and bytes."""
    key = run.side.key
    rows = cell.rows if i < cell.check_index else CHECK_ROWS
    ms, got = wait_batch(run.query, run.name, run.batch_id(i), rows)
    if got != rows:
        raise RuntimeError(f"{run.name}: batch {run.batch_id(i)} read {got} rows, not {rows}")
    rec.ms.setdefault(key, {})[i] = ms
    if run.local:
        now = listing(run.root)
        rec.written.setdefault(key, {})[i] = bytes_written(run.last, now)
        run.last = now
        if i == max([0, *cell.batches(key)]):
            rec.on_disk[key] = bytes_on_disk(now)
    ctx.log(f"  {cell.label} batch {i} {key:<15} {ms / 1000:8.2f} s")


def _feed(
    ctx: BenchContext, cell: Cell, runs: list[SideRun], base: Base, rec: CellRecord, source: Path
) -> list[Batch]:
    """Hand every batch to the sides that take it, one query at a time (the order rotating),
    waiting for each; returns the cell's batches."""
    batches: list[Batch] = []
    mtime0 = MTIME0 + 10 * (base.last_batch + 1)  # after the loader's files
    for i in range(cell.check_index + 1):
        if i < cell.check_index:
            batch = cell_batch(cell.dist, i, cell.rows, cell.keys)
        else:
            batch = check_batch(cell.dist, cell.keys, batches)
        batches.append(batch)
        path = source / f"batch-{i:03d}.parquet"
        pq.write_table(table(*batch), path)
        takers = [r for r in runs if i in r.indices]
        k = i % max(1, len(takers))
        for run in takers[k:] + takers[:k]:
            hand_in(path, run.root / "input" / path.name, mtime0 + 10 * i)
            _one(ctx, cell, run, i, rec)
    return batches


def _check(spark: Any, cell: Cell, runs: list[SideRun], batches: list[Batch]) -> None:
    """Every query's checked output (all but the reference's) equals the figures computed from
    the rows it was handed."""
    got: dict[str, Checksum | None] = {}
    want: dict[str, Checksum] = {}
    for run in runs:
        if run.side.reference:
            continue
        history = [batches[i] for i in run.indices if i != cell.check_index]
        want[run.side.key] = expected_checksum(history, batches[cell.check_index])
        cid = run.batch_id(cell.check_index)
        java = run.side.flavour == "java"
        got[run.side.key] = java_checksum(spark, run.name, cid) if java else run.sink.sums.get(cid)
    bad = {k: (got[k], w) for k, w in want.items() if got[k] != w}
    if bad:
        raise AssertionError(
            f"{cell.label}: output checksums (rows, sum n, sum s, sum crc32 k) differ from "
            f"the input's (got, want): {bad}"
        )


def run_cell(ctx: BenchContext, env: Env, cell: Cell, base: Base) -> CellRecord:
    """One cell in a SparkSession of its own (new Python workers): its sides restart from
    copies of ``base``, take the cell's batches, and their checked outputs and loops are
    checked."""
    rec = CellRecord(cell)
    runs = _prepare(env, cell, base, rec)
    log = ctx.tmp_dir / JVM_LOG
    log_at = log.stat().st_size if log.exists() else 0
    conf = env.conf(cell.partitions, cell.budget_mib)
    spark = session(ctx, f"fsstate-bench-scale-{cell.tag}", **conf)
    peaks = WorkerPeaks()
    try:
        for run in runs:
            run.query = _start(spark, run, cell, env)
        with peaks.running():
            batches = _feed(ctx, cell, runs, base, rec, env.scratch / "cells" / cell.tag)
        _check(spark, cell, runs, batches)
    finally:
        for run in runs:
            if run.query is not None:
                run.query.stop()
        spark.stop()
    bad = stock_loop_notes(log, log_at, {STATE_NAME, REFERENCE_NAME})
    if bad:
        raise RuntimeError(f"tiered() queries ran PySpark's loop: {bad[:3]}")
    ctx.log(f"  {cell.label}: outputs agree with the input; fsstate's loop ran")
    rec.peaks_mib = sorted(peaks.peaks.values(), reverse=True)
    shutil.rmtree(env.scratch / "cells" / cell.tag, ignore_errors=True)
    return rec


def run_breakdown(ctx: BenchContext, env: Env, cell: Cell, base: Base) -> list[Result]:
    """Row ``tiered()`` restarted from ``base`` and the dict-state reference, every task
    profiled, over the cell's restart and steady batches; the phase rows."""
    root = env.scratch / "profiled"
    profiles = root / "profiles"
    conf = env.conf(cell.partitions, cell.budget_mib)
    conf["spark.executorEnv.FSSTATE_PROFILE_DIR"] = str(profiles)
    link_tree(base.root / "tiered_row", root / "running")
    runs = [
        (RunningAggRow(), STATE_NAME, root / "running", base.last_batch + 1),
        (DictAggRow(), REFERENCE_NAME, root / "reference", 0),
    ]
    spark = session(ctx, "fsstate-bench-scale-profiled", **conf)
    distinct: list[int] = []
    queries: list[Any] = []
    try:
        for proc, name, where, _ in runs:
            (where / "input").mkdir(parents=True, exist_ok=True)
            df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
            queries.append(
                start_side(spark, df.parquet(str(where / "inpu[t]")), flavour="row",
                           side="fast", name=f"profiled_{name}", root=where,
                           sink=ChecksumSink(set()), trigger=TRIGGER,
                           partitions=cell.partitions, max_cached_stores=MAX_CACHED_STORES,
                           processor=proc, state_name=name)
            )  # fmt: skip
        for i in range(cell.steady + 1):
            ids, v = cell_batch(cell.dist, i, cell.rows, cell.keys)
            batch = table(ids, v)
            distinct.append(int(pc.count_distinct(batch.column("k")).as_py()))
            path = root / f"batch-{i:03d}.parquet"
            pq.write_table(batch, path)
            order = list(zip(runs, queries, strict=True))
            for (_, name, where, first), q in order if i % 2 == 0 else order[::-1]:
                hand_in(path, where / "input" / path.name, MTIME0 + 10 * (base.last_batch + 1 + i))
                ms, _ = wait_batch(q, name, first + i, cell.rows)
                ctx.log(f"  profiled batch {i} {name:<12} {ms / 1000:8.2f} s")
    finally:
        for q in queries:
            q.stop()
        spark.stop()
    work = (
        f"{cell.keys:,} keys loaded, {cell.rows:,} rows per batch drawn {cell.dist}ly over "
        f"them, batch 0 the first after a restart (new session and workers), Row running "
        f"aggregate, {cell.partitions} partitions, memoryLimit {cell.budget_mib} MiB, "
        "local[2], every task profiled (cProfile: absolute figures inflated, shares meaningful)"
    )
    by_class = profiles_by_class(profiles)
    return phase_rows(SUITE, by_class, distinct, PROFILED, work, f"{cell.label}, profiled: ")


def run(ctx: BenchContext) -> list[Result]:
    """Load the bases, run each cell, then the profiled run (module docstring)."""
    require_pyspark()
    p = plan(ctx.mode)
    todo = [c for c in p.cells if ctx.wants(c.label)]
    profiled = p.breakdown is not None and ctx.wants("profiled")
    if not todo and not profiled:
        return []
    out: list[Result] = []
    with _env(ctx, todo) as env:
        bases = _load_all(ctx, env, p, todo, profiled)
        records = [run_cell(ctx, env, cell, bases[cell.base]) for cell in todo]
        for rec in records:
            out += cell_rows(rec)
        out += growth_rows(records)
        if profiled and p.breakdown is not None:
            out += run_breakdown(ctx, env, p.breakdown, bases[p.breakdown.base])
    return out
