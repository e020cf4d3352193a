"""Operators listed by the kind their generation-0 record names, and the operator a processor
whose name has no state continues (:mod:`fsstate.store.layout`).

Invariants checked: listing finds every operator with a record, sorted, with its kind; a name
with state continues itself; a name without continues the one unclaimed operator of its kind,
and several such operators are refused, naming them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fsstate.errors import ConfigError
from fsstate.storage.fileio import FileIO
from fsstate.store.layout import (
    Layout,
    continued_operator,
    operators_by_kind,
    operators_of_kind,
    publish_layout,
)


def _root(tmp_path: Path, **kinds: str) -> FileIO:
    fileio = FileIO(str(tmp_path))
    for name, kind in kinds.items():
        publish_layout(fileio, name, Layout(0, 2, kind=kind))
    return fileio


def test_operators_are_listed_by_kind(tmp_path: Path) -> None:
    fileio = _root(tmp_path, b="tiered", a="Counter", c="tiered")
    assert operators_by_kind(fileio) == {"a": "Counter", "b": "tiered", "c": "tiered"}
    assert operators_of_kind(fileio, "tiered") == ["b", "c"]


def test_a_name_with_state_continues_itself(tmp_path: Path) -> None:
    fileio = _root(tmp_path, Old="P", New="P")
    assert continued_operator(fileio, "New", "P", "the stage 'New'") == "New"


def test_a_renamed_processor_continues_the_one_unclaimed_operator(tmp_path: Path) -> None:
    fileio = _root(tmp_path, Old="P", Other="Q", Kept="P")
    who = "the stage 'New'"
    assert continued_operator(fileio, "New", "P", who, claimed={"Kept"}) == "Old"
    assert continued_operator(fileio, "New", "R", who) == "New"  # nothing of its kind
    with pytest.raises(ConfigError, match=r"several stages \['Kept', 'Old'\]"):
        continued_operator(fileio, "New", "P", who, several="stages")
