"""What ``spark_scale`` runs: its sides, its cells and the origins they restart from (part of the
``spark_scale`` suite; :mod:`bench.suites.spark_scale` describes the figures).

A *side* is one query of a cell (:data:`SIDES`): the running aggregate in a flavour on a way of
running it (:mod:`bench.harness.processor_sides`), restarted from a loaded *origin*
(:data:`ORIGINS`) or, for the dict-state reference, started fresh. A *cell* is a state size
(keys loaded), a memory budget, a key distribution of its steady batches and a partition count,
with the sides it runs and its batches: the restart batch (index 0), the steady batches (1 to
``steady``; the pandas sides only 1 to ``pandas_steady``) and a small checked batch after them.

Invariants: everything here is a pure function of the mode; every side of a cell but the
reference restarts from an origin loaded to the cell's keys at the cell's partitions
(:meth:`Plan.bases`); a cell's batch ``i`` is drawn with the same seed in every cell of its
distribution, so the ``i``-th steady batches of two cells pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SUITE = "spark_scale"
MIB = 1 << 20
RSS_SLACK_MIB = 200  # peak worker RSS <= budget + this
CHECK_ROWS = 2_000  # rows of the checked batch after the steady ones
DISTRIBUTIONS = {"uniform": "uniform", "zipf": "Zipf 1.1"}
ZIPF_S = 1.1


@dataclass(frozen=True)
class Side:
    """One query of a cell.

    Attributes:
        key: the side's name in records and directories.
        flavour: ``row``, ``pandas`` or ``java``.
        how: the :mod:`bench.harness.processor_sides` side (``fast``, ``driver``, ``java``).
        origin: the loaded origin it restarts from (None: a fresh query).
        label: its name in the rows.
        changelog: the Java query with RocksDB's changelog checkpointing on.
        s3: ``tiered()``'s state on the S3 server (a copy of the origin's uploaded there).
        reference: the dict-state reference (:class:`~bench.harness.operator_queries.TaskDictAgg`
            under ``tiered()``: no load, outputs not checked).
        own_id: its copy of the origin gets a query id of its own (Spark runs one run of a
            query id at a time, and the sides of a cell run side by side:
            :func:`~bench.suites.spark_scale_state.new_query_id`).
    """

    key: str
    flavour: str
    how: str
    origin: str | None
    label: str
    changelog: bool = False
    s3: bool = False
    reference: bool = False
    own_id: bool = False

    @property
    def pandas(self) -> bool:
        """Whether it takes the pandas sides' batches (``Cell.pandas_steady``)."""
        return self.flavour == "pandas"


SIDES = {
    s.key: s
    for s in (
        Side("row_tiered", "row", "fast", "tiered_row", "Row tiered()"),
        Side("row_driver", "row", "driver", "driver", "Row flow driver"),
        Side("java", "java", "java", "java", "Java"),
        Side("java_changelog", "java", "java", "java", "Java changelog", True, own_id=True),
        Side("pandas_tiered", "pandas", "fast", "tiered_pandas", "pandas tiered()"),
        Side("pandas_driver", "pandas", "driver", "driver", "pandas flow driver", own_id=True),
        Side("pandas_dict", "pandas", "fast", None, "pandas dict state", reference=True),
        Side("row_tiered_s3", "row", "fast", "tiered_row", "Row tiered() on S3", s3=True,
             own_id=True),
    )
}  # fmt: skip
# origin -> (flavour, how) of its loader (LoadAgg, or the Java processor itself). pandas
# tiered() has an origin of its own: Spark refuses a Row operator's checkpoint to a pandas one
# (transformWithStateInPySparkExec against transformWithStateInPandasExec); the flow driver's
# checkpoint holds no Spark operator, so both flavours restart from one.
ORIGINS = {
    "tiered_row": ("row", "fast"),
    "tiered_pandas": ("pandas", "fast"),
    "driver": ("row", "driver"),
    "java": ("java", "java"),
}
CORE = ("row_tiered", "row_driver", "java", "java_changelog")
PANDAS = ("pandas_tiered", "pandas_driver", "pandas_dict")
PANDAS_BUDGET_MIB = 64  # the full run's pandas sides run in the cells of this budget only
S3_KEYS = 10_000_000  # the S3 side's cells, and the 200-partition cell's keys


