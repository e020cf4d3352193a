"""A windowed aggregation whose live state is 10x the memory budget (subprocess job
:mod:`tests.fsstate.operators.window_memory_job`): every window's result is exact and the
engine holds no more than its budget between epochs.

The process's peak RSS is printed, not asserted against the issue's goal (budget + 200 MiB):
it is dominated by per-epoch working memory (the input batch's copies while it is split,
sorted and pre-aggregated, and the emitted window), not by state, and it misses that goal
today (see the issue note and docs/benchmarks.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fsstate.common import run_report_job


@pytest.mark.slow
def test_windowed_state_ten_times_the_budget(tmp_path: Path) -> None:
    state_mib, budget_mib = 160, 16
    report = run_report_job(
        "tests.fsstate.operators.window_memory_job", tmp_path, state_mib, budget_mib
    )
    assert report["exact"] and report["windows_out"] == report["windows"] == 14, report
    assert report["live_state_mib"] >= 10 * budget_mib, report
    assert report["peak_engine_mib"] <= budget_mib, report
