"""The result rows of ``spark_e2e``: one flavour's variants against its ``no_state`` query.

Part of the ``spark_e2e`` suite (:mod:`bench.suites.spark_e2e` runs the queries and calls
:func:`results`); the figures are described there. Per stateful workload, in this order: rows/s
native and tiered, tiered/native and tiered/no_state (paired throughput ratios), µs/call native
and tiered (wall-based), per-call native/tiered (the goal, 2+ state calls per key), µs/call
tiered all-in, µs/call tiered first visit, and the fsstate ms per batch.

Invariants:

* Rows are a pure function of the variants' progress (wall times, rows, CPU times) and the
  workers' stats lines: nothing here runs Spark or reads files.
* Paired figures use only the batches both sides measured; in-worker per-call figures only the
  batches whose tasks covered the same partitions and keys on both sides (the others are named
  in the notes).
* The pandas flavour keeps the unmarked row names (history stays comparable); the Row flavour's
  rows carry its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.harness.common import Result, median, spread_text
from bench.harness.spark_procs import API
from bench.harness.spark_runner import BatchStats, Config, Variant, batch_stats, paired, variant_tag

SUITE = "spark_e2e"

# goals (see docs/benchmarks.md)
GOAL_PER_CALL_FACTOR = 50.0  # native µs per state call / tiered µs per state call
GOAL_VS_NO_STATE = 0.95  # tiered throughput / no-state throughput (within 5 %)
GOAL_VS_NATIVE = 1.3  # tiered throughput / native throughput at 2 state calls per key

Stats = list[dict[str, Any]]


@dataclass
class Flavour:
    """One API flavour's variants and the workers' stats lines, over the measured batches."""

    cfg: Config
    flavour: str
    by_tag: dict[str, Variant]
    stats: Stats
    measured: list[int]

    @property
    def pandas(self) -> bool:
        """Whether this is the pandas flavour (unmarked row names)."""
        return self.flavour == "pandas"

    @property
    def base(self) -> Variant:
        """The flavour's ``no_state`` query: the baseline of every ratio."""
        return self.by_tag[variant_tag(self.flavour, "no_state", "none")]

    @property
    def label(self) -> str:
        """The start of the flavour's row names."""
        return self.cfg.label if self.pandas else f"{self.cfg.label} {self.flavour}"

    @property
    def base_name(self) -> str:
        """How the notes name the ``no_state`` query."""
        return "no_state" if self.pandas else f"{self.flavour} no_state"

    def rates(self, v: Variant) -> list[float]:
        """Rows/s of ``v`` per measured batch."""
        return [v.rows[i] / v.wall_ms[i] * 1000 for i in self.measured if i in v.wall_ms]

    def pooled_us(self, tag: str, stores: tuple[str, ...] | None = None) -> float | None:
        """In-worker µs per state call of ``tag``, pooled over its measured tasks (only those
        whose store outcome is in ``stores``, if given)."""
        lines = [s for s in self.stats if s["tag"] == tag and s["batch"] in self.measured]
        if stores is not None:
            lines = [s for s in lines if s.get("store", "") in stores]
        keys = sum(s["keys"] for s in lines)
        calls = self.by_tag[tag].calls_per_key or 1
        return sum(s["state_s"] for s in lines) / (keys * calls) * 1e6 if keys else None

    def moved(self, tag: str) -> str:
        """How many tasks ran in another worker than their partition's previous batch, and how
        the tiered tasks got their store (cached copy at the version, caught up, restored)."""
        measured = self.measured
        pid = {(x["batch"], x["partition"]): x["pid"] for x in self.stats if x["tag"] == tag}
        pairs = [(b, p) for b, p in pid if b in measured and (b - 1, p) in pid]
        n = sum(1 for b, p in pairs if pid[(b, p)] != pid[(b - 1, p)])
        out = f"{n} of {len(pairs)} tasks ran in another worker than the previous batch"
        how = [x.get("store", "") for x in self.stats if x["tag"] == tag and x["batch"] in measured]
        if any(how):
            counts = ", ".join(f"{k} {how.count(k)}" for k in ("hit", "caught_up", "restored"))
            out += f"; stores: {counts}"
        return out


