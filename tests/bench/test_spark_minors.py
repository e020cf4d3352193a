"""The rows of ``spark_minors`` from known ``spark_jvm`` rows (no Spark, no subprocess)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from bench.suites.spark_minors import (
    SOURCE,
    SUITE,
    minors,
    republish,
    row_names,
    skipped_minor,
)
from devkit.compat_matrix import DEFAULT, MATRIX


def _row(name: str, unit: str, notes: str, samples: list[float]) -> dict[str, Any]:
    """One row of ``spark_jvm``'s JSON (its ratio rows carry goals: dropped here)."""
    value = statistics.median(samples) if samples else math.nan
    return {"suite": SOURCE, "name": name, "value": value, "unit": unit, "goal": 4.0,
            "goal_op": ">=", "notes": notes, "samples": samples, "stat": "median"}  # fmt: skip


def _doc(mode: str, skip_row_flavour: bool) -> dict[str, Any]:
    """The JSON of ``spark_jvm``'s run of the cell on a minor."""
    rows = [_row("loop cost", "µs", "not the cell's: ignored", [1.0])]
    for i, (_, source, unit) in enumerate(row_names("4.9", mode)):
        if skip_row_flavour and "Row" in source:
            rows.append(_row(source, unit, "SKIPPED: no Row here", []))
        elif unit == "x":
            rows.append(_row(source, unit, "r (n=2)", [i + 1.0, i + 2.0]))
        else:
            rows.append(_row(source, unit, "t", [10.0 * i]))
    return {"suite": SOURCE, "mode": mode, "results": rows}


def test_rows_are_spark_jvms_renamed_without_goals() -> None:
    versions = "PySpark 4.1.4, Python 3.11.7 (.venv-compat/pyspark4.1.4-py3.11/bin/python)"
    rows = republish("4.1", "full", versions, _doc("full", False))
    by = {r.name: r for r in rows}
    assert len(rows) == len(by) == 11  # 3 ratios x 2 flavours, 5 batch times
    gain = by["PySpark 4.1, Row, 50k rows/batch, 4 partitions: stock loop / fast loop"]
    assert gain.samples == [4.0, 5.0]
    assert gain.value == pytest.approx(4.5)
    assert gain.goal is None and gain.status == "info"
    assert gain.notes == f"{versions}: r (n=2)"
    java = by["PySpark 4.1, 50k rows/batch, 4 partitions: Java transformWithState batch time"]
    assert java.unit == "ms" and java.notes == f"{versions}: t"
    assert all(r.suite == SUITE and r.status == "info" for r in rows)


def test_what_a_minor_cannot_run_stays_skipped_with_the_reason() -> None:
    rows = republish("4.0", "quick", "PySpark 4.0.5", _doc("quick", True))
    skipped = [r for r in rows if r.status == "skipped"]
    assert len(skipped) == 5  # Row: 3 ratios, 2 batch times
    assert all(r.notes == "SKIPPED: no Row here (PySpark 4.0.5)" for r in skipped)
    assert all(r.goal is None for r in skipped)
    assert all(r.name.startswith("PySpark 4.0, ") and "5k rows/batch" in r.name for r in rows)


def test_a_missing_row_is_an_error_and_a_missing_minor_is_skipped() -> None:
    doc = _doc("full", False)
    doc["results"].pop()
    with pytest.raises(KeyError, match="Row tiered\\(\\) stock loop batch time"):
        republish("4.2", "full", "v", doc)
    gone = skipped_minor("4.2", "full", "no Python 3.11")
    assert [r.name for r in gone] == [n for n, _, _ in row_names("4.2", "full")]
    assert all(r.status == "skipped" and "no Python 3.11" in r.notes for r in gone)


def test_one_entry_per_minor_the_default_one_here() -> None:
    got = minors()
    assert [m.name for m in got] == sorted(
        {e.minor for e in (DEFAULT, *MATRIX)}, key=lambda m: tuple(map(int, m.split(".")))
    )
    assert [m.name for m in got if m.here] == [DEFAULT.minor]
    on_default = {e.minor for e in MATRIX if e.python == DEFAULT.python}
    assert all(m.entry.python == DEFAULT.python for m in got if m.name in on_default)
