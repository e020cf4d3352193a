"""The goals of ``spark_jvm``'s rows per cell (issue 46), from known batch times (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.common import Result
from bench.harness.processor_queries import ChecksumSink
from bench.suites.spark_jvm_cells import SIDES, Cell, Job, cell_results

DROP = (("pandas", "handles"), ("pandas", "stock"), ("row", "handles"))


def _jobs(cell: Cell) -> list[Job]:
    """Every query of the cell but the dropped ones; Java 1000 / 1200 ms, each other side a
    multiple of it (fast 1.1x, driver 0.9x, stock 5x, handles 10x)."""
    factor = {"fast": 1.1, "driver": 0.9, "stock": 5.0, "handles": 10.0}
    jobs = [Job("java", "java", Path("/nonexistent"), "java", ChecksumSink(set()))]
    jobs[0].wall_ms = {0: 1.0, 1: 1000.0, 2: 1200.0}
    for flavour in ("pandas", "row"):
        for side in SIDES:
            if (flavour, side) in cell.drop:
                continue
            job = Job(flavour, side, Path("/nonexistent"), f"{flavour}_{side}", ChecksumSink(set()))
            job.wall_ms = {b: ms * factor[side] for b, ms in jobs[0].wall_ms.items()}
            jobs.append(job)
    return jobs


def _rows(cell: Cell) -> dict[str, Result]:
    return {r.name: r for r in cell_results(cell, _jobs(cell), None)}


def test_row_tiered_has_its_java_goal_at_four_partitions_only() -> None:
    four = _rows(Cell(500_000, 4, 2, DROP))
    fast = four["Row, 4 partitions, 500k rows/batch: tiered() fast loop / Java"]
    assert fast.value == pytest.approx(1.1)
    assert (fast.goal, fast.status) == (1.2, "pass")
    many = _rows(Cell(500_000, 200, 2, DROP))
    fast = many["Row, 200 partitions, 500k rows/batch: tiered() fast loop / Java"]
    assert (fast.goal, fast.status) == (None, "info")
    driver = many["Row, 200 partitions, 500k rows/batch: flow driver / Java"]
    assert (driver.goal, driver.status) == (1.0, "pass")
    pandas = many["pandas, 200 partitions, 500k rows/batch: tiered() fast loop / Java"]
    assert (pandas.goal, pandas.status) == (2.0, "pass")


def test_rows_dropped_for_time_carry_no_goal() -> None:
    rows = _rows(Cell(500_000, 4, 2, DROP))
    speedup = rows["pandas, 4 partitions, 500k rows/batch: stock loop / fast loop"]
    assert (speedup.status, speedup.goal) == ("skipped", None)
    measured = rows["Row, 4 partitions, 500k rows/batch: stock loop / fast loop"]
    assert measured.value == pytest.approx(5.0 / 1.1)
    assert (measured.goal, measured.status) == (4.0, "pass")
    decided = [r for r in rows.values() if r.goal is not None]
    assert decided and all(r.samples for r in decided)
