"""``spark_scale``'s rows from what its cells recorded (part of the ``spark_scale`` suite;
:mod:`bench.suites.spark_scale` says what each row means).

Row names are ``<cell label>: <what>`` (``30M keys, 64 MiB, Zipf 1.1, 4 partitions: Row
tiered() / Java``). Ratios of batch times pair the two queries' times of the same steady batch
(:func:`bench.harness.common.ratio_result`); a row against the 1 M cell pairs a cell's ``i``-th
steady batch with the 1 M cell's ``i``-th (drawn with the same seed); bytes and restart rows
are figures of the cell's window (``derived``), peak RSS the largest worker's (``max``).

Invariants:

* Rows are a pure function of the records: nothing here runs Spark.
* A side the cell did not run (left out of the cell for time, or not runnable here: no JDK
  compiler, no S3 server) gives skipped rows with the reason and the goal the row would have
  had, never none; a side dropped for time carries no goal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.harness.common import Result, median, ratio_result, skipped_result, spread_text
from bench.suites.spark_scale_plan import (
    CORE,
    MIB,
    PANDAS,
    RSS_SLACK_MIB,
    SIDES,
    SUITE,
    Cell,
    budget_label,
    dropped_reason,
    keys_label,
)

GOAL_BUDGET_MIB = 64  # the batch-time goals against Java hold at this budget
GOAL_KEYS = 30_000_000  # the growth and restart goals hold at this state size
GOAL_VS_JAVA = {"row_tiered": 1.0, "row_driver": 0.8}  # batch time / Java's, at most
GOAL_GROWTH = 1.2  # Row tiered() batch time / the 1 M cell's, at most
GOAL_RESTART_VS_STEADY = 1.5  # Row tiered() first batch after a restart / its steady batch
GOAL_RESTART_VS_JAVA = 0.5  # Row tiered() first batch after a restart / Java's
GOAL_BYTES = 0.5  # Row tiered() bytes written per batch, bytes on disk / Java changelog's
GOAL_S3 = 1.3  # Row tiered() on S3 / on local disk, batch time
GOAL_PANDAS_SHARE = 0.25  # (pandas tiered() - dict state) / pandas tiered(), batch time
GROWTH_SIDES = ("row_tiered", "row_driver", "java", "java_changelog")


@dataclass
class CellRecord:
    """What one cell recorded.

    Attributes:
        cell: the cell.
        ms: side -> batch index -> Spark's ``triggerExecution`` (index 0: the restart batch).
        written: side -> batch index -> bytes the side's files grew by (local sides).
        on_disk: side -> bytes of its files after its last steady batch (local sides).
        peaks_mib: the peak RSS of each Python worker process of the cell's session.
        missing: side -> why it did not run (no JDK compiler, no S3 server).
        s3_mib: MiB of state uploaded for the S3 side.
    """

    cell: Cell
    ms: dict[str, dict[int, float]] = field(default_factory=dict)
    written: dict[str, dict[int, int]] = field(default_factory=dict)
    on_disk: dict[str, int] = field(default_factory=dict)
    peaks_mib: list[float] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    s3_mib: float = 0.0


def expected_sides(cell: Cell) -> tuple[str, ...]:
    """The sides whose rows a cell publishes: the core and pandas sides, and the S3 side where
    the cell runs it."""
    s3 = ("row_tiered_s3",) if "row_tiered_s3" in cell.sides else ()
    return (*CORE, *PANDAS, *s3)


def why_not(rec: CellRecord, side: str) -> str | None:
    """Why ``side`` has no figures in the cell (None: it ran)."""
    if side in rec.missing:
        return rec.missing[side]
    if side not in rec.cell.sides:
        return dropped_reason(rec.cell, side)
    return None


def _work(cell: Cell, side: str | None = None) -> str:
    batches = cell.batches(side) if side else cell.batches("row_tiered")
    last = f"steady batches 1-{batches[-1]}" if batches else "no steady batch"
    return (
        f"{cell.keys:,} keys loaded (not timed), {cell.rows:,} rows per batch drawn "
        f"{'uniformly' if cell.dist == 'uniform' else 'Zipf(1.1)'} over them, running count + "
        f"sum per key in a value state, one output row per key, {cell.partitions} shuffle "
        f"partitions, spark.fsstate.memoryLimit {budget_label(cell.budget_mib)} per worker, "
        f"local[2], a new SparkSession and new Python workers per cell, batch 0 the first "
        f"after the restart, {last}"
    )


def _pair(rec: CellRecord, a: str, b: str) -> list[float]:
    """``a``'s steady batch times over ``b``'s, batch by batch (the batches both took)."""
    common = [i for i in rec.cell.batches(a) if i in rec.cell.batches(b)]
    return [rec.ms[a][i] / rec.ms[b][i] for i in common]


def vs_java_rows(rec: CellRecord) -> list[Result]:
    """Every side's batch time over the Java query's (goals: :data:`GOAL_VS_JAVA` at
    :data:`GOAL_BUDGET_MIB`)."""
    cell, out = rec.cell, []
    for side in expected_sides(cell):
        if SIDES[side].flavour == "java" and side == "java":
            continue
        name = f"{cell.label}: {SIDES[side].label} / Java"
        goal = GOAL_VS_JAVA.get(side) if cell.budget_mib == GOAL_BUDGET_MIB else None
        gone = why_not(rec, side) or why_not(rec, "java")
        if gone is not None:
            dropped = side not in cell.sides
            out.append(skipped_result(SUITE, name, "x", gone, None if dropped else goal, "<="))
            continue
        what = (
            f"{SIDES[side].label} batch time / the Java processor's (transformWithState, "
            "RocksDB, Spark's default settings), same batch, paired"
        )
        ratios = _pair(rec, side, "java")
        out.append(ratio_result(SUITE, name, ratios, what, _work(cell, side), goal, "<="))
    return out


def batch_time_rows(rec: CellRecord) -> list[Result]:
    """Every side's steady batch time and its first batch after the restart (informative)."""
    cell, out = rec.cell, []
    for side in expected_sides(cell):
        label, gone = SIDES[side].label, why_not(rec, side)
        kinds = [("batch time", cell.batches(side))]
        if not SIDES[side].reference:  # the reference starts fresh: no restart
            kinds.append(("first batch after restart", [0]))
        for what, picked in kinds:
            name = f"{cell.label}: {label} {what}"
            if gone is not None:
                out.append(skipped_result(SUITE, name, "ms", gone))
                continue
            ms = [rec.ms[side][i] for i in picked]
            how = "steady batches" if picked != [0] else "the restart batch"
            out.append(
                Result(
                    SUITE,
                    name,
                    median(ms),
                    "ms",
                    notes=f"Spark's triggerExecution, {how} ({spread_text(ms)}); "
                    f"{_work(cell, side)}",
                    samples=ms,
                )
            )
    return out


