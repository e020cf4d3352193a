"""A benchmark suite's chart: ``bench/results/<suite>.png`` (matplotlib, Agg backend).

Up to two panels side by side, each row's value relative to its goal (log scale, the CI of the
median as an error bar) and, for rows with a baseline, the engine relative to it; below them,
when the rows form a matrix of cells (``<group>, <N> partitions, <R> rows/key: <what>`` or
``<group>, <N> partitions, <R>k rows/batch: <what>``), a grid per group.

Invariants: a suite with no goal and no baseline gets no chart (:func:`write_chart` returns
None); a chart is a pure function of the rows, the suite name and the subtitle; rows whose
notes start with ``ERROR`` are left out of the grids, skipped rows (no value) out of every
panel.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bench.harness.common import Result
from bench.harness.report import BASELINE_LABELS, fmt_goal, fmt_value


def _factor(r: Result, x: float) -> float | None:
    """``x`` on the measured/goal scale of ``r`` (> 1 meets the goal)."""
    if r.goal is None or x <= 0 or r.goal <= 0:
        return None
    return x / r.goal if r.goal_op == ">=" else r.goal / x


MATRIX_ROW = re.compile(
    r"^(?P<group>[^:,]+), (?P<partitions>\d+) partitions, "
    r"(?P<column>(?P<count>\d+)(?P<k>k?) rows/(?:key|batch)): (?P<what>.+)$"
)

Cell = tuple[int, int, str]  # (partitions, column's rows, column label e.g. "20 rows/key")
Matrix = dict[str, dict[Cell, dict[str, Result]]]  # group -> cell -> what -> row


def matrix_cells(results: list[Result]) -> Matrix:
    """Rows named ``<group>, <N> partitions, <R> rows/key: <what>`` or ``<group>, <N>
    partitions, <R>k rows/batch: <what>`` (a matrix of cells, e.g.
    :mod:`bench.suites.spark_matrix`, :mod:`bench.suites.spark_jvm`), by group and cell; empty
    when there are none. Rows that failed or were skipped are left out."""
    out: Matrix = {}
    for r in results:
        m = MATRIX_ROW.match(r.name)
        if m is None or r.notes.startswith("ERROR") or r.skipped:
            continue
        rows = int(m["count"]) * (1000 if m["k"] else 1)
        cell = (int(m["partitions"]), rows, m["column"])
        out.setdefault(m["group"], {}).setdefault(cell, {})[m["what"]] = r
    return out


def _cell_color(rows: dict[str, Result]) -> str:
    """Green when every goal row of the cell passes, red when one misses, grey without goals."""
    goals = [r for r in rows.values() if r.goal is not None]
    if not goals:
        return "#eeeeee"
    return "#c8e6c9" if all(r.passed for r in goals) else "#ffcdd2"


def _draw_matrix(ax: Any, group: str, cells: dict[Cell, dict[str, Result]], ylabels: bool) -> None:
    """One group's cells as a grid: partitions down, the column (rows per key or per batch)
    across; each cell colored by its goal rows (:func:`_cell_color`) and listing its rows'
    values."""
    from matplotlib.patches import Rectangle

    parts = sorted({c[0] for c in cells})
    columns = sorted({(c[1], c[2]) for c in cells})
    ax.set_xlim(-0.5, len(columns) - 0.5)
    ax.set_ylim(len(parts) - 0.5, -0.5)
    for i, n in enumerate(parts):
        for j, (count, label) in enumerate(columns):
            rows = cells.get((n, count, label), {})
            color = _cell_color(rows)
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=color, edgecolor="white"))
            lines = []
            for what, r in sorted(rows.items(), key=lambda kv: kv[1].goal is None):
                ci = r.ci
                spread = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
                goal_txt = f" (goal {fmt_goal(r)})" if r.goal is not None else ""
                lines.append(f"{what}{goal_txt}:\n{fmt_value(r.value, r.unit)}{spread}")
            size = 8 if len(lines) <= 3 else 7  # many figures in a cell: smaller text
            ax.text(j, i, "\n".join(lines), ha="center", va="center", fontsize=size)
    ax.set_xticks(range(len(columns)), [label for _, label in columns])
    ax.set_yticks(range(len(parts)), [f"{n} partitions" for n in parts] if ylabels else [])
    ax.set_title(f"{group}: median per cell, [CI of the median]")


def write_chart(path: Path, suite: str, results: list[Result], subtitle: str) -> Path | None:
    """A PNG of up to two panels, value relative to goal and engine relative to the dict
    baseline, and, below them, a grid per group when the rows form a matrix
    (:func:`matrix_cells`).

    Returns:
        ``path``, or None when no row has a goal or a baseline (nothing written).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    goals = [r for r in results if r.goal_factor is not None]
    bases = [r for r in results if r.ratio is not None and r.ratio > 0]
    if not goals and not bases:
        return None
    panels = [p for p in (goals, bases) if p]
    fig, axes = _figure(plt, panels, matrix_cells(results))
    if goals:
        _draw_goals(axes[0], goals)
    if bases:
        _draw_baselines(axes[1 if goals else 0], bases, suite)
    fig.suptitle(f"fsstate {suite} benchmarks — {subtitle}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # long row names and titles stay whole
    plt.close(fig)
    return path


def _figure(plt: Any, panels: list[list[Result]], matrix: Matrix) -> tuple[Any, list[Any]]:
    """The figure: one axis per panel on top and, below, one grid per matrix group (drawn
    here); returns the figure and the panels' axes."""
    height = max(3.0, 0.42 * max(len(p) for p in panels) + 1.6)
    width = 7.0 * max(len(panels), len(matrix))
    lines = max((2 * len(r) for c in matrix.values() for r in c.values()), default=0)
    per_row = max(1.5, 0.17 * lines)  # inches per row of cells: two text lines per figure
    grid_height = 1.0 + per_row * max((len({k[0] for k in c}) for c in matrix.values()), default=0)
    fig = plt.figure(figsize=(width, height + grid_height))
    outer = fig.add_gridspec(
        2 if matrix else 1, 1, height_ratios=[height, grid_height] if matrix else None
    )
    top = outer[0].subgridspec(1, len(panels))
    axes = [fig.add_subplot(top[0, i]) for i in range(len(panels))]
    if matrix:
        bottom = outer[1].subgridspec(1, len(matrix))
        for i, (group, cells) in enumerate(matrix.items()):
            _draw_matrix(fig.add_subplot(bottom[0, i]), group, cells, ylabels=i == 0)
    return fig, axes


def _draw_goals(ax: Any, goals: list[Result]) -> None:
    """Each row's measured/goal factor (log scale; green: pass, red: miss), the CI of the
    median as an error bar on the same scale."""
    names = [r.name for r in goals][::-1]
    factors = [r.goal_factor or 0.0 for r in goals][::-1]
    colors = ["#2e7d32" if r.passed else "#c62828" for r in goals][::-1]
    lows: list[float] = []
    highs: list[float] = []
    for r, f in zip(goals[::-1], factors, strict=True):
        ci = r.ci
        ends = [e for x in (ci[:2] if ci else ()) if (e := _factor(r, x)) is not None]
        lows.append(max(0.0, f - min(ends)) if ends else 0.0)
        highs.append(max(0.0, max(ends) - f) if ends else 0.0)
    ax.barh(names, factors, color=colors, xerr=[lows, highs], ecolor="#555555", capsize=2)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("measured / goal (higher is better; > 1 meets the goal)")
    ax.set_title("Against the goals (green: pass, red: miss; bars: CI of the median)")
    for i, f in enumerate(factors):
        ax.text(f + highs[i], i, f" {f:.2g}", va="center", fontsize=8)


def _draw_baselines(ax: Any, bases: list[Result], suite: str) -> None:
    """Each row's ratio to its baseline, as "engine speed relative to the baseline" (higher is
    better; log scale)."""
    names = [r.name for r in bases][::-1]
    ratios = [r.ratio or 0.0 for r in bases][::-1]
    ax.barh(names, ratios, color="#1565c0")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    if suite in BASELINE_LABELS:
        ax.set_xlabel("variant / no-state throughput (1 = as fast as no state at all)")
        ax.set_title("Against the same query without state")
    else:
        ax.set_xlabel("engine / plain dict throughput (1 = as fast as a dict)")
        ax.set_title("Against a plain Python dict, same process")
    for i, f in enumerate(ratios):
        ax.text(f, i, f" {f:.2g}", va="center", fontsize=8)
