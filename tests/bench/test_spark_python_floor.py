"""The rows of ``spark_python_floor`` from known per-batch figures (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.suites.spark_python_floor import SIDES, FloorCell, FloorJob, cell_results


def _jobs(java: bool) -> dict[str, FloorJob]:
    out = {}
    for i, side in enumerate(SIDES):
        if side == "java" and not java:
            continue
        job = FloorJob(side, Path("/nonexistent") / side)
        # batch 0 warms up and must not count
        job.batch_ms = {0: 99_999.0, 1: 1000.0 * (i + 1), 2: 1200.0 * (i + 1)}
        job.commit_ms = {0: 9.0, 1: 10.0 + i, 2: 12.0 + i}
        job.updates_ms = {0: 9.0, 1: 1.0 + i, 2: 3.0 + i}
        out[side] = job
    return out


def test_rows_pair_batches_and_count_per_task() -> None:
    cell = FloorCell(50_000, 200, 2)
    rows = {r.name: r for r in cell_results(cell, _jobs(True), None)}
    prefix = "200 partitions, 50k rows/batch"
    # idle is the second side: twice the Java batch in both steady batches
    assert rows[f"{prefix}: idle Python processor / Java"].value == pytest.approx(2.0)
    assert rows[f"{prefix}: tiered() running aggregate / Java"].value == pytest.approx(4.0)
    # (2000 - 1000) * 2 cores / 200 tasks = 10 ms; (2400 - 1200) * 2 / 200 = 12 ms
    extra = rows[f"{prefix}: idle Python processor over Java per task"]
    assert extra.samples == pytest.approx([10.0, 12.0])
    assert extra.value == pytest.approx(11.0)
    assert rows[f"{prefix}: Java batch time"].samples == [1000.0, 1200.0]
    assert rows[f"{prefix}: tiered() idle Spark's store commit per task"].value == pytest.approx(
        13.0
    )
    # the floor's goal applies at 200 partitions: 4000 / 3000 and 4800 / 3600
    floor = rows[f"{prefix}: tiered() running aggregate / tiered() idle"]
    assert floor.value == pytest.approx(4 / 3)
    assert (floor.goal, floor.status) == (1.1, "miss")
    share = rows[f"{prefix}: fsstate's share (running aggregate - dict state) / Java"]
    assert share.goal is None  # the share's goal is at 500k rows and 4 partitions only
    assert all(r.status == "info" for r in rows.values() if r is not floor)


def test_fsstate_share_is_the_running_aggregate_over_dict_state_against_java() -> None:
    jobs = _jobs(True)
    jobs["tiered"].batch_ms = {0: 1.0, 1: 1300.0, 2: 1500.0}
    jobs["tiered_dict"].batch_ms = {0: 1.0, 1: 1100.0, 2: 1200.0}
    rows = {r.name: r for r in cell_results(FloorCell(500_000, 4, 2), jobs, None)}
    prefix = "4 partitions, 500k rows/batch"
    share = rows[f"{prefix}: fsstate's share (running aggregate - dict state) / Java"]
    # (1300 - 1100) / 1000 and (1500 - 1200) / 1200
    assert share.samples == pytest.approx([0.2, 0.25])
    assert (share.goal, share.status) == (0.25, "pass")
    assert rows[f"{prefix}: tiered() running aggregate / tiered() idle"].goal is None


def test_without_java_the_ratio_rows_are_published_as_skipped() -> None:
    cell = FloorCell(5_000, 4, 2)
    rows = cell_results(cell, _jobs(False), "no javac")
    skipped = [r for r in rows if r.status == "skipped"]
    # a ratio and a per-task row for each of the four Python sides, and fsstate's share
    assert len(skipped) == 9
    assert all("no javac" in r.notes for r in skipped)
    assert not any(r.name.startswith("4 partitions, 5k rows/batch: Java ") for r in rows)
