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

Every query runs its processor inside :class:`Recorder`, which writes one stats line per task
(time in the state calls, keys, and for tiered state the task's own time getting and committing
its store, measured in the worker around the adapter's calls).

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
* ratios tiered/native and tiered/no_state of throughput. The notes of tiered/native give its
  ceiling, no_state/native: what state at no cost at all would reach, so a goal above it
  cannot be met by any backend on that run.

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

from bench.harness.common import BenchContext, Result, SuiteSkipped, median, spread_text
from bench.harness.spark import require_pyspark, session
from bench.harness.spark_procs import API, KINDS, Recorder
from bench.harness.spark_runner import (
    BatchStats,
    Config,
    Variant,
    batch_stats,
    paired,
    read_stats,
    run_once,
    variant_tag,
    write_batch,
)
from bench.suites.spark_e2e_memory import memory_bounded

SUITE = "spark_e2e"
MIB = 1024 * 1024

# goals (see docs/benchmarks.md)
GOAL_PER_CALL_FACTOR = 50.0  # native µs per state call / tiered µs per state call
GOAL_VS_NO_STATE = 0.95  # tiered throughput / no-state throughput (within 5 %)
GOAL_VS_NATIVE = 1.3  # tiered throughput / native throughput at 2 state calls per key


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
                rec = Recorder(proc, bench)
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
    measured = list(range(1 + cfg.warm_batches, batches))
    out: list[Result] = []
    for flavour, kinds in cfg.flavours():
        out += _results(cfg, flavour, kinds, variants, stats, measured)
    return out


def _results(
    cfg: Config,
    flavour: str,
    kinds: tuple[str, ...],
    variants: list[Variant],
    stats: list[dict[str, Any]],
    measured: list[int],
) -> list[Result]:
    """Result rows of one flavour, against that flavour's ``no_state`` query."""
    by_tag = {v.tag: v for v in variants if v.flavour == flavour}
    base = by_tag[variant_tag(flavour, "no_state", "none")]
    # pandas keeps the unmarked names (history stays comparable); Row gets a marker
    pandas = flavour == "pandas"
    lab = cfg.label if pandas else f"{cfg.label} {flavour}"
    base_name = "no_state" if pandas else f"{flavour} no_state"
    out: list[Result] = []
    base_rates = [base.rows[i] / base.wall_ms[i] * 1000 for i in measured if i in base.wall_ms]
    common = (
        f"{cfg.keys:,} keys in state, {cfg.rows_per_batch:,} rows (distinct keys) per batch, "
        f"median of {len(measured)} batches after the load batch and {cfg.warm_batches} "
        "unmeasured one(s)"
    )
    out.append(
        Result(
            SUITE,
            f"{lab} no_state",
            median(base_rates),
            "rows/s",
            notes=f"framework cost only (the limit), {API[flavour]}; {common}",
            samples=base_rates,
        )
    )

    def pooled_us(tag: str, stores: tuple[str, ...] | None = None) -> float | None:
        """In-worker µs per state call of ``tag``, pooled over its measured tasks (only those
        whose store outcome is in ``stores``, if given)."""
        lines = [s for s in stats if s["tag"] == tag and s["batch"] in measured]
        if stores is not None:
            lines = [s for s in lines if s.get("store", "") in stores]
        keys = sum(s["keys"] for s in lines)
        calls = by_tag[tag].calls_per_key or 1
        return sum(s["state_s"] for s in lines) / (keys * calls) * 1e6 if keys else None

    # what the timer itself costs per key (two perf_counter calls and a call of the no-op
    # touch): it stays in every in-worker figure below (gross), on both sides alike
    harness_us = pooled_us(base.tag)

    def moved(tag: str) -> str:
        """How many tasks ran in another worker than their partition's previous batch, and how
        the tiered tasks got their store (cached copy at the version, caught up, restored)."""
        pid = {(x["batch"], x["partition"]): x["pid"] for x in stats if x["tag"] == tag}
        pairs = [(b, p) for b, p in pid if b in measured and (b - 1, p) in pid]
        n = sum(1 for b, p in pairs if pid[(b, p)] != pid[(b - 1, p)])
        out = f"{n} of {len(pairs)} tasks ran in another worker than the previous batch"
        how = [x.get("store", "") for x in stats if x["tag"] == tag and x["batch"] in measured]
        if any(how):
            counts = ", ".join(f"{k} {how.count(k)}" for k in ("hit", "caught_up", "restored"))
            out += f"; stores: {counts}"
        return out

    for kind in kinds:
        if kind == "no_state":
            continue
        nat, tie = (
            by_tag[variant_tag(flavour, kind, "native")],
            by_tag[variant_tag(flavour, kind, "tiered")],
        )
        calls = nat.calls_per_key
        rates = {
            v.mode: [v.rows[i] / v.wall_ms[i] * 1000 for i in measured if i in v.wall_ms]
            for v in (nat, tie)
        }
        pn = paired(tie, nat, measured)
        pb = paired(tie, base, measured)
        pnb = paired(nat, base, measured)
        vs_native = [n / t for t, n, _ in pn]
        # what zero-cost state would reach: the framework's own time against native's
        ceiling = median([n / b for n, b, _ in pnb])
        vs_base = [b / t for t, b, _ in pb]
        cost_t = [(t - b) * 1000 / (calls * r) for t, b, r in pb]
        cost_n = [(n - b) * 1000 / (calls * r) for n, b, r in pnb]
        # in-worker figures per measured batch, over every task of the batch on each side
        # (restored stores included): the same batches, partitions and keys for both
        nb = batch_stats(stats, nat.tag, measured)
        tb = batch_stats(stats, tie.tag, measured)
        same = [
            b
            for b in measured
            if b in nb
            and b in tb
            and nb[b].partitions == tb[b].partitions
            and nb[b].keys == tb[b].keys > 0
        ]
        unpaired = [b for b in measured if b not in same]
        nat_us = [nb[b].state_s / (nb[b].keys * calls) * 1e6 for b in same]
        tie_us = [tb[b].state_s / (tb[b].keys * calls) * 1e6 for b in same]
        allin_us = [tb[b].fsstate_s / (tb[b].keys * calls) * 1e6 for b in same]
        per_call = [n / t for n, t in zip(nat_us, tie_us, strict=True) if t > 0]
        nat_vs_allin = [n / a for n, a in zip(nat_us, allin_us, strict=True) if a > 0]
        tasks = sum(tb[b].tasks for b in same)
        restored = sum(tb[b].restored for b in same)
        tasks_txt = (
            f"{len(same)} measured batches, {tasks} tiered tasks of which {restored} restored "
            "their store (included)"
            + (f"; batches left out (tasks or keys differ): {unpaired}" if unpaired else "")
        )
        first = [
            x
            for x in stats
            if x["tag"] == tie.tag
            and x["batch"] in measured
            and x.get("store") == "restored"
            and x["keys"]
        ]
        first_allin = [
            (x["state_s"] + x["acquire_s"] + x["finish_s"]) / (x["keys"] * calls) * 1e6
            for x in first
        ]
        first_calls = [x["state_s"] / (x["keys"] * calls) * 1e6 for x in first]
        cpu_t = _cpu_cost_us(tie, base, measured, calls)
        cpu_n = _cpu_cost_us(nat, base, measured, calls)
        cpu_vs_base = _cpu_ratio(base, tie, measured)
        cpu_vs_nat = _cpu_ratio(nat, tie, measured)
        desc = f"{calls} state call{'s' if calls > 1 else ''}/key"
        if not pandas:
            desc += f", {API[flavour]} against the {base_name} query"
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} native",
                median(rates["native"]),
                "rows/s",
                baseline_value=median(base_rates),
                notes=f"Spark's handles (RocksDB provider), {desc}",
                samples=rates["native"],
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} tiered",
                median(rates["tiered"]),
                "rows/s",
                baseline_value=median(base_rates),
                notes=f"tiered(...), {desc}",
                samples=rates["tiered"],
            )
        )
        two_calls = kind == "value_count"
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} tiered/native",
                median(vs_native),
                "x",
                goal=GOAL_VS_NATIVE if two_calls else None,
                notes=f"throughput ratio per batch (paired), {desc}; ceiling (state at no "
                f"cost: {base_name} vs native, paired) {_fmt_x(ceiling)}; CPU time per batch "
                f"of the process tree, native/tiered: {_fmt_x(cpu_vs_nat)}",
                samples=vs_native,
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} tiered/no_state",
                median(vs_base),
                "x",
                goal=GOAL_VS_NO_STATE if two_calls else None,
                notes=f"throughput ratio per batch (paired), {desc}; CPU time per batch of "
                f"the process tree, no_state/tiered: {_fmt_x(cpu_vs_base)}",
                samples=vs_base,
            )
        )
        ct, cn = median(cost_t), median(cost_n)
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call native",
                cn,
                "µs",
                notes=f"(native - {base_name} wall per batch) / state calls, per batch; "
                f"in-worker {_fmt_us(_median_or_none(nat_us))}/call (median per batch, time "
                f"around the state calls only); from CPU time of the process tree "
                f"{_fmt_us(cpu_n)}/call",
                samples=cost_n,
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call tiered",
                ct,
                "µs",
                notes=f"(tiered - {base_name} wall per batch) / state calls, per batch; "
                f"in-worker {_fmt_us(_median_or_none(tie_us))}/call (median per batch over "
                f"all its tasks, time around the state calls only; pooled over the tasks "
                f"whose store was cached or caught up: "
                f"{_fmt_us(pooled_us(tie.tag, ('hit', 'caught_up')))}), all-in with getting "
                f"and committing the stores {_fmt_us(_median_or_none(allin_us))}/call; from "
                f"CPU time of the process tree {_fmt_us(cpu_t)}/call; {moved(tie.tag)}",
                samples=cost_t,
            )
        )
        if calls >= 2:
            # the goal's ratio: in-worker time around the state calls, per batch, over the
            # same tasks on both sides, gross (the wall-based ratio is in the notes: a tiered
            # cost within noise of zero makes it unbounded)
            wall_txt = f"{cn / ct:.1f}" if ct > 0 else "unbounded (tiered cost below noise)"
            if cpu_t is not None and cpu_n is not None:
                cpu_f = f"{cpu_n / cpu_t:.1f}" if cpu_t > 0 else "unbounded (below noise)"
                wall_txt += f"; from CPU time: {cpu_f}"
            out.append(
                Result(
                    SUITE,
                    f"{lab} {kind} per-call native/tiered",
                    median(per_call) if per_call else float("nan"),
                    "x",
                    goal=GOAL_PER_CALL_FACTOR,
                    notes=f"per measured batch (paired): native in-worker µs per call / "
                    f"tiered in-worker µs per call, each summed over all the batch's tasks "
                    f"(same batches, partitions and keys on both sides); gross: the timer's "
                    f"own cost ({_fmt_us(harness_us)} per key, the {base_name} no-op touch) "
                    f"is in both; {spread_text(per_call, _fmt_f)}; {tasks_txt}; medians per "
                    f"batch: native {_fmt_us(_median_or_none(nat_us))}, tiered "
                    f"{_fmt_us(_median_or_none(tie_us))} per call; native in-worker / tiered "
                    f"all-in (next row): {_fmt_x(_median_or_none(nat_vs_allin))} "
                    f"({spread_text(nat_vs_allin, _fmt_f)}); ratio of the wall-based "
                    f"µs/call medians: {wall_txt}" + ("" if pandas else f"; {API[flavour]}"),
                    samples=per_call,
                )
            )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call tiered all-in",
                median(allin_us) if allin_us else float("nan"),
                "µs",
                notes=f"per measured batch: (time in the state calls + getting the stores + "
                f"committing them, summed over all the batch's tiered tasks) / state calls "
                f"of the batch; getting = the adapter's acquire (cached copy, catch-up or "
                f"restore), committing = its finish (TTL cleanup, commit, hand-back), both "
                f"measured in the worker around the adapter's calls, per task; medians per "
                f"batch: calls {_ms(tb, same, 'state_s')}, getting "
                f"{_ms(tb, same, 'acquire_s')}, committing {_ms(tb, same, 'finish_s')}; "
                f"{spread_text(allin_us, _fmt_f)}; {tasks_txt}; native's in-worker figure "
                f"({_fmt_us(_median_or_none(nat_us))}/call) leaves out Spark's own store "
                "commit, which runs in the JVM; for scale, the processor's init + close in "
                "the worker (declaring the state variables included) took per batch: tiered "
                f"{_ms(tb, same, 'init_s')} + {_ms(tb, same, 'close_s')}, native "
                f"{_ms(nb, same, 'init_s')} + {_ms(nb, same, 'close_s')}",
                samples=allin_us,
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call tiered first visit",
                median(first_allin) if first_allin else float("nan"),
                "µs",
                notes=f"all-in µs per call (state calls + getting + committing the store) "
                f"of each measured task that restored its store ({len(first)} tasks; state "
                f"calls alone {_fmt_us(_median_or_none(first_calls))}/call): a worker's "
                "first batch of a partition opens the version and loads the table (once per "
                "worker and partition)",
                samples=first_allin,
            )
        )
        ours = [tb[b].fsstate_s * 1000 for b in same]
        share = [tb[b].fsstate_s * 1000 / tie.wall_ms[b] for b in same if b in tie.wall_ms]
        if ours:
            out.append(
                Result(
                    SUITE,
                    f"{lab} {kind} tiered: fsstate ms/batch",
                    median(ours),
                    "ms",
                    notes=f"time inside fsstate per batch, summed over its tasks: state calls "
                    f"(median {_ms(tb, same, 'state_s')}) plus getting and committing the "
                    f"stores; median share of the batch's wall time "
                    f"{100 * _median_or_none(share, 0.0):.1f} % (tasks run in parallel, so "
                    "this is an upper bound of what fsstate adds to a batch)",
                    samples=ours,
                )
            )
    return out