def restart_rows(rec: CellRecord) -> list[Result]:
    """Row ``tiered()``'s first batch after the restart over its steady batches and over the
    Java query's first batch after its restart (goals at :data:`GOAL_KEYS`); the flow driver's
    over Java's (informative)."""
    cell, out = rec.cell, []
    at_goal = cell.keys == GOAL_KEYS
    work = _work(cell, "row_tiered")
    name = f"{cell.label}: Row tiered() first batch after restart / its steady batch"
    goal = GOAL_RESTART_VS_STEADY if at_goal else None
    gone = why_not(rec, "row_tiered")
    if gone is not None or not cell.batches("row_tiered"):
        out.append(skipped_result(SUITE, name, "x", gone or "no steady batch", goal, "<="))
    else:
        first = rec.ms["row_tiered"][0]
        ratios = [first / rec.ms["row_tiered"][i] for i in cell.batches("row_tiered")]
        what = (
            "the restart batch's time (a new SparkSession and new workers: fsstate opens its "
            "stores lazily) over each steady batch's of the same query"
        )
        out.append(ratio_result(SUITE, name, ratios, what, work, goal, "<="))
    for side, side_goal in (("row_tiered", GOAL_RESTART_VS_JAVA), ("row_driver", None)):
        name = f"{cell.label}: {SIDES[side].label} first batch after restart / Java's"
        goal = side_goal if at_goal else None
        gone = why_not(rec, side) or why_not(rec, "java")
        if gone is not None:
            out.append(skipped_result(SUITE, name, "x", gone, goal, "<="))
            continue
        what = (
            f"{SIDES[side].label}'s restart batch / the Java processor's (RocksDB loads its "
            "snapshot; the JVM itself stays up between cells, warm)"
        )
        ratio = [rec.ms[side][0] / rec.ms["java"][0]]
        out.append(ratio_result(SUITE, name, ratio, what, work, goal, "<="))
    return out