@dataclass
class Wall:
    """Wall-clock figures of a workload, per measured batch (Spark's ``triggerExecution``)."""

    rates: dict[str, list[float]]  # mode -> rows/s
    vs_native: list[float]  # tiered throughput over native's, paired
    ceiling: float  # no_state over native: what state at no cost would reach
    vs_base: list[float]  # tiered throughput over no_state's, paired
    cost_t: list[float]  # (tiered - no_state) µs per state call
    cost_n: list[float]  # (native - no_state) µs per state call


@dataclass
class InWorker:
    """Per-batch figures measured in the workers, over every task of the batch on each side."""

    nb: dict[int, BatchStats]
    tb: dict[int, BatchStats]
    same: list[int]  # batches whose tasks covered the same partitions and keys on both sides
    nat_us: list[float]
    tie_us: list[float]
    allin_us: list[float]
    per_call: list[float]
    nat_vs_allin: list[float]
    tasks_txt: str
    first: Stats = field(default_factory=list)  # measured tiered tasks that restored their store
    first_allin: list[float] = field(default_factory=list)
    first_calls: list[float] = field(default_factory=list)


@dataclass
class Cpu:
    """CPU time of the process tree per batch (None without paired samples)."""

    t: float | None  # tiered µs per state call over no_state
    n: float | None  # native µs per state call over no_state
    vs_base: float | None  # no_state CPU per row over tiered's
    vs_nat: float | None  # native CPU per row over tiered's


@dataclass
class Workload:
    """One stateful workload of a flavour: its two variants and their figures."""

    kind: str
    nat: Variant
    tie: Variant
    calls: int
    desc: str
    wall: Wall
    worker: InWorker
    cpu: Cpu


def results(
    cfg: Config,
    flavour: str,
    kinds: tuple[str, ...],
    variants: list[Variant],
    stats: Stats,
    measured: list[int],
) -> list[Result]:
    """Result rows of one flavour, against that flavour's ``no_state`` query.

    Args:
        cfg: the key-space size that ran.
        flavour: ``pandas`` or ``row``.
        kinds: the flavour's workloads (``no_state`` among them).
        variants: every variant of the run (other flavours' are left out).
        stats: the workers' stats lines of the run.
        measured: the measured batch ids.

    Returns:
        The ``no_state`` row, then each stateful workload's rows (module docstring).
    """
    by_tag = {v.tag: v for v in variants if v.flavour == flavour}
    fl = Flavour(cfg, flavour, by_tag, stats, measured)
    out = [_no_state_row(fl)]
    for kind in kinds:
        if kind == "no_state":
            continue
        w = _workload(fl, kind)
        out += _throughput_rows(fl, w) + _per_call_rows(fl, w) + _tiered_rows(fl, w)
    return out


# -- figures ----------------------------------------------------------------------------------
def _workload(fl: Flavour, kind: str) -> Workload:
    """The figures of ``kind`` in ``fl``'s flavour."""
    nat = fl.by_tag[variant_tag(fl.flavour, kind, "native")]
    tie = fl.by_tag[variant_tag(fl.flavour, kind, "tiered")]
    calls = nat.calls_per_key
    desc = f"{calls} state call{'s' if calls > 1 else ''}/key"
    if not fl.pandas:
        desc += f", {API[fl.flavour]} against the {fl.base_name} query"
    cpu = Cpu(
        t=_cpu_cost_us(tie, fl.base, fl.measured, calls),
        n=_cpu_cost_us(nat, fl.base, fl.measured, calls),
        vs_base=_cpu_ratio(fl.base, tie, fl.measured),
        vs_nat=_cpu_ratio(nat, tie, fl.measured),
    )
    return Workload(
        kind, nat, tie, calls, desc, _wall(fl, nat, tie, calls), _in_worker(fl, nat, tie), cpu
    )


def _wall(fl: Flavour, nat: Variant, tie: Variant, calls: int) -> Wall:
    """Throughput and wall-based cost figures, paired by batch."""
    pn = paired(tie, nat, fl.measured)
    pb = paired(tie, fl.base, fl.measured)
    pnb = paired(nat, fl.base, fl.measured)
    return Wall(
        rates={v.mode: fl.rates(v) for v in (nat, tie)},
        vs_native=[n / t for t, n, _ in pn],
        ceiling=median([n / b for n, b, _ in pnb]),
        vs_base=[b / t for t, b, _ in pb],
        cost_t=[(t - b) * 1000 / (calls * r) for t, b, r in pb],
        cost_n=[(n - b) * 1000 / (calls * r) for n, b, r in pnb],
    )


