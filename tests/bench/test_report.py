"""The benchmarks page names, per suite, the commit, start and duration its JSON records.

Invariants checked: a suite file written by :func:`bench.harness.report.write_suite_json`
carries its commit, dirtiness, start and duration, and its section of the page says them; a file
written before those fields existed says "commit not recorded" (its ``machine.git_commit`` is
not read); the page states no commit and no run time of its own; ``python -m bench.report``
rebuilds the page from the JSON files alone, and docs/benchmarks.md as committed is that page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench.harness.common import Result, write_json
from bench.harness.report import load_suite_files, main, run_line, write_docs, write_suite_json

MACHINE: dict[str, Any] = {
    "timestamp": "2026-11-25T03:18:44+00:00",
    "cpu_count": 2,
    "cpu_model": "Test CPU",
    "platform": "Linux",
    "python": "3.11.7",
    "pyarrow": "26.0.1",
    "numpy": "2.4.6",
    "fsstate": "0.1.0",
    "loadavg_1m_at_start": 0.5,
}


def _result(suite: str) -> Result:
    return Result(suite=suite, name="a row", value=1.5, unit="x", samples=[1.4, 1.5, 1.6])


def _write(results_dir: Path, suite: str, *, commit: str | None, dirty: bool) -> Path:
    return write_suite_json(
        results_dir,
        suite,
        [_result(suite)],
        MACHINE,
        "full",
        123.4,
        commit=commit,
        dirty=dirty,
        started_at="2026-11-25T04:00:00+00:00",
    )


def test_suite_json_records_commit_start_and_duration(tmp_path: Path) -> None:
    sha = "51f5869e2917b3373330d99e2c80bc515b19fa09"
    doc = json.loads(_write(tmp_path, "one", commit=sha, dirty=True).read_text("utf-8"))
    assert (doc["commit"], doc["dirty"], doc["started_at"], doc["duration_s"]) == (
        sha,
        True,
        "2026-11-25T04:00:00+00:00",
        123.4,
    )
    line = run_line(load_suite_files(tmp_path)[0])
    assert line.startswith("`full` run at commit `51f5869` with uncommitted changes, ")
    assert "started 2026-11-25 04:00 UTC, took 123 s" in line


def test_page_names_each_suites_commit_and_no_commit_of_its_own(tmp_path: Path) -> None:
    _write(tmp_path, "alpha", commit="a" * 40, dirty=False)
    _write(tmp_path, "beta", commit="b" * 40, dirty=False)
    legacy = {
        "suite": "gamma",
        "mode": "quick",
        "duration_s": 5.0,
        "machine": {**MACHINE, "git_commit": "ccccccc"},
        "results": [_result("gamma").to_json()],
    }
    write_json(tmp_path / "gamma.json", legacy)
    page = write_docs(tmp_path, tmp_path / "benchmarks.md").read_text("utf-8")
    sections = page.split("## Suite ")[1:]
    assert [s.splitlines()[2] for s in sections] == [
        "`full` run at commit `aaaaaaa`, started 2026-11-25 04:00 UTC, took 123 s; load average "
        "(1 min) 0.5 when the run started; raw figures in `bench/results/alpha.json`.",
        "`full` run at commit `bbbbbbb`, started 2026-11-25 04:00 UTC, took 123 s; load average "
        "(1 min) 0.5 when the run started; raw figures in `bench/results/beta.json`.",
        "`quick` run, commit not recorded; the run started 2026-11-25 03:18 UTC, this suite took "
        "5 s; load average (1 min) 0.5 when the run started; raw figures in "
        "`bench/results/gamma.json`.",
    ]
    head = page.split("## Suite ")[0]
    assert "commit `" not in head and "ccccccc" not in page
    assert "half an hour" not in page and "a few minutes" not in page


def test_report_main_rebuilds_the_page_from_json_alone(tmp_path: Path) -> None:
    _write(tmp_path, "alpha", commit=None, dirty=False)
    out = tmp_path / "page.md"
    assert main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    assert "`full` run, commit not recorded, started 2026-11-25 04:00 UTC" in out.read_text("utf-8")
    assert main(["--results-dir", str(tmp_path / "none"), "--out", str(out)]) == 1


def test_published_page_is_what_the_json_gives(tmp_path: Path) -> None:
    """docs/benchmarks.md is the page ``python -m bench.report`` builds from bench/results."""
    from bench.harness.common import RESULTS_DIR
    from bench.harness.report import DOCS_PATH

    rebuilt = write_docs(RESULTS_DIR, tmp_path / "docs" / "benchmarks.md").read_text("utf-8")
    # chart links are relative to where the page is written
    rebuilt = re.sub(r"\]\([^)]*bench/results/", "](../bench/results/", rebuilt)
    assert rebuilt == DOCS_PATH.read_text("utf-8"), "run python -m bench.report"


def test_matrix_rows_are_drawn_as_a_grid(tmp_path: Path) -> None:
    """Rows named ``<group>, <N> partitions, <R> rows/key: <what>`` form a matrix (one grid per
    group below the usual panels); other rows are not part of it."""
    from bench.harness.chart import matrix_cells, write_chart

    rows = [
        Result("m", f"{g}, {n} partitions, {r} rows/key: {w}", v, "x", goal=goal, samples=[v])
        for g in ("windowed count", "running aggregate")
        for n in (4, 200)
        for r in (2, 20)
        for w, goal, v in (("fsstate vs builtin", 1.5, 1.2 + n / 100), ("fsync off", None, 2.0))
    ]
    rows.append(Result("m", "20k value_count per batch, 200 partitions, s3/local", 1.0, "x"))
    cells = matrix_cells(rows)
    assert sorted(cells) == ["running aggregate", "windowed count"]
    assert sorted(cells["windowed count"]) == [
        (4, 2, "2 rows/key"),
        (4, 20, "20 rows/key"),
        (200, 2, "2 rows/key"),
        (200, 20, "20 rows/key"),
    ]
    cell = cells["windowed count"][(200, 20, "20 rows/key")]
    assert sorted(cell) == ["fsstate vs builtin", "fsync off"]
    assert cell["fsstate vs builtin"].passed is True
    assert cells["running aggregate"][(4, 2, "2 rows/key")]["fsstate vs builtin"].passed is False
    path = write_chart(tmp_path / "m.png", "m", rows, "test")
    assert path is not None and path.stat().st_size > 0


def test_rows_per_batch_cells_and_skipped_rows(tmp_path: Path) -> None:
    """``<group>, <N> partitions, <R>k rows/batch: <what>`` rows form a matrix too, its columns
    ordered by rows; a skipped row (not measured) has no value, status ``skipped``, no pass or
    miss, and stays out of the chart, while the page lists it with its reason."""
    from bench.harness.chart import matrix_cells, write_chart
    from bench.harness.common import skipped_result

    rows = [
        Result("j", f"Row, {n} partitions, {r}k rows/batch: fast / Java", 0.8, "x", 1.0, "<=",
               samples=[0.7, 0.8, 0.9])
        for n in (4, 200)
        for r in (500, 50)
    ]  # fmt: skip
    skipped = skipped_result("j", "Row, 4 partitions, 50k rows/batch: handles / Java", "x",
                             "dropped for time", 1.0, "<=")  # fmt: skip
    rows.append(skipped)
    assert (skipped.status, skipped.passed, skipped.goal_factor) == ("skipped", None, None)
    assert skipped.to_json()["status"] == "skipped"
    cells = matrix_cells(rows)
    assert sorted(cells["Row"]) == [
        (4, 50_000, "50k rows/batch"),
        (4, 500_000, "500k rows/batch"),
        (200, 50_000, "50k rows/batch"),
        (200, 500_000, "500k rows/batch"),
    ]
    assert sorted(cells["Row"][(4, 50_000, "50k rows/batch")]) == ["fast / Java"]
    assert write_chart(tmp_path / "j.png", "j", rows, "test") is not None
    write_suite_json(tmp_path, "j", rows, MACHINE, "quick", 1.0, commit=None, dirty=False,
                     started_at="2026-11-25T04:00:00+00:00")  # fmt: skip
    page = write_docs(tmp_path, tmp_path / "benchmarks.md").read_text("utf-8")
    assert "| Row, 4 partitions, 50k rows/batch: handles / Java | — | ≤ 1.00 x | skipped |" in page
    assert "4 of 4 goals met (1 more not measured in this run: skipped rows)." in page