def s3_rows(rec: CellRecord) -> list[Result]:
    """Row ``tiered()`` with its state on the S3 server over the same on local disk: steady
    batches (goal :data:`GOAL_S3`) and the restart batch (informative)."""
    cell = rec.cell
    if "row_tiered_s3" not in cell.sides:
        return []
    out = []
    work = (
        f"{_work(cell, 'row_tiered')}; the S3 side restarts from a copy of the same loaded "
        f"state uploaded to SeaweedFS on loopback ({rec.s3_mib:,.0f} MiB)"
    )
    for what, goal in (("S3 / local disk", GOAL_S3), ("S3 / local disk, restart batch", None)):
        name = f"{cell.label}: Row tiered() {what}"
        gone = why_not(rec, "row_tiered_s3") or why_not(rec, "row_tiered")
        if gone is not None:
            out.append(skipped_result(SUITE, name, "x", gone, goal, "<="))
            continue
        if goal is None:
            ratios = [rec.ms["row_tiered_s3"][0] / rec.ms["row_tiered"][0]]
        else:
            ratios = _pair(rec, "row_tiered_s3", "row_tiered")
        how = "Row tiered() batch time with its state on the S3 server / on local disk, same batch"
        out.append(ratio_result(SUITE, name, ratios, how, work, goal, "<="))
    return out


def _bytes_figure(rec: CellRecord, side: str, kind: str) -> float:
    """MiB written per steady batch (the mean over the cell's window) or on disk."""
    if kind == "on disk":
        return rec.on_disk[side] / MIB
    steady = rec.cell.batches(side)
    return sum(rec.written[side][i] for i in steady) / len(steady) / MIB


BYTES_KINDS = {
    "written per batch": "bytes its files grew by per steady batch (new files whole, grown "
    "files' growth; background writes counted in the batch they land in), mean over the "
    "cell's steady batches",
    "on disk": "bytes of its files after its last steady batch (checkpoint and state, "
    "the copy of the loaded state included)",
}
BYTES_RATIOS = (
    ("row_tiered", "java_changelog", GOAL_BYTES),
    ("row_tiered", "java", None),
    ("row_driver", "java_changelog", None),
)


def bytes_rows(rec: CellRecord) -> list[Result]:
    """Each local side's bytes written per batch and on disk (MiB), and Row ``tiered()``'s over
    the Java queries' (goal :data:`GOAL_BYTES` against changelog checkpointing)."""
    cell, out = rec.cell, []
    local = [s for s in expected_sides(cell) if not SIDES[s].s3 and not SIDES[s].reference]
    for kind, how in BYTES_KINDS.items():
        for side in local:
            name = f"{cell.label}: {SIDES[side].label} MiB {kind}"
            gone = why_not(rec, side)
            if gone is not None:
                out.append(skipped_result(SUITE, name, "MiB", gone))
                continue
            samples = [rec.written[side][i] / MIB for i in cell.batches(side)]
            value = _bytes_figure(rec, side, kind)
            out.append(
                Result(SUITE, name, value, "MiB", notes=f"{how}; {_work(cell, side)}",
                       samples=samples if kind != "on disk" else [], stat="derived")
            )  # fmt: skip
        for side, java, goal in BYTES_RATIOS:
            name = f"{cell.label}: {SIDES[side].label} / {SIDES[java].label}, bytes {kind}"
            gone = why_not(rec, side) or why_not(rec, java)
            if gone is not None:
                out.append(skipped_result(SUITE, name, "x", gone, goal, "<="))
                continue
            a, b = _bytes_figure(rec, side, kind), _bytes_figure(rec, java, kind)
            out.append(
                Result(SUITE, name, a / b if b else float("inf"), "x", goal=goal, goal_op="<=",
                       notes=f"{a:,.1f} MiB / {b:,.1f} MiB: {how}, each query's own files; "
                       f"{_work(cell, side)}", stat="derived")
            )  # fmt: skip
    return out