def _in_worker(fl: Flavour, nat: Variant, tie: Variant) -> InWorker:
    """In-worker figures per measured batch, over every task of the batch on each side
    (restored stores included): the same batches, partitions and keys for both."""
    calls = nat.calls_per_key
    nb = batch_stats(fl.stats, nat.tag, fl.measured)
    tb = batch_stats(fl.stats, tie.tag, fl.measured)
    same = [
        b
        for b in fl.measured
        if b in nb
        and b in tb
        and nb[b].partitions == tb[b].partitions
        and nb[b].keys == tb[b].keys > 0
    ]
    unpaired = [b for b in fl.measured if b not in same]
    nat_us = [nb[b].state_s / (nb[b].keys * calls) * 1e6 for b in same]
    tie_us = [tb[b].state_s / (tb[b].keys * calls) * 1e6 for b in same]
    allin_us = [tb[b].fsstate_s / (tb[b].keys * calls) * 1e6 for b in same]
    tasks = sum(tb[b].tasks for b in same)
    restored = sum(tb[b].restored for b in same)
    tasks_txt = (
        f"{len(same)} measured batches, {tasks} tiered tasks of which {restored} restored "
        "their store (included)"
        + (f"; batches left out (tasks or keys differ): {unpaired}" if unpaired else "")
    )
    out = InWorker(
        nb,
        tb,
        same,
        nat_us,
        tie_us,
        allin_us,
        per_call=[n / t for n, t in zip(nat_us, tie_us, strict=True) if t > 0],
        nat_vs_allin=[n / a for n, a in zip(nat_us, allin_us, strict=True) if a > 0],
        tasks_txt=tasks_txt,
    )
    _first_visits(fl, tie, calls, out)
    return out


def _first_visits(fl: Flavour, tie: Variant, calls: int, into: InWorker) -> None:
    """The measured tiered tasks that restored their store, and their µs per call."""
    into.first = [
        x
        for x in fl.stats
        if x["tag"] == tie.tag
        and x["batch"] in fl.measured
        and x.get("store") == "restored"
        and x["keys"]
    ]
    into.first_allin = [
        (x["state_s"] + x["acquire_s"] + x["finish_s"]) / (x["keys"] * calls) * 1e6
        for x in into.first
    ]
    into.first_calls = [x["state_s"] / (x["keys"] * calls) * 1e6 for x in into.first]


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


# -- rows -------------------------------------------------------------------------------------
def _no_state_row(fl: Flavour) -> Result:
    """The flavour's ``no_state`` throughput: the framework's cost, the limit."""
    cfg = fl.cfg
    common = (
        f"{cfg.keys:,} keys in state, {cfg.rows_per_batch:,} rows (distinct keys) per batch, "
        f"median of {len(fl.measured)} batches after the load batch and {cfg.warm_batches} "
        "unmeasured one(s)"
    )
    base_rates = fl.rates(fl.base)
    return Result(
        SUITE,
        f"{fl.label} no_state",
        median(base_rates),
        "rows/s",
        notes=f"framework cost only (the limit), {API[fl.flavour]}; {common}",
        samples=base_rates,
    )


def _throughput_rows(fl: Flavour, w: Workload) -> list[Result]:
    """Rows/s native and tiered, and tiered's throughput over native's and over no_state's."""
    lab, wall, base_rates = fl.label, w.wall, fl.rates(fl.base)
    two_calls = w.kind == "value_count"
    return [
        Result(
            SUITE,
            f"{lab} {w.kind} native",
            median(wall.rates["native"]),
            "rows/s",
            baseline_value=median(base_rates),
            notes=f"Spark's handles (RocksDB provider), {w.desc}",
            samples=wall.rates["native"],
        ),
        Result(
            SUITE,
            f"{lab} {w.kind} tiered",
            median(wall.rates["tiered"]),
            "rows/s",
            baseline_value=median(base_rates),
            notes=f"tiered(...), {w.desc}",
            samples=wall.rates["tiered"],
        ),
        Result(
            SUITE,
            f"{lab} {w.kind} tiered/native",
            median(wall.vs_native),
            "x",
            goal=GOAL_VS_NATIVE if two_calls else None,
            notes=f"throughput ratio per batch (paired), {w.desc}; state at no cost on "
            f"PySpark's loop ({fl.base_name} vs native, paired) {_fmt_x(wall.ceiling)}, "
            f"tiered runs fsstate's loop; CPU time per "
            f"batch of the process tree, native/tiered: {_fmt_x(w.cpu.vs_nat)}",
            samples=wall.vs_native,
        ),
        Result(
            SUITE,
            f"{lab} {w.kind} tiered/no_state",
            median(wall.vs_base),
            "x",
            goal=GOAL_VS_NO_STATE if two_calls else None,
            notes=f"throughput ratio per batch (paired), {w.desc}; CPU time per batch of "
            f"the process tree, no_state/tiered: {_fmt_x(w.cpu.vs_base)}",
            samples=wall.vs_base,
        ),
    ]


