"""End-to-end Spark benchmarks: the same processors with Spark's native state and with
``fsstate_spark.tiered(...)``, side by side in one local SparkSession.

Workloads (one output row per key, ``noop`` sink):

* ``no_state``: no state at all (the framework's cost, the limit for any state backend);
* ``value_count``: running count in a ValueState (``get`` + ``update``: 2 state calls/key);
* ``list_append``: one ``ListState.appendValue`` per key (1 call; the lists grow every batch);
* ``map_update``: ``MapState.getValue`` + ``updateValue`` on one of 8 map keys (2 calls);
* ``value_x3``: three ValueStates, ``get`` + ``update`` each (6 calls/key).

Each stateful workload runs twice, with Spark's handles (``native``, RocksDB provider) and
through ``tiered(...)``, and each workload (``no_state`` included) in two flavours of the API:

* ``pandas``: ``groupBy("k").transformWithStateInPandas(...)``; ``handleInputRows`` gets an
  iterator of pandas DataFrames and yields DataFrames (result names without a marker, e.g.
  ``20k value_count tiered/native``);
* ``row``: ``groupBy("k").transformWithState(...)``; ``handleInputRows`` gets an iterator of
  ``pyspark.sql.Row`` and yields ``Row`` objects (result names with ``row``, e.g.
  ``20k row value_count tiered/native``).

Both flavours share the processors' state calls (:meth:`BenchProcessor.touch`); only the
reading of the input and the output row differ. Each flavour is compared against the
``no_state`` query of the same flavour (the framework's cost differs between them). The
throughput goals apply to ``value_count`` in both flavours, the per-call goal to every
workload of 2+ state calls per key.

Sizes: full mode runs every workload at 20k keys and ``no_state`` + ``value_count`` at 200k
keys, each in both flavours, with 9 measured batches (the fewest for which the order-statistic
interval of the median reaches 95 %); quick mode runs ``no_state`` + ``value_count`` at 20k
keys in both flavours, with 3. Inputs: one Parquet file per micro-batch in a directory every
query reads (``maxFilesPerTrigger=1``). Micro-batch 0 holds every key once (it loads the state
and warms up; it is not used in figures); micro-batches 1.. hold ``rows_per_batch`` distinct
keys drawn at random from the key space, one row each. Micro-batch 1 is not measured either.
Spark hands a partition to whichever Python worker is free, and a worker's first batch of a
partition it has not served yet restores the store (once per worker and partition, for the
life of the query); such tasks still happen in measured batches, are counted in every figure
below, and their number is given in the notes.

Interleaving: the suite runs in rounds. Round ``r`` writes micro-batch ``r`` and then runs
every variant's query (own checkpoint; ``trigger(availableNow=True)``) until it has processed
that one file, rotating the order of the variants from round to round. So the variants see the
same machine, in the same minute, batch by batch; ratios are computed per round (paired) and
their median reported, with the spread (:func:`bench.harness.common.median_ci`). The flavours
alternate in that order (pandas, row, pandas, ...), so every query follows one of the other
flavour and a cost of switching weighs on all alike.

Every query runs its processor inside a recorder (:func:`bench.harness.spark_procs.recorder`),
which writes one stats line per task (time in the state calls, keys, and for tiered state the
task's own time getting and committing its store, measured in the worker around the adapter's
calls, and the keyed loop that ran the task).

Keyed loops: the session is built from ``conf/spark-defaults.conf``
(:func:`bench.harness.spark.session`), whose ``spark.python.worker.module`` is fsstate's worker
(:mod:`pyspark_fsstate.worker`): the ``tiered(...)`` queries run fsstate's keyed loop
(:mod:`fsstate_spark.tiered.fast_loop`; their recorder is a ``TieredProcessor``,
:class:`bench.harness.spark_procs.TieredRecorder`, as that loop requires), the native and
``no_state`` queries PySpark's own. Checked: every measured tiered task's stats line must name
fsstate's loop, or the size's figures are an error. Earlier runs measured ``tiered()`` on
PySpark's loop (before fsstate's worker existed, and, after it, because the recorder around
``tiered()`` was a plain processor, which that worker leaves to PySpark).
So the ``tiered`` queries and their ``no_state`` and ``native`` baselines no longer run the
same keyed loop: wall-based comparisons with them hold the loops' difference as well as
state's. ``tiered/no_state`` can exceed 1 and the wall-based µs/call of ``tiered`` can be
negative (fsstate's loop saves more per key than state costs), and ``no_state/native`` is no
ceiling for ``tiered/native``; the in-worker per-call figures (the per-call goal, all-in,
first visit) time the state calls alone and are unaffected.

Figures, per key-space size and flavour:

* rows/s per micro-batch: input rows over Spark's ``triggerExecution`` duration of the batch
  (median over the measured batches);
* cost per state call, µs: (batch wall time of the variant - of ``no_state`` of the same
  flavour) / (state calls of the batch), per round, median;
* per-call native/tiered (the goal, for workloads of 2+ calls per key): per measured batch,
  native's in-worker µs per call over all the batch's tasks divided by tiered's over all the
  batch's tasks (the same batches, partitions and keys on both sides; restored stores
  included); gross: the timer around the calls is in both, nothing subtracted; median of the
  per-batch ratios;
* µs/call tiered all-in, per measured batch: (state-call time + getting the stores + committing
  them, summed over the batch's tiered tasks) / state calls of the batch; native's in-worker
  figure has no such part in the worker (Spark commits its store in the JVM);
* µs/call tiered first visit: the all-in figure of each measured task that restored its store;
* fsstate ms per batch (tiered): the all-in numerator, and its share of the batch's wall time,
  which the end-to-end ratios cannot resolve from noise;
* ratios tiered/native and tiered/no_state of throughput. The notes of tiered/native give
  no_state/native: what state at no cost at all would reach on PySpark's loop (``tiered``,
  on fsstate's loop, can pass it: see Keyed loops above).

A second part (full mode, pandas flavour only) runs a memory-bounded query:
``tiered(..., memory_limit=...)`` with value state of ~2 KiB per key, at least 10x one worker's
budget in total, and reports throughput and the Python workers' peak RSS (``ru_maxrss`` after
each task's commit), and the same query with the ``no_state`` processor; each query from a
fresh SparkSession so its workers start clean. Goals: the tiered workers' peak RSS within the
budget + 200 MiB, and their peak RSS minus the no-state workers' within the budget + 64 MiB.
The notes give the state per worker (by partition, and what each worker's stores served).

The JVM's and the Python workers' stderr go to ``bench/results/tmp/spark-jvm.log``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from bench.harness.common import BenchContext, Result, SuiteSkipped
from bench.harness.spark import require_pyspark, session
from bench.harness.spark_procs import KINDS, recorder
from bench.harness.spark_runner import (
    Config,
    Variant,
    check_loops,
    read_stats,
    run_once,
    variant_tag,
    write_batch,
)
from bench.suites.spark_e2e_memory import memory_bounded
from bench.suites.spark_e2e_rows import SUITE, results


def _make_variants(cfg: Config, root: Path, stats_dir: Path, state_uri: Path) -> list[Variant]:
    """Every variant of ``cfg``, the flavours alternating (pandas, row, pandas, row, ...).

    Alternating means that (but for the first query of a round) every query follows one of the
    other flavour, whichever its kind: any cost of switching flavours (warm Python workers, the
    previous query's garbage in the JVM) lands on every variant alike. In flavour blocks, each
    flavour's ``no_state`` query would nearly always be the one that follows the other flavour.
    """
    from fsstate_spark import tiered

    per_flavour: list[list[Variant]] = []
    for flavour, kinds in cfg.flavours():
        out: list[Variant] = []
        per_flavour.append(out)
        for kind in kinds:
            cls = KINDS[kind]
            modes = ["none"] if kind == "no_state" else ["native", "tiered"]
            for mode in modes:
                tag = variant_tag(flavour, kind, mode)
                bench = cls(tag, str(stats_dir), flavour)
                proc: StatefulProcessor = bench
                if mode == "tiered":
                    name = kind if flavour == "pandas" else f"{kind}_{flavour}"
                    proc = tiered(bench, state_uri=str(state_uri), name=name)
                cp = root / "checkpoints" / tag.replace("/", "-")
                rec = recorder(proc, bench)
                out.append(Variant(kind, mode, rec, cp, cls.calls_per_key, flavour))
    mixed = itertools.zip_longest(*per_flavour)
    return [v for group in mixed for v in group if v is not None]


def _compare(ctx: BenchContext, spark: Any, cfg: Config, root: Path) -> list[Result]:
    """Run one key-space size: every variant, round by round; returns its result rows."""
    input_dir = root / "input"
    stats_dir = root / "stats"
    for d in (input_dir, stats_dir):
        d.mkdir(parents=True)
    variants = _make_variants(cfg, root, stats_dir, root / "state")
    rng = np.random.default_rng(cfg.keys)
    batches = 1 + cfg.warm_batches + cfg.measured_batches
    for b in range(batches):
        if b == 0:
            ids = rng.permutation(cfg.keys)
        else:
            ids = rng.choice(cfg.keys, size=cfg.rows_per_batch, replace=False)
        rows = write_batch(input_dir, b, ids)
        order = variants[b % len(variants) :] + variants[: b % len(variants)]
        for v in order:
            run_once(spark, v, input_dir)
            ms = v.wall_ms.get(b)
            ctx.log(
                f"  {cfg.label} batch {b} {v.tag:<26} {rows:>7} rows "
                f"{ms / 1000 if ms else float('nan'):7.2f} s (query run {v.run_s[-1]:.1f} s)"
            )
    stats = read_stats(stats_dir)
    check_loops(stats, variants)
    measured = list(range(1 + cfg.warm_batches, batches))
    out: list[Result] = []
    for flavour, kinds in cfg.flavours():
        out += results(cfg, flavour, kinds, variants, stats, measured)
    return out


# -- memory-bounded run ---------------------------------------------------------------------------


def _configs(ctx: BenchContext) -> list[Config]:
    all_kinds = tuple(KINDS)
    two = ("no_state", "value_count")
    if ctx.quick:
        return [Config("20k", 20_000, 4_000, 3, two, row_kinds=two)]
    # 9 measured batches: the fewest whose order-statistic interval of the median (2nd to
    # 8th smallest) reaches 95 % coverage
    return [
        Config("20k", 20_000, 5_000, 9, all_kinds, row_kinds=all_kinds),
        Config("200k", 200_000, 5_000, 9, two, row_kinds=two),
    ]


def run(ctx: BenchContext) -> list[Result]:
    """Run the Spark end-to-end comparison (and, in full mode, the memory-bounded run)."""
    require_pyspark()
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SuiteSkipped("no Java runtime (java not on PATH, JAVA_HOME unset)")
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    out: list[Result] = []
    try:
        spark = session(ctx, "fsstate-bench-e2e")
        for cfg in _configs(ctx):
            if not ctx.wants(cfg.label):
                continue
            flav = ", ".join(f"{len(k)} {f}" for f, k in cfg.flavours())
            ctx.log(f"spark_e2e/{cfg.label}: workloads {flav} ...")
            t0 = time.perf_counter()
            try:
                res = _compare(ctx, spark, cfg, scratch / cfg.label)
            except Exception as exc:
                ctx.log(f"spark_e2e/{cfg.label} FAILED: {exc!r}")
                traceback.print_exc()
                out.append(Result(SUITE, cfg.label, 0.0, "", passed=False, notes=f"ERROR: {exc!r}"))
                continue
            for r in res:
                ctx.log(f"  {r.name}: {r.value:,.4g} {r.unit} ({r.status})")
            ctx.log(f"spark_e2e/{cfg.label} done in {time.perf_counter() - t0:.0f} s")
            out.extend(res)
        if not ctx.quick and ctx.wants("memory"):
            # fresh sessions (one per query): new Python workers, so ru_maxrss covers one
            # query only
            spark.stop()
            spark = None
            ctx.log("spark_e2e/memory-bounded ...")
            try:
                res = memory_bounded(ctx, scratch / "memory", 32, 176_000, 4)
            except Exception as exc:
                ctx.log(f"spark_e2e/memory FAILED: {exc!r}")
                traceback.print_exc()
                res = [Result(SUITE, "memory", 0.0, "", passed=False, notes=f"ERROR: {exc!r}")]
            for r in res:
                ctx.log(f"  {r.name}: {r.value:,.4g} {r.unit} ({r.status})")
            out.extend(res)
        if spark is not None:
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out
