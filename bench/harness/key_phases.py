"""Where a key's time goes in a profiled ``tiered()`` run: profiled time charged to named phases
(``spark_key_breakdown``, and ``spark_scale``'s breakdown at 30 M keys).

The workers of a session with ``FSSTATE_PROFILE_DIR`` set write one cProfile file per task
(:mod:`fsstate_spark.tiered.task_profile`, named ``<processor class>-s<stage>-p<partition>-
a<attempt>-<n>.prof``); :func:`profiles_by_class` groups them per processor class and stage (one
stage a batch of a query). :func:`phase_times` charges each function's own time in a profile to
a phase: the phase of the function if it is one of a phase's entry points (:data:`PHASES`,
matched by file and function), else the phases of its callers, in the shares of its cumulative
time each caller's calls took (cProfile keeps per-caller times), so a helper called by both the
commit and the input conversion is split between them. :func:`phase_rows` turns the phases of a
running aggregate and of its dict-state reference into rows: per phase and query µs per key
(the batch's profiled seconds over its distinct keys), and fsstate's share (the running
aggregate's minus the dict's, per key and as a fraction of the running aggregate's task time),
the first batch apart from the others.

Invariants: every profiled second is charged once (the phases of a profile sum to its total);
profiles are matched to a query by the processor's class in their file names and to a batch by
stage order; the rows are a pure function of the profiles and the batches' distinct keys.
"""

from __future__ import annotations

import pstats
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.harness.common import Result, median

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


def profiles_by_class(where: Path) -> dict[str, list[list[Path]]]:
    """Per processor class, its profile files grouped per stage (one stage a batch), in
    stage order."""
    by: dict[str, dict[int, list[Path]]] = defaultdict(lambda: defaultdict(list))
    for f in where.glob("*.prof"):
        m = re.match(r"(\w+)-s(\d+)-p\d+-a\d+-\d+\.prof$", f.name)
        if m:
            by[m.group(1)][int(m.group(2))].append(f)
    return {cls: [stages[s] for s in sorted(stages)] for cls, stages in by.items()}


def phase_rows(
    suite: str,
    by_class: dict[str, list[list[Path]]],
    distinct: list[int],
    queries: dict[str, str],
    work: str,
    prefix: str = "",
) -> list[Result]:
    """The phase rows (module docstring) of a run.

    Args:
        suite: the suite's name.
        by_class: :func:`profiles_by_class` of the run.
        distinct: the distinct keys of each batch, in order.
        queries: processor class -> title, the running aggregate first, its dict-state
            reference second.
        work: the workload text of the notes.
        prefix: the start of every row's name (e.g. ``30M keys, 64 MiB, ``).

    Raises:
        RuntimeError: a query's profiled batches are not the batches fed.
    """
    per_key: dict[str, list[dict[str, float]]] = {}
    for cls in queries:
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
        for cls, title in queries.items():
            for phase in ORDER:
                samples = [b.get(phase, 0.0) for b in picked[cls]]
                out.append(
                    Result(
                        suite,
                        f"{prefix}{title}, {label}: {phase}",
                        median(samples),
                        "µs/key",
                        notes=f"profiled µs per distinct key of the batch; {work}",
                        samples=samples,
                    )
                )
        running, reference = list(queries)
        run_total = [sum(b.values()) for b in picked[running]]
        dict_total = [sum(b.values()) for b in picked[reference]]
        diff = [a - b for a, b in zip(run_total, dict_total, strict=True)]
        out.append(
            Result(
                suite,
                f"{prefix}fsstate's share, {label}: running aggregate minus dict state",
                median(diff),
                "µs/key",
                notes=f"whole task per key, the running aggregate's minus the dict's; {work}",
                samples=diff,
            )
        )
        fractions = [d / t for d, t in zip(diff, run_total, strict=True) if t > 0]
        out.append(
            Result(
                suite,
                f"{prefix}fsstate's share, {label}: of the running aggregate's task time",
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