def rss_row(rec: CellRecord) -> Result:
    """The largest peak RSS of the cell's Python workers (goal: budget + 200 MiB)."""
    cell = rec.cell
    name = f"{cell.label}: peak worker RSS"
    goal = float(cell.budget_mib + RSS_SLACK_MIB)
    if not rec.peaks_mib:
        return skipped_result(SUITE, name, "MiB", "no Python worker was sampled", goal, "<=")
    peaks = sorted(rec.peaks_mib, reverse=True)
    return Result(
        SUITE,
        name,
        peaks[0],
        "MiB",
        goal=goal,
        goal_op="<=",
        notes=f"the largest VmHWM (peak resident set) of the cell's Python worker processes, "
        f"which every Python side of the cell shares (fsstate's budget is per worker process); "
        f"per worker {', '.join(f'{p:,.0f}' for p in peaks)} MiB; goal: the budget "
        f"{budget_label(cell.budget_mib)} + {RSS_SLACK_MIB} MiB; {_work(cell)}",
        samples=peaks,
        stat="max",
    )


def pandas_share_row(rec: CellRecord) -> Result:
    """fsstate's share of a pandas ``tiered()`` batch: (``tiered()`` - the dict-state
    reference) / ``tiered()``, per paired batch (goal :data:`GOAL_PANDAS_SHARE`)."""
    cell = rec.cell
    name = f"{cell.label}: pandas tiered() fsstate's share of the batch"
    gone = why_not(rec, "pandas_tiered") or why_not(rec, "pandas_dict")
    if gone is not None:
        dropped = "pandas_tiered" not in cell.sides
        goal = None if dropped else GOAL_PANDAS_SHARE
        return skipped_result(SUITE, name, "x", gone, goal, "<=")
    t, d = rec.ms["pandas_tiered"], rec.ms["pandas_dict"]
    shares = [(t[i] - d[i]) / t[i] for i in cell.batches("pandas_tiered")]
    what = (
        "(pandas tiered() batch time - the same processor's with its state in a dict of the "
        "task, also under tiered(): the loop, conversions and an empty store's open and "
        "commit the same) / pandas tiered()'s, same batch"
    )
    return ratio_result(
        SUITE, name, shares, what, _work(cell, "pandas_tiered"), GOAL_PANDAS_SHARE, "<="
    )


def cell_rows(rec: CellRecord) -> list[Result]:
    """Every row of one cell."""
    return [
        *vs_java_rows(rec),
        *restart_rows(rec),
        *s3_rows(rec),
        *bytes_rows(rec),
        rss_row(rec),
        pandas_share_row(rec),
        *batch_time_rows(rec),
    ]


def growth_rows(records: list[CellRecord]) -> list[Result]:
    """Each cell's steady batch time over the smallest cell's of its budget, distribution and
    partitions, paired by batch index (goal :data:`GOAL_GROWTH` for Row ``tiered()`` at
    :data:`GOAL_KEYS`); none for the smallest cells themselves."""
    out: list[Result] = []
    for rec in records:
        cell = rec.cell
        peers = [r for r in records if (r.cell.budget_mib, r.cell.dist, r.cell.partitions)
                 == (cell.budget_mib, cell.dist, cell.partitions)]  # fmt: skip
        ref = min(peers, key=lambda r: r.cell.keys)
        if ref.cell.keys == cell.keys:
            continue
        for side in GROWTH_SIDES:
            ref_label = keys_label(ref.cell.keys)
            name = f"{cell.label}: {SIDES[side].label} batch time / the {ref_label} cell's"
            goal = GOAL_GROWTH if side == "row_tiered" and cell.keys == GOAL_KEYS else None
            gone = why_not(rec, side) or why_not(ref, side)
            if gone is not None:
                out.append(skipped_result(SUITE, name, "x", gone, goal, "<="))
                continue
            common = [i for i in cell.batches(side) if i in ref.cell.batches(side)]
            ratios = [rec.ms[side][i] / ref.ms[side][i] for i in common]
            what = (
                f"{SIDES[side].label} steady batch time at {keys_label(cell.keys)} keys / at "
                f"{keys_label(ref.cell.keys)} keys, the i-th steady batch of each (drawn with "
                "the same seed), the cells run one after the other"
            )
            out.append(ratio_result(SUITE, name, ratios, what, _work(cell, side), goal, "<="))
    return out