def _per_call_rows(fl: Flavour, w: Workload) -> list[Result]:
    """µs per state call native and tiered (wall-based), and the per-call goal's ratio."""
    lab, base_name, iw = fl.label, fl.base_name, w.worker
    ct, cn = median(w.wall.cost_t), median(w.wall.cost_n)
    out = [
        Result(
            SUITE,
            f"{lab} {w.kind} µs/call native",
            cn,
            "µs",
            notes=f"(native - {base_name} wall per batch) / state calls, per batch; "
            f"in-worker {_fmt_us(_median_or_none(iw.nat_us))}/call (median per batch, time "
            f"around the state calls only); from CPU time of the process tree "
            f"{_fmt_us(w.cpu.n)}/call",
            samples=w.wall.cost_n,
        ),
        Result(
            SUITE,
            f"{lab} {w.kind} µs/call tiered",
            ct,
            "µs",
            notes=f"(tiered - {base_name} wall per batch) / state calls, per batch (the "
            f"{base_name} query runs on PySpark's per-key loop, tiered() on fsstate's when the "
            "session sets pyspark_fsstate.worker: the difference then holds the loops' gap "
            "too, and is negative when the tiered query is the faster one); "
            f"in-worker {_fmt_us(_median_or_none(iw.tie_us))}/call (median per batch over "
            f"all its tasks, time around the state calls only; pooled over the tasks "
            f"whose store was cached or caught up: "
            f"{_fmt_us(fl.pooled_us(w.tie.tag, ('hit', 'caught_up')))}), all-in with getting "
            f"and committing the stores {_fmt_us(_median_or_none(iw.allin_us))}/call; from "
            f"CPU time of the process tree {_fmt_us(w.cpu.t)}/call; {fl.moved(w.tie.tag)}",
            samples=w.wall.cost_t,
        ),
    ]
    if w.calls >= 2:
        out.append(_per_call_goal_row(fl, w, cn, ct))
    return out


def _per_call_goal_row(fl: Flavour, w: Workload, cn: float, ct: float) -> Result:
    """The goal's ratio: in-worker time around the state calls, per batch, over the same tasks
    on both sides, gross (the wall-based ratio is in the notes: a tiered cost within noise of
    zero makes it unbounded)."""
    iw = w.worker
    # what the timer itself costs per key (two perf_counter calls and a call of the no-op
    # touch): it stays in every in-worker figure (gross), on both sides alike
    harness_us = fl.pooled_us(fl.base.tag)
    wall_txt = f"{cn / ct:.1f}" if ct > 0 else "unbounded (tiered cost below noise)"
    if w.cpu.t is not None and w.cpu.n is not None:
        cpu_f = f"{w.cpu.n / w.cpu.t:.1f}" if w.cpu.t > 0 else "unbounded (below noise)"
        wall_txt += f"; from CPU time: {cpu_f}"
    return Result(
        SUITE,
        f"{fl.label} {w.kind} per-call native/tiered",
        median(iw.per_call) if iw.per_call else float("nan"),
        "x",
        goal=GOAL_PER_CALL_FACTOR,
        notes=f"per measured batch (paired): native in-worker µs per call / "
        f"tiered in-worker µs per call, each summed over all the batch's tasks "
        f"(same batches, partitions and keys on both sides); gross: the timer's "
        f"own cost ({_fmt_us(harness_us)} per key, the {fl.base_name} no-op touch) "
        f"is in both; {spread_text(iw.per_call, _fmt_f)}; {iw.tasks_txt}; medians per "
        f"batch: native {_fmt_us(_median_or_none(iw.nat_us))}, tiered "
        f"{_fmt_us(_median_or_none(iw.tie_us))} per call; native in-worker / tiered "
        f"all-in (next row): {_fmt_x(_median_or_none(iw.nat_vs_allin))} "
        f"({spread_text(iw.nat_vs_allin, _fmt_f)}); ratio of the wall-based "
        f"µs/call medians: {wall_txt}" + ("" if fl.pandas else f"; {API[fl.flavour]}"),
        samples=iw.per_call,
    )


