"""The stored references of Spark's handles (``reference/<minor>/<module>.json``) are those of
the pinned PySpark releases and of the scenarios as they are defined now, for every minor the
compatibility matrix runs, checked without running Spark; stored values round-trip; a missing or
stale reference fails a conformance test with a message naming ``make conformance-reference``.

Invariants: a pin changed in pyproject.toml or in ``devkit.compat_matrix.MATRIX``, a scenario
added, removed or changed, fails here until ``make conformance-reference`` has stored the
references again.
"""

from __future__ import annotations

import datetime
import json
import math
from decimal import Decimal
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import Row

from devkit.compat_matrix import DEFAULT, MATRIX, pinned_releases
from fsstate_spark.pyspark import PYSPARK_MINOR, ROW_TRANSFORM_WITH_STATE
from tests.fsstate_spark.conformance import reference as ref
from tests.fsstate_spark.conformance.harness import canonical

BASICS = ref.scenarios("test_basics")  # not imported by name: a module with SCENARIOS stores some
MINORS = sorted(tuple(map(int, m.split("."))) for m in pinned_releases())


def _minor(name: str) -> tuple[int, int]:
    major, minor = name.split(".")
    return int(major), int(minor)


def test_the_default_minor_has_one_pin() -> None:
    """``make test``'s PySpark (pyproject's ``dev`` extra) is the matrix's ``DEFAULT`` and the
    release its other Pythons run."""
    pins = pinned_releases()
    assert pins[DEFAULT.minor] == DEFAULT.pyspark
    assert {e.pyspark for e in MATRIX if e.minor == DEFAULT.minor} <= {DEFAULT.pyspark}
    assert sorted(pins) == sorted({e.minor for e in (DEFAULT, *MATRIX)})


@pytest.mark.parametrize("minor", MINORS, ids=ref.minor_name)
def test_every_minor_stores_the_references_of_its_pinned_release(minor: tuple[int, int]) -> None:
    """Each scenario module's file of the minor exists and came from the pinned release."""
    pin = pinned_releases()[ref.minor_name(minor)]
    for module in ref.module_names():
        data = ref.load(minor, module)
        where = f"reference/{ref.minor_name(minor)}/{module}.json"
        assert data is not None, f"{where} is missing: run `{ref.MAKE}`"
        assert data["pyspark"] == pin, (
            f"{where} came from PySpark {data['pyspark']}, the pin is {pin}: run `{ref.MAKE}`"
        )


@pytest.mark.parametrize("minor", MINORS, ids=ref.minor_name)
def test_every_stored_reference_is_of_a_scenario_as_it_is_defined(minor: tuple[int, int]) -> None:
    """The stored entries are exactly the referenced scenarios in the minor's flavours, each
    with the fingerprint of the scenario's present definition."""
    for module in ref.module_names():
        data = ref.load(minor, module)
        assert data is not None, f"no {ref.path(minor, module)}: run `{ref.MAKE}`"
        want = {
            (s.name, f): ref.fingerprint(s)
            for s in ref.scenarios(module)
            if ref.referenced(s)
            for f in ref.flavours_of(s, minor)
        }
        have = {
            (n, f): e["fingerprint"] for n, es in data["scenarios"].items() for f, e in es.items()
        }
        stale = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        assert not stale, (
            f"{ref.minor_name(minor)}/{module}.json: missing, changed or removed scenarios "
            f"{stale}: run `{ref.MAKE}`"
        )


def test_the_row_flavour_starts_where_compat_says() -> None:
    assert (PYSPARK_MINOR >= ref.ROW_FLAVOUR_FROM) == ROW_TRANSFORM_WITH_STATE


def test_stored_values_round_trip_type_for_type() -> None:
    """What is decoded is what was collected: the same canonical form (the comparison's) and
    the same types, through JSON."""
    nested = Row("a", "b")(1, [Row("c")(Decimal("1.50"))])
    values = [
        None,
        True,
        3,
        -0.5,
        math.inf,
        "x" * (ref.LONG + 1),
        "short",
        nested,
        {"k": nested, "m": {"x": [1, 2]}},
        [1, None],
        Decimal("12345.00"),
        datetime.datetime(2026, 1, 2, 3, 4, 5, 678901),
        datetime.date(2026, 1, 2),
        b"\x00\xff",
    ]
    back = [ref.decode(json.loads(json.dumps(ref.encode(v)))) for v in values]
    assert [canonical(v) for v in back] == [canonical(v) for v in values]
    assert [type(v) for v in back] == [type(v) for v in values]
    assert back[7].__fields__ == ["a", "b"]
    nan = ref.decode(json.loads(json.dumps(ref.encode(math.nan))))
    assert math.isnan(nan)


def _stored(tmp_path: Path, release: str, fingerprint: str) -> None:
    scenario = BASICS[0]
    for module in ref.module_names():
        entries = {}
        if module == "test_basics":
            entries = {scenario.name: {"pandas": {"fingerprint": fingerprint, "skip": None}}}
        data = {"pyspark": release, "module": module, "scenarios": entries}
        file = tmp_path / ref.minor_name(PYSPARK_MINOR) / f"{module}.json"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(data))


@pytest.mark.parametrize("case", ["missing", "release", "changed", "scenario"])
def test_a_missing_or_stale_reference_fails_naming_the_make_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """No file for the installed minor, a file of another release, a scenario whose definition
    changed or that has no entry: the test fails (never compares with stale rows)."""
    monkeypatch.setattr(ref, "DIR", tmp_path)
    scenario, flavour = BASICS[0], "pandas"
    if case != "missing":
        release = "0.0.1" if case == "release" else pyspark.__version__
        good = ref.fingerprint(scenario)
        _stored(tmp_path, release, "0" * 20 if case == "changed" else good)
        monkeypatch.setattr(ref, "pinned_release", lambda minor: pyspark.__version__)
    if case == "scenario":
        scenario = BASICS[1]
    with pytest.raises(pytest.fail.Exception, match="make conformance-reference"):
        ref.StoredReferences().outcome(scenario, flavour)
