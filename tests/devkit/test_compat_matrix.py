"""The compatibility matrix selects by markers (:data:`devkit.compat_matrix.MARKERS`): each is
registered in pyproject.toml as the matrix describes it, every entry collects from the whole
``tests`` tree, the stored conformance references are made once per minor, and the matrix
tests exactly the supported minors."""

from __future__ import annotations

import tomllib

import pytest

from devkit.compat_matrix import (
    DEFAULT,
    MARKERS,
    MATRIX,
    TESTS,
    Entry,
    reference_entries,
    selection,
    untested_minors,
)
from devkit.repo import ROOT


def test_the_matrix_markers_are_registered_as_described() -> None:
    """pytest refuses an unknown marker (``--strict-markers``): a misspelt one fails the run
    instead of dropping its tests from the matrix."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["pytest"]
    registered = dict(m.split(": ", 1) for m in options["ini_options"]["markers"])
    assert {k: registered.get(k) for k in MARKERS} == MARKERS
    assert "--strict-markers" in options["ini_options"]["addopts"]


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("entry", [*MATRIX], ids=lambda e: e.name)
def test_every_entry_selects_by_markers_only(entry: Entry, full: bool) -> None:
    args, _ = selection(entry, full)
    assert args[0] == TESTS and args[1] == "-m" and len(args) == 3, args
    marks = args[2].replace("(", " ").replace(")", " ").split()
    assert set(marks) - {"and", "or", "not", "slow"} <= set(MARKERS), args


def test_the_other_pythons_and_the_other_minors_select_their_markers() -> None:
    for entry in MATRIX:
        args, extra = selection(entry, full=False)
        if entry.minor == DEFAULT.minor:
            assert args[2] == "compat_python" and not extra
        else:
            assert args[2] == "compat and not slow" and extra


def test_references_are_made_once_per_minor_by_that_minors_pyspark() -> None:
    entries = reference_entries()
    minors = [e.minor for e in entries]
    assert len(minors) == len(set(minors)) == len({e.minor for e in (DEFAULT, *MATRIX)})
    assert DEFAULT in entries and all(e in MATRIX for e in entries if e != DEFAULT)


def test_the_matrix_tests_exactly_the_supported_minors() -> None:
    """:data:`fsstate_spark.pyspark.SUPPORTED_MINORS` is the one list: the matrix has an entry
    for each of its minors and none for another."""
    assert untested_minors() == ([], [])