@dataclass(frozen=True)
class Cell:
    """One cell (module docstring)."""

    keys: int
    budget_mib: int
    dist: str
    partitions: int
    rows: int
    steady: int
    pandas_steady: int
    sides: tuple[str, ...]

    @property
    def label(self) -> str:
        """``30M keys, 64 MiB, Zipf 1.1, 4 partitions`` (row names, logs, ``--only``)."""
        return (
            f"{keys_label(self.keys)} keys, {budget_label(self.budget_mib)}, "
            f"{DISTRIBUTIONS[self.dist]}, {self.partitions} partitions"
        )

    @property
    def tag(self) -> str:
        """``k30M_b64_zipf_p4`` (directories, query names)."""
        return f"k{keys_label(self.keys)}_b{self.budget_mib}_{self.dist}_p{self.partitions}"

    @property
    def base(self) -> tuple[int, int]:
        """The loaded state it restarts from: (partitions, keys)."""
        return self.partitions, self.keys

    def batches(self, side: str) -> list[int]:
        """The steady batch indices ``side`` takes (the restart batch is 0)."""
        last = self.pandas_steady if SIDES[side].pandas else self.steady
        return list(range(1, last + 1))

    @property
    def check_index(self) -> int:
        """The checked batch's index (after every steady one)."""
        return self.steady + 1


def dropped_reason(cell: Cell, side: str) -> str:
    """Why the full run leaves ``side`` out of ``cell`` (it runs elsewhere)."""
    if SIDES[side].pandas and cell.partitions != 4:
        return (
            f"left out at {cell.partitions} partitions for time (every Python query pays "
            "Spark's per-task costs there, and a pandas batch of 100,000 rows costs ~15 s a "
            "side on 2 cores besides, ~20 s); spark_jvm measures pandas at 200 partitions"
        )
    if side == "pandas_driver" and cell.budget_mib == PANDAS_BUDGET_MIB:
        return (
            "left out of the cell for time (~20 s a batch of 100,000 rows on 2 cores, the "
            "processor's own pandas work); the 30 M-key 64 MiB cells measure it, and spark_jvm "
            "against Java"
        )
    if SIDES[side].pandas:
        return (
            f"left out of the {budget_label(cell.budget_mib)} cells for time: a pandas batch "
            "of 100,000 rows costs ~20 s a side on 2 cores (the processor's own pandas work), "
            f"more than the cell's other sides together; the {budget_label(PANDAS_BUDGET_MIB)} "
            "cells measure it"
        )
    return "not run in this cell"


def keys_label(keys: int) -> str:
    """``30M`` / ``200k``."""
    return f"{keys / 1e6:g}M" if keys >= 1_000_000 else f"{keys // 1000}k"


def budget_label(mib: int) -> str:
    """``64 MiB`` / ``1 GiB``."""
    return f"{mib // 1024} GiB" if mib >= 1024 and mib % 1024 == 0 else f"{mib} MiB"


@dataclass(frozen=True)
class Plan:
    """A mode's cells, load batch sizes and the profiled run.

    Attributes:
        cells: the cells, in the order they run.
        load_rows: rows per load batch, per partition count.
        breakdown: the cell whose Row ``tiered()`` query runs profiled beside the dict-state
            reference (its keys, budget, distribution, partitions, rows and steady batches;
            its sides unused), or None.
    """

    cells: tuple[Cell, ...]
    load_rows: dict[int, int] = field(default_factory=dict)
    breakdown: Cell | None = None

    def bases(self, cells: list[Cell], breakdown: bool) -> dict[int, dict[int, set[str]]]:
        """partitions -> keys -> the origins to load to that many keys, for ``cells`` (and the
        profiled run when ``breakdown``)."""
        out: dict[int, dict[int, set[str]]] = {}
        for cell in cells:
            origins = {SIDES[s].origin for s in cell.sides} - {None}
            out.setdefault(cell.partitions, {}).setdefault(cell.keys, set()).update(
                o for o in origins if o is not None
            )
        if breakdown and self.breakdown is not None:
            b = self.breakdown  # a copy of the Row tiered() base, run alone
            out.setdefault(b.partitions, {}).setdefault(b.keys, set()).add("tiered_row")
        return out


def plan(mode: str) -> Plan:
    """The cells of ``mode`` (the module docstring of :mod:`bench.suites.spark_scale` says
    why these and how long they take)."""
    if mode != "full":
        quick = Cell(200_000, 64, "uniform", 4, 20_000, 2, 2, (*CORE, *PANDAS, "row_tiered_s3"))
        return Plan((quick,), {4: 100_000}, Cell(200_000, 64, "uniform", 4, 20_000, 2, 2, ()))
    cells = []
    for keys in (1_000_000, 10_000_000, 30_000_000):
        for budget in (64, 1024):
            for dist in DISTRIBUTIONS:
                pandas: tuple[str, ...] = ()
                if budget == PANDAS_BUDGET_MIB:  # the flow driver's at the largest state only
                    pandas = PANDAS if keys == 30_000_000 else ("pandas_tiered", "pandas_dict")
                s3 = ("row_tiered_s3",) if keys == S3_KEYS else ()
                cells.append(Cell(keys, budget, dist, 4, 100_000, 4, 2, (*CORE, *pandas, *s3)))
    cells.append(Cell(S3_KEYS, 64, "uniform", 200, 100_000, 2, 0, CORE))
    profiled = Cell(30_000_000, 64, "uniform", 4, 100_000, 2, 0, ())
    return Plan(tuple(cells), {4: 1_000_000, 200: 5_000_000}, profiled)
