"""The state of a ``tiered()`` query follows the query's operator, not the processor's class
(as Spark's state follows the operator): a restart with a renamed or replaced processor class
continues the state, a store written under the class name by an earlier release keeps its
state, and an ambiguous takeover is refused. Driven as Spark's worker drives ``tiered()``,
without a SparkSession."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from fsstate.errors import ConfigError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.layout import LAYOUT_FILE
from fsstate_spark import tiered
from fsstate_spark.tiered import processor as processor_module
from fsstate_spark.tiered.lifecycle import TaskInfo, store_cache

QUERY = "query-1"


class Counting(StatefulProcessor):
    """Counts rows per key in a value state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n BIGINT")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Row]:
        old = self.count.get()
        total = (old[0] if old else 0) + sum(1 for _ in rows)
        self.count.update((total,))
        yield Row(k=key[0], n=total)

    def close(self) -> None:
        pass


class CountingV2(Counting):
    """The same logic under a new class name (a new release of the user's processor)."""


class Other(Counting):
    """Another processor of the same query."""


class _Handle(StatefulProcessorHandle):
    def __init__(self) -> None:
        pass

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> Any:
        return None


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    store_cache().clear()
    yield
    store_cache().clear()


def _batch(
    monkeypatch: pytest.MonkeyPatch, proc: Any, batch: int, keys: list[str], run: str
) -> list[tuple[str, int]]:
    info = TaskInfo("streaming", 0, batch, QUERY, 0, run, 1)
    monkeypatch.setattr(processor_module, "current_task", lambda: info)
    proc.init(_Handle())
    out = []
    for k in sorted(set(keys)):
        rows = iter([Row(k=k)] * keys.count(k))
        out += [(r["k"], r["n"]) for r in proc.handleInputRows((k,), rows, TimerValues(1, -1))]
    proc.close()
    return out


def test_a_renamed_processor_class_continues_the_querys_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = str(tmp_path)
    assert _batch(monkeypatch, tiered(Counting(), state_uri=state), 0, ["a", "a"], "r1") == [
        ("a", 2)
    ]
    store_cache().clear()  # a restart: new processes
    # the store written under the old class name (as every earlier release wrote it)
    assert (tmp_path / QUERY / "Counting" / LAYOUT_FILE).exists()
    renamed = tiered(CountingV2(), state_uri=state)
    assert _batch(monkeypatch, renamed, 1, ["a", "b"], "r2") == [("a", 3), ("b", 1)]
    assert _batch(monkeypatch, renamed, 2, ["a"], "r2") == [("a", 4)]
    assert not (tmp_path / QUERY / "CountingV2").exists()  # no second store was started
    # the same class again (an upgrade of fsstate alone): the store keeps its name
    store_cache().clear()
    assert _batch(monkeypatch, tiered(Counting(), state_uri=state), 3, ["b"], "r3") == [("b", 2)]


def test_an_ambiguous_takeover_is_refused_and_name_chooses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = str(tmp_path)
    _batch(monkeypatch, tiered(Counting(), state_uri=state), 0, ["a"], "r1")
    _batch(monkeypatch, tiered(Other(), state_uri=state), 0, ["a", "a"], "r1")
    store_cache().clear()
    with pytest.raises(ConfigError, match=r"several tiered operators \['Counting', 'Other'\]"):
        _batch(monkeypatch, tiered(CountingV2(), state_uri=state), 1, ["a"], "r2")
    chosen = tiered(CountingV2(), state_uri=state, name="Other")
    assert _batch(monkeypatch, chosen, 1, ["a"], "r2") == [("a", 3)]
    fileio = FileIO(Location.parse(state)).child(QUERY)
    assert not fileio.exists("CountingV2/" + LAYOUT_FILE)
