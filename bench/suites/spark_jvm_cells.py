"""The cells of ``spark_jvm``, their queries' records and their result rows (part of the
``spark_jvm`` suite; :mod:`bench.suites.spark_jvm` runs the queries and describes the figures).

Rows per cell (``<flavour>, <N> partitions, <R>k rows/batch: <what>``, the matrix form
:mod:`bench.harness.chart` draws as a grid per flavour): each side's batch time over the Java
query's (``tiered() fast loop / Java`` and ``flow driver / Java`` with their goals,
:data:`GOAL_VS_JAVA`: Row ``tiered()`` at 200 partitions has its goal against the idle floor
in ``spark_python_floor`` instead; ``tiered() stock loop / Java`` and ``Spark's handles /
Java`` informative) and ``stock loop / fast loop`` (goal >= 4x); then every query's batch time
(``<R>k rows/batch, <N> partitions: <query> batch time``, informative). A side dropped from a
cell for time gives skipped rows without a goal (not measured there by design); a side
missing for any other reason keeps the goal its row would have had.

Invariants:

* Rows are a pure function of the queries' per-batch times: nothing here runs Spark.
* A ratio's samples pair the two queries' times of the same batch, steady batches only.
* A side left out of a cell (dropped for time, left out of the run: not on this PySpark or
  not asked for, or the Java side without a JDK compiler) gives skipped rows
  (:func:`bench.harness.common.skipped_result`) with the reason, never none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.common import Result, median, ratio_result, skipped_result, spread_text
from bench.harness.processor_queries import ChecksumSink, RowsCell

SUITE = "spark_jvm"
SIDES = ("fast", "stock", "handles", "driver")  # per flavour; the Java query is one per cell
SIDE_NAMES = {
    "fast": "tiered() fast loop",
    "stock": "tiered() stock loop",
    "handles": "Spark's handles",
    "driver": "flow driver",
}
FLAVOUR_NAMES = {"pandas": "pandas", "row": "Row"}

# Each worker's engine budget in this suite's session (``spark.fsstate.memoryLimit``): the
# engine's default (:data:`fsstate.config.DEFAULT_MEMORY_LIMIT`), not ``conf/``'s 256 MiB for
# small examples. A cell's fsstate sides (up to six queries) share each Python worker, so its
# budget holds all their stores at once: at 500k rows five sides of 250k keys, up to 1.25 M
# views per worker (~100 MiB per side as the engine estimates them), where 256 MiB reclaims
# above 192 MiB; a user's one query of the cell's shape holds a fifth of it. Under 256 MiB,
# reclaims evicted views in the middle of batches (dev runs, n=3: Row tiered() / Java at 500k
# rows and 4 partitions 1.38x, against 1.15x under 1 GiB).
MEMORY_LIMIT = "1GiB"

API = {"pandas": "transformWithStateInPandas", "row": "transformWithState"}
# batch time / the Java processor's, at most, per (flavour, side); issue 46: Row tiered() on
# fsstate's loop <= 1.2x at 4 partitions; at 200 partitions its goal is against the idle floor
# of the same run (spark_python_floor), every Python processor paying Spark's per-task costs
GOAL_VS_JAVA = {
    ("pandas", "fast"): 2.0,
    ("pandas", "driver"): 2.0,
    ("row", "fast"): 1.2,
    ("row", "driver"): 1.0,
}
FLOOR_PARTITIONS = 200  # Row tiered()'s goal is spark_python_floor's at this partition count
GOAL_FAST_VS_STOCK = 4.0  # tiered() on PySpark's loop / on fsstate's loop, at least
DROP_REASONS = {
    ("pandas", "handles"): "dropped for time: the pandas processor on Spark's handles costs "
    "~700 µs per key in Spark's Python machinery, ~3 minutes per batch of 500k rows on 2 cores; "
    "spark_driver measures it at 500k rows and 4 partitions",
    ("pandas", "stock"): "dropped for time: PySpark's own pandas loop costs ~1 ms per key "
    "(the loop cost rows), ~3 minutes per batch of 500k rows on 2 cores, as on Spark's "
    "handles; the 50k cells measure it",
    ("row", "handles"): "dropped for time (informative side, no goal): spark_driver measures "
    "the Row processor on Spark's handles at 500k rows and 4 partitions",
}


LeftOut = Mapping[tuple[str, str], str]  # (flavour, side) left out of the whole run -> why


@dataclass(frozen=True)
class Cell(RowsCell):
    """One cell: rows per batch (over ``rows // 2`` keys) at a partition count, its timed
    batches after the warm-up and the (flavour, side) queries left out of it
    (:data:`DROP_REASONS`)."""

    rows: int
    partitions: int
    steady: int
    drop: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """``50k rows/batch, 4 partitions`` (logs, ``--only``)."""
        return f"{self.column}, {self.partitions} partitions"

    @property
    def tag(self) -> str:
        """``p4_50k`` (directories, query names)."""
        return f"p{self.partitions}_{self.rows // 1000}k"


@dataclass
class Job:
    """One running query of a cell and its per-batch times."""

    flavour: str  # "pandas", "row", or "java"
    side: str  # one of SIDES, or "java"
    root: Path
    name: str
    sink: ChecksumSink
    query: Any = None
    wall_ms: dict[int, float] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        """``flavour/side`` (``java``)."""
        return "java" if self.side == "java" else f"{self.flavour}/{self.side}"

    @property
    def input_dir(self) -> Path:
        """Where the query's batch files are handed in."""
        return self.root / "input"


def _work(cell: Cell) -> str:
    return cell.work(
        f"{cell.partitions} shuffle partitions, fsstate's memoryLimit {MEMORY_LIMIT} per worker"
    )


def cell_results(
    cell: Cell, jobs: list[Job], java_skip: str | None, left_out: LeftOut | None = None
) -> list[Result]:
    """The cell's rows (module docstring); ``java_skip``: why there is no Java query,
    ``left_out``: the (flavour, side) queries left out of the whole run, and why."""
    by = {(j.flavour, j.side): j for j in jobs}
    why = {**DROP_REASONS, **(left_out or {})}
    out: list[Result] = []
    for flavour, fname in FLAVOUR_NAMES.items():
        prefix = f"{fname}, {cell.partitions} partitions, {cell.column}"
        for side in ("fast", "driver", "stock", "handles"):
            out.append(_vs_java(cell, flavour, side, prefix, by, java_skip, why))
        out.append(_fast_vs_stock(cell, flavour, prefix, by, why))
    out += _batch_times(cell, by, java_skip, why)
    return out


def _vs_java(
    cell: Cell,
    flavour: str,
    side: str,
    prefix: str,
    by: dict[tuple[str, str], Job],
    java_skip: str | None,
    why: LeftOut,
) -> Result:
    name = f"{prefix}: {SIDE_NAMES[side]} / Java"
    goal = GOAL_VS_JAVA.get((flavour, side))
    if (flavour, side) == ("row", "fast") and cell.partitions == FLOOR_PARTITIONS:
        goal = None
    job, java = by.get((flavour, side)), by.get(("java", "java"))
    if job is None:
        if (flavour, side) in cell.drop:  # for time: not measured here by design, no goal
            goal = None
        return skipped_result(SUITE, name, "x", why[(flavour, side)], goal, "<=")
    if java is None:
        return skipped_result(SUITE, name, "x", f"no Java query: {java_skip}", goal, "<=")
    ratios = [job.wall_ms[b] / java.wall_ms[b] for b in cell.batches]
    what = (
        f"{SIDE_NAMES[side]} ({API[flavour]}) batch time / the Java processor's "
        "(transformWithState, RocksDB), same batch, paired"
    )
    return ratio_result(SUITE, name, ratios, what, _work(cell), goal, "<=")


def _fast_vs_stock(
    cell: Cell, flavour: str, prefix: str, by: dict[tuple[str, str], Job], why: LeftOut
) -> Result:
    name = f"{prefix}: stock loop / fast loop"
    fast, stock = by.get((flavour, "fast")), by.get((flavour, "stock"))
    if fast is None or stock is None:
        missing = (flavour, "stock" if stock is None else "fast")
        goal = None if missing in cell.drop else GOAL_FAST_VS_STOCK  # dropped for time: no goal
        return skipped_result(SUITE, name, "x", why[missing], goal)
    ratios = [stock.wall_ms[b] / fast.wall_ms[b] for b in cell.batches]
    what = (
        "tiered() on PySpark's own per-key loop (fast_loop=False) / tiered() on "
        f"fsstate's keyed loop ({API[flavour]}), batch times, same batch, paired"
    )
    return ratio_result(SUITE, name, ratios, what, _work(cell), GOAL_FAST_VS_STOCK)


def _batch_times(
    cell: Cell, by: dict[tuple[str, str], Job], java_skip: str | None, why: LeftOut
) -> list[Result]:
    kinds = [(f, s) for f in FLAVOUR_NAMES for s in SIDES] + [("java", "java")]
    out = []
    for flavour, side in kinds:
        if side == "java":
            query = "Java transformWithState"
        else:
            query = f"{FLAVOUR_NAMES[flavour]} {SIDE_NAMES[side]}"
        name = f"{cell.column}, {cell.partitions} partitions: {query} batch time"
        job = by.get((flavour, side))
        if job is None:
            reason = why[(flavour, side)] if side != "java" else f"no Java query: {java_skip}"
            out.append(skipped_result(SUITE, name, "ms", reason))
            continue
        ms = [job.wall_ms[b] for b in cell.batches]
        out.append(
            Result(
                suite=SUITE,
                name=name,
                value=median(ms),
                unit="ms",
                notes=f"Spark's triggerExecution per batch ({spread_text(ms)}); {_work(cell)}",
                samples=ms,
            )
        )
    return out