def _tiered_rows(fl: Flavour, w: Workload) -> list[Result]:
    """µs per call tiered all-in and on a first visit, and fsstate's ms per batch."""
    iw = w.worker
    tb, nb, same = iw.tb, iw.nb, iw.same
    out = [
        Result(
            SUITE,
            f"{fl.label} {w.kind} µs/call tiered all-in",
            median(iw.allin_us) if iw.allin_us else float("nan"),
            "µs",
            notes=f"per measured batch: (time in the state calls + getting the stores + "
            f"committing them, summed over all the batch's tiered tasks) / state calls "
            f"of the batch; getting = the adapter's acquire (cached copy, catch-up or "
            f"restore), committing = its finish (TTL cleanup, commit, hand-back), both "
            f"measured in the worker around the adapter's calls, per task; medians per "
            f"batch: calls {_ms(tb, same, 'state_s')}, getting "
            f"{_ms(tb, same, 'acquire_s')}, committing {_ms(tb, same, 'finish_s')}; "
            f"{spread_text(iw.allin_us, _fmt_f)}; {iw.tasks_txt}; native's in-worker figure "
            f"({_fmt_us(_median_or_none(iw.nat_us))}/call) leaves out Spark's own store "
            "commit, which runs in the JVM; for scale, the processor's init + close in "
            "the worker (declaring the state variables included) took per batch: tiered "
            f"{_ms(tb, same, 'init_s')} + {_ms(tb, same, 'close_s')}, native "
            f"{_ms(nb, same, 'init_s')} + {_ms(nb, same, 'close_s')}",
            samples=iw.allin_us,
        ),
        Result(
            SUITE,
            f"{fl.label} {w.kind} µs/call tiered first visit",
            median(iw.first_allin) if iw.first_allin else float("nan"),
            "µs",
            notes=f"all-in µs per call (state calls + getting + committing the store) "
            f"of each measured task that restored its store ({len(iw.first)} tasks; state "
            f"calls alone {_fmt_us(_median_or_none(iw.first_calls))}/call): a worker's "
            "first batch of a partition opens the version and loads the table (once per "
            "worker and partition)",
            samples=iw.first_allin,
        ),
    ]
    ours = [tb[b].fsstate_s * 1000 for b in same]
    if ours:
        out.append(_fsstate_ms_row(fl, w, ours))
    return out


def _fsstate_ms_row(fl: Flavour, w: Workload, ours: list[float]) -> Result:
    """The time inside fsstate per batch (``ours``, ms) and its share of the batch."""
    tb, same = w.worker.tb, w.worker.same
    share = [tb[b].fsstate_s * 1000 / w.tie.wall_ms[b] for b in same if b in w.tie.wall_ms]
    return Result(
        SUITE,
        f"{fl.label} {w.kind} tiered: fsstate ms/batch",
        median(ours),
        "ms",
        notes=f"time inside fsstate per batch, summed over its tasks: state calls "
        f"(median {_ms(tb, same, 'state_s')}) plus getting and committing the "
        f"stores; median share of the batch's wall time "
        f"{100 * _median_or_none(share, 0.0):.1f} % (tasks run in parallel, so "
        "this is an upper bound of what fsstate adds to a batch)",
        samples=ours,
    )


# -- formatting -------------------------------------------------------------------------------
def _median_or_none(xs: list[float], default: float | None = None) -> Any:
    """Median of ``xs``, or ``default`` when empty."""
    return median(xs) if xs else default


def _ms(per_batch: dict[int, BatchStats], batches: list[int], attr: str) -> str:
    """Median over ``batches`` of one summed field, in ms."""
    xs = [getattr(per_batch[b], attr) * 1000 for b in batches]
    return f"{median(xs):.1f} ms" if xs else "—"


def _fmt_f(x: float) -> str:
    return f"{x:.3g}"


def _fmt_x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f} x"


def _fmt_us(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g} µs"
