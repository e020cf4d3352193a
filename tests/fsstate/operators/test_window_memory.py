"""A windowed aggregation whose live state is 10x the memory budget (subprocess job
:mod:`tests.fsstate.operators.window_memory_job`): every window's result is exact and the
engine holds no more than its budget between epochs.

The process's peak RSS is printed, not asserted against the issue's goal (budget + 200 MiB):
it is dominated by per-epoch working memory (the input batch's copies while it is split,
sorted and pre-aggregated, and the emitted window), not by state, and it misses that goal
today (see the issue note and docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_windowed_state_ten_times_the_budget(tmp_path: Path) -> None:
    state_mib, budget_mib = 160, 16
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fsstate.operators.window_memory_job",
            str(tmp_path),
            str(state_mib),
            str(budget_mib),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(report)
    assert report["exact"] and report["windows_out"] == report["windows"] == 14, report
    assert report["live_state_mib"] >= 10 * budget_mib, report
    assert report["peak_engine_mib"] <= budget_mib, report
