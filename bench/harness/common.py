"""Shared pieces of the benchmark suites: result records, the run context and timing helpers.

Every suite is a function ``run(ctx: BenchContext) -> list[Result]`` (see
:mod:`bench.harness.runner`).

Measurement rules used by every helper here:

* ``time.perf_counter`` only; each figure is the median of several samples after warm-ups.
* A full ``gc.collect()`` runs before every sample, engine and baseline alike, and the
  collector stays enabled while the sample runs (engine and baseline pay the same allocation
  costs, as they would in a real process).
* Engine and baseline are measured in the same process, interleaved sample by sample and
  alternating which of the two goes first, so both see the same CPU frequency, cache and
  allocator state, and neither always runs right after the other's garbage.
* A row's ``value`` is the median of its ``samples`` (unless its ``stat`` says otherwise), its
  status is decided on that median, and :func:`median_ci` gives the spread shown beside it.
* A ratio row (:func:`ratio_result`) pairs its samples (the same batch or round on both
  sides): each sample is one pair's ratio, never a ratio of two medians.
* A row that could not be measured here is published as such (:func:`skipped_result`: no
  value, status ``skipped``, the reason in its notes), never left out silently.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from devkit.repo import ROOT

GoalOp = Literal[">=", "<="]

REPO_ROOT = ROOT  # the checkout holding bench/
RESULTS_DIR = REPO_ROOT / "bench" / "results"


SKIPPED = "SKIPPED"  # the notes of a row not measured start with it (see skipped_result)


class SuiteSkipped(Exception):
    """Raised by a suite that cannot run here (missing dependency, no Java, ...)."""


@dataclass
class Result:
    """One benchmark figure.

    Attributes:
        suite: name of the suite that measured it.
        name: short, stable name of the benchmark (the table row).
        value: measured figure (median of the samples).
        unit: unit of ``value`` and ``goal``, e.g. ``ops/s``, ``ms``, ``x``.
        goal: target figure, or None for an informational row.
        goal_op: ``>=`` (higher is better) or ``<=`` (lower is better).
        baseline_value: the same workload done with a plain Python dict, or None.
        ratio: ``value / baseline_value`` (engine over dict), or None without a baseline.
        notes: workload parameters and anything needed to read the figure.
        passed: whether ``value`` meets ``goal`` (None without a goal).
        samples: every sample behind ``value`` (same unit), for spread.
        stat: how ``value`` comes from ``samples``: ``median`` (the default), ``max`` (e.g.
            peak RSS over workers) or ``derived`` (computed once from other figures; the notes
            say how).
    """

    suite: str
    name: str
    value: float
    unit: str
    goal: float | None = None
    goal_op: GoalOp = ">="
    baseline_value: float | None = None
    ratio: float | None = None
    notes: str = ""
    passed: bool | None = None
    samples: list[float] = field(default_factory=list)
    stat: str = "median"

    def __post_init__(self) -> None:
        if self.ratio is None and self.baseline_value:
            self.ratio = self.value / self.baseline_value
        if self.passed is None and self.goal is not None and not self.skipped:
            if self.goal_op == ">=":
                self.passed = self.value >= self.goal
            else:
                self.passed = self.value <= self.goal

    @property
    def skipped(self) -> bool:
        """Whether the row was not measured (:func:`skipped_result`)."""
        return self.notes.startswith(SKIPPED)

    @property
    def goal_factor(self) -> float | None:
        """How far the value is from the goal, > 1 meaning better than the goal."""
        if self.goal is None or self.skipped or not self.value > 0 or self.goal <= 0:
            return None
        return self.value / self.goal if self.goal_op == ">=" else self.goal / self.value

    @property
    def status(self) -> str:
        """``pass``, ``miss``, ``info`` or ``skipped``."""
        if self.skipped:
            return "skipped"
        if self.passed is None:
            return "info"
        return "pass" if self.passed else "miss"

    @property
    def ci(self) -> tuple[float, float, float] | None:
        """``(low, high, coverage)`` of the median (:func:`median_ci`), or None (fewer than
        two samples, or a value that is not their median)."""
        xs = [x for x in self.samples if not math.isnan(x)]
        if self.stat != "median" or len(xs) < 2:
            return None
        return median_ci(xs)

    def to_json(self) -> dict[str, Any]:
        """JSON form (the dataclass fields plus ``status`` and ``ci``)."""
        out = asdict(self)
        out["status"] = self.status
        ci = self.ci
        out["ci"] = None if ci is None else {"low": ci[0], "high": ci[1], "coverage": ci[2]}
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Result:
        """Inverse of :meth:`to_json`."""
        names = {f for f in Result.__dataclass_fields__}
        return Result(**{k: v for k, v in obj.items() if k in names})


def skipped_result(
    suite: str, name: str, unit: str, reason: str, goal: float | None = None, goal_op: GoalOp = ">="
) -> Result:
    """A row that was not measured in this run: no value (NaN), status ``skipped``, the goal it
    would have had, and ``SKIPPED: <reason>`` as its notes."""
    return Result(
        suite=suite,
        name=name,
        value=math.nan,
        unit=unit,
        goal=goal,
        goal_op=goal_op,
        notes=f"{SKIPPED}: {reason}",
    )


def ratio_result(
    suite: str,
    name: str,
    ratios: list[float],
    what: str,
    context: str,
    goal: float | None = None,
    goal_op: GoalOp = ">=",
) -> Result:
    """A ratio row (unit ``x``) from paired samples.

    Args:
        suite: the suite's name.
        name: the row's name.
        ratios: one ratio per pair of samples (the row's samples; its value is their median).
        what: what the ratio is, the start of the notes.
        context: the rest of the notes (the workload), after the samples' spread.
        goal: the target ratio, or None for an informative row.
        goal_op: ``>=`` or ``<=``, as :class:`Result`.

    Returns:
        The row, its notes ``<what> (<spread_text(ratios)>); <context>``.
    """
    return Result(
        suite=suite,
        name=name,
        value=median(ratios),
        unit="x",
        goal=goal,
        goal_op=goal_op,
        notes=f"{what} ({spread_text(ratios)}); {context}",
        samples=ratios,
    )


@dataclass
class BenchContext:
    """What a suite gets from the runner.

    Attributes:
        mode: ``quick`` or ``full``.
        results_dir: where result files go (``bench/results``).
        tmp_dir: scratch space kept between runs (``bench/results/tmp``, gitignored); suites
            cache expensive fixtures there.
        only: substring filters on benchmark names (empty: run everything).
        verbose: print progress lines.
    """

    mode: str
    results_dir: Path = RESULTS_DIR
    tmp_dir: Path = RESULTS_DIR / "tmp"
    only: list[str] = field(default_factory=list)
    verbose: bool = True

    @property
    def quick(self) -> bool:
        """Whether this is the small run."""
        return self.mode == "quick"

    def pick(self, quick: Any, full: Any) -> Any:
        """The quick or full variant of a parameter."""
        return quick if self.quick else full

    def wants(self, name: str) -> bool:
        """Whether the benchmark ``name`` passes the ``--only`` filters."""
        return not self.only or any(o in name for o in self.only)

    def log(self, msg: str) -> None:
        """Print a progress line (stderr, so stdout stays clean)."""
        if self.verbose:
            print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- timing -------------------------------------------------------------------------------------
def time_call(fn: Callable[[], Any], collect: bool = True) -> float:
    """Seconds one call of ``fn`` takes (after a full collection unless ``collect`` is false)."""
    if collect:
        gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sample(
    fn: Callable[[], Any],
    *,
    repeat: int,
    warmup: int = 1,
    setup: Callable[[], Any] | None = None,
) -> list[float]:
    """Seconds per call of ``fn`` over ``repeat`` samples, after ``warmup`` untimed calls.

    ``setup`` (untimed) runs before each call, warm-ups included.
    """
    out = []
    for i in range(warmup + repeat):
        if setup is not None:
            setup()
        dt = time_call(fn)
        if i >= warmup:
            out.append(dt)
    return out


def sample_pair(
    engine: Callable[[], Any],
    baseline: Callable[[], Any],
    *,
    repeat: int,
    warmup: int = 1,
    setup: Callable[[], Any] | None = None,
) -> tuple[list[float], list[float]]:
    """Interleaved samples of an engine call and its dict baseline (seconds per call).

    ``setup`` (untimed) runs before each pair. The engine goes first in even pairs, the
    baseline in odd ones; a full collection runs before each of the two calls.
    """
    eng: list[float] = []
    base: list[float] = []
    for i in range(warmup + repeat):
        if setup is not None:
            setup()
        if i % 2 == 0:
            de = time_call(engine)
            db = time_call(baseline)
        else:
            db = time_call(baseline)
            de = time_call(engine)
        if i >= warmup:
            eng.append(de)
            base.append(db)
    return eng, base


def median(xs: list[float]) -> float:
    """Median of a non-empty list."""
    return float(statistics.median(xs))


def median_ci(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free confidence interval of the median of ``xs``: ``(low, high, coverage)``.

    The interval runs from the ``j``-th smallest to the ``j``-th largest sample, with the
    largest ``j`` whose coverage ``P(j <= B <= n - j)``, ``B ~ Binomial(n, 1/2)``, is at least
    ``level`` (exact for any continuous distribution, independent samples). With fewer than 6
    samples no such interval reaches 95 %: the result is then min..max with its coverage
    (``1 - 2 / 2**n``: 94 % for 5 samples, 75 % for 3, 50 % for 2).
    """
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median_ci of no samples")
    if n == 1:
        return s[0], s[0], 0.0

    def coverage(j: int) -> float:
        return sum(math.comb(n, i) for i in range(j, n - j + 1)) / float(2**n)

    best = (s[0], s[-1], coverage(1))
    for j in range(2, n // 2 + 1):
        c = coverage(j)
        if c < level:
            break
        best = (s[j - 1], s[n - j], c)
    return best


def spread_text(xs: list[float], fmt: Callable[[float], str] = lambda x: f"{x:.3g}") -> str:
    """``n=9, CI of the median [1.2, 1.5] (96 %), range [1.1, 1.7]`` for notes (just the range
    and its coverage when the interval is the whole range)."""
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return "no samples"
    if len(xs) == 1:
        return f"n=1 ({fmt(xs[0])})"
    lo, hi, cov = median_ci(xs)
    rng = f"range [{fmt(min(xs))}, {fmt(max(xs))}]"
    if (lo, hi) == (min(xs), max(xs)):
        return f"n={len(xs)}, {rng} (as an interval of the median: {100 * cov:.0f} %)"
    return f"n={len(xs)}, CI of the median [{fmt(lo)}, {fmt(hi)}] ({100 * cov:.0f} %), {rng}"


def rates(count: float, seconds: list[float]) -> list[float]:
    """Per-second rates of ``count`` operations for each sample."""
    return [count / s for s in seconds]


def percentile(xs: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of a non-empty list, nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...`` leaves the elapsed seconds in ``t[0]``."""
    out: list[float] = [0.0]
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out[0] = time.perf_counter() - t0


# -- machine --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GitState:
    """The checkout the benchmarks run from: ``HEAD``'s full hash (None outside git) and whether
    tracked files differ from it."""

    commit: str | None
    dirty: bool


def git_state() -> GitState:
    """``HEAD`` of the checkout holding ``bench/`` and whether its tracked files have changes."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return GitState(None, False)
    return GitState(rev or None, bool(dirty))


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``2026-11-25T03:18:44+00:00``)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """CPU, memory, OS and library versions of this machine, plus a UTC timestamp.

    The commit is not here: each suite's JSON records the commit it ran at
    (:mod:`bench.harness.runner`). ``fsstate_in_checkout`` says whether ``fsstate`` was imported
    from the checkout whose commit is recorded.
    """
    import numpy
    import pyarrow

    import fsstate

    fsstate_dir = Path(fsstate.__file__).resolve().parent
    info: dict[str, Any] = {
        "timestamp": utc_now(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
        "fsstate": getattr(fsstate, "__version__", "?"),
        "fsstate_path": str(fsstate_dir),
        "fsstate_in_checkout": fsstate_dir.is_relative_to(REPO_ROOT),
    }
    if hasattr(os, "getloadavg"):
        info["loadavg_1m_at_start"] = round(os.getloadavg()[0], 2)
    try:
        import psutil

        info["cpu_count_physical"] = psutil.cpu_count(logical=False)
        info["memory_total_bytes"] = int(psutil.virtual_memory().total)
    except ImportError:  # pragma: no cover - psutil is a dev dependency
        pass
    return info


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON (atomically: temp file then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def rss_bytes() -> int:
    """Resident set size of this process (0 if psutil is missing)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return 0
    return int(psutil.Process().memory_info().rss)