def _median_or_none(xs: list[float], default: float | None = None) -> Any:
    """Median of ``xs``, or ``default`` when empty."""
    return median(xs) if xs else default


def _ms(per_batch: dict[int, BatchStats], batches: list[int], attr: str) -> str:
    """Median over ``batches`` of one summed field, in ms."""
    xs = [getattr(per_batch[b], attr) * 1000 for b in batches]
    return f"{median(xs):.1f} ms" if xs else "—"


def _fmt_f(x: float) -> str:
    return f"{x:.3g}"


def _cpu_cost_us(v: Variant, base: Variant, measured: list[int], calls: int) -> float | None:
    """Median over batches of (CPU s of ``v`` - of ``base``) per state call, in µs."""
    xs = [
        (v.cpu_s[i] - base.cpu_s[i]) * 1e6 / (calls * v.rows[i])
        for i in measured
        if i in v.cpu_s and i in base.cpu_s
    ]
    return median(xs) if xs else None


def _cpu_ratio(a: Variant, b: Variant, measured: list[int]) -> float | None:
    """Median over batches of CPU s per row of ``a`` over that of ``b``."""
    xs = [
        (a.cpu_s[i] / a.rows[i]) / (b.cpu_s[i] / b.rows[i])
        for i in measured
        if i in a.cpu_s and i in b.cpu_s and b.cpu_s[i] > 0
    ]
    return median(xs) if xs else None


def _fmt_x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f} x"


def _fmt_us(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g} µs"


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
