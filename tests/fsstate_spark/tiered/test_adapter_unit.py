"""The adapter without a SparkSession: the task lifecycle is simulated by patching
``current_task`` and calling the processor as Spark's worker does (init, callbacks, close)."""

from __future__ import annotations

import gc
import pickle
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from fsstate import PartitionStore
from fsstate.errors import SchemaError, StateKindError
from fsstate_spark import EmptyListError, NoGroupingKeyError, state_summary, tiered
from fsstate_spark.pyfiles import build
from fsstate_spark.state.keys import normalize_key
from fsstate_spark.state.schemas import parse_ddl, to_arrow
from fsstate_spark.tiered import processor as processor_module
from fsstate_spark.tiered.lifecycle import SPARK_MARKER, SPARK_MARKER_SCHEMA, TaskInfo, store_cache
from fsstate_spark.tiered.lineage import LINEAGE_SCHEMA, LINEAGE_VAR


class FakeClient:
    key_schema = StructType([StructField("k", StringType())])


class FakeHandle(StatefulProcessorHandle):
    """Stands in for Spark's handle: timers, and the state variables declared with it."""

    def __init__(self) -> None:
        self._statefulProcessorApiClient: Any = FakeClient()
        self.timers: list[int] = []
        self.declared: list[tuple[str, Any]] = []

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> Any:
        self.declared.append((stateName, schema))

    def registerTimer(self, ts: int) -> None:
        self.timers.append(ts)

    def deleteTimer(self, ts: int) -> None:
        self.timers.remove(ts)

    def listTimers(self) -> Iterator[int]:
        return iter(sorted(self.timers))


class Counter(StatefulProcessor):
    """Counts rows per key (value), keeps values (list) and a histogram (map); lazy output."""

    def __init__(self, ttl_ms: int | None = None, drop: str | None = None) -> None:
        self.ttl_ms = ttl_ms
        self.drop = drop

    def init(self, handle: StatefulProcessorHandle) -> None:
        if self.drop:
            handle.deleteIfExists(self.drop)
        self.handle = handle
        self.count = handle.getValueState("count", "n BIGINT", self.ttl_ms)
        self.vals = handle.getListState("vals", StructType([StructField("v", LongType())]))
        self.hist = handle.getMapState("hist", "v BIGINT", "n BIGINT")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
        for v in rows:
            old = self.count.get()
            self.count.update(((old[0] if old else 0) + 1,))
            self.vals.appendValue((v,))
            cur = self.hist.getValue((v,))
            self.hist.updateValue((v,), ((cur[0] if cur else 0) + 1,))
            yield (key[0], self.count.get()[0])  # type: ignore[index]

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Any]:
        yield ("timer", key[0], self.count.get())

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    store_cache().clear()
    yield
    store_cache().clear()


@pytest.fixture()
def task(monkeypatch: pytest.MonkeyPatch) -> dict[str, TaskInfo]:
    """Set ``task["now"]`` to choose what current_task() returns."""
    holder = {"now": TaskInfo("driver")}
    monkeypatch.setattr(processor_module, "current_task", lambda: holder["now"])
    return holder


def run_task(
    proc: Any,
    task: dict[str, TaskInfo],
    info: TaskInfo,
    inputs: list[tuple[Any, list[int]]],
    now_ms: int = 1_000,
    close: bool = True,
) -> list[Any]:
    task["now"] = info
    proc.init(FakeHandle())
    out: list[Any] = []
    for key, values in inputs:
        out.extend(proc.handleInputRows(key, iter(values), TimerValues(now_ms, -1)))
    if close:
        proc.close()
    return out


def streaming(batch: int, partition: int = 0, attempt: int = 0) -> TaskInfo:
    return TaskInfo("streaming", partition, batch, "query-1", attempt)


def test_batches_commit_versions_and_reuse_the_cached_store(
    task: dict[str, TaskInfo], tmp_path: Path
) -> None:
    proc = tiered(Counter(), state_uri=str(tmp_path))
    assert run_task(proc, task, streaming(0), [(("a",), [1, 2]), (("b",), [3])]) == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
    ]
    assert run_task(proc, task, streaming(1), [(("a",), [1])]) == [("a", 3)]
    assert store_cache().hits == 1 and store_cache().restores == 1
    root = str(tmp_path / "query-1")
    assert PartitionStore.committed_versions(root, "Counter", 0) == [0, 1]
    store = PartitionStore.open(root, "Counter", 0, 1)
    schema = pa.schema([pa.field("v", pa.int64())])
    assert store.list_table("vals", schema).get(("a",)) == [(1,), (2,), (1,)]


def test_a_stock_loop_task_freezes_what_the_worker_keeps(
    task: dict[str, TaskInfo], tmp_path: Path
) -> None:
    """On PySpark's own loop, a streaming task's init moves what the worker keeps (the store
    cached by the task before) into the collector's permanent generation, so that PySpark's
    collection after every task does not walk it (fsstate.osmem)."""
    proc = tiered(Counter(), state_uri=str(tmp_path), fast_loop=False)
    run_task(proc, task, streaming(0), [(("a",), [1])])
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        run_task(proc, task, TaskInfo("driver"), [])
        assert gc.get_freeze_count() == 0  # the driver's schema pass keeps nothing
        run_task(proc, task, streaming(1), [(("a",), [1])], close=False)
        assert gc.get_freeze_count() > 0
        proc.close()
    finally:
        gc.unfreeze()


def test_failed_attempt_is_discarded_and_the_retry_restores(
    task: dict[str, TaskInfo], tmp_path: Path
) -> None:
    proc = tiered(Counter(), state_uri=str(tmp_path))
    run_task(proc, task, streaming(0), [(("a",), [1])])
    # attempt 0 of batch 1 writes, then dies before close()
    run_task(proc, task, streaming(1), [(("a",), [5, 5, 5])], close=False)
    assert run_task(proc, task, streaming(1, attempt=1), [(("a",), [2])]) == [("a", 2)]
    assert store_cache().restores == 2


def _in_other_worker(proc: Any, task: dict[str, TaskInfo], info: TaskInfo, inputs: Any) -> None:
    """Run one task as if in another Python worker (this process's cached stores unseen)."""
    cache = store_cache()
    saved = dict(cache.pool._idle)
    cache.pool._idle.clear()
    run_task(proc, task, info, inputs)
    for store in cache.pool._idle.values():
        store.close()
    cache.pool._idle.clear()
    cache.pool._idle.update(saved)


def test_a_store_cached_at_an_older_version_catches_up(
    task: dict[str, TaskInfo], tmp_path: Path
) -> None:
    proc = tiered(Counter(), state_uri=str(tmp_path))
    run_task(proc, task, streaming(0), [(("a",), [1]), (("b",), [1])])
    # batches 1 and 2 of partition 0 ran in another worker process
    other = tiered(Counter(), state_uri=str(tmp_path))
    _in_other_worker(other, task, streaming(1), [(("a",), [1, 1])])
    _in_other_worker(other, task, streaming(2), [(("b",), [1])])
    # this process still holds version 0: it catches up with versions 1 and 2
    assert run_task(proc, task, streaming(3), [(("a",), [7]), (("b",), [7])]) == [
        ("a", 4),
        ("b", 3),
    ]
    cache = store_cache()
    # restored: batch 0 (empty) here, batches 1 and 2 in the other worker; caught up: batch 3
    assert (cache.caught_up, cache.restores, cache.last_outcome) == (1, 3, "caught_up")


def test_a_second_attempt_of_a_committed_batch_adopts_it(
    task: dict[str, TaskInfo], tmp_path: Path
) -> None:
    """A version is published once: another attempt of batch 1 (say, speculative, or a re-run
    after a restart) adopts the version this worker committed, so the cached copy stays valid."""
    proc = tiered(Counter(), state_uri=str(tmp_path))
    run_task(proc, task, streaming(0), [(("a",), [1])])
    run_task(proc, task, streaming(1), [(("a",), [1])])  # this worker committed version 1
    _in_other_worker(tiered(Counter(), state_uri=str(tmp_path)), task, streaming(1), [])
    assert run_task(proc, task, streaming(2), [(("a",), [7])]) == [("a", 3)]
    assert store_cache().last_outcome == "hit"


def test_missing_version_names_what_to_do(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    proc = tiered(Counter(), state_uri=str(tmp_path))
    with pytest.raises(LookupError, match="checkpoint"):
        run_task(proc, task, streaming(5), [(("a",), [1])])


def test_lazy_iterators_keep_their_key(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    proc = tiered(Counter(), state_uri=str(tmp_path))
    task["now"] = streaming(0)
    proc.init(FakeHandle())
    it_a = proc.handleInputRows(("a",), iter([1, 1]), TimerValues(1, -1))
    it_b = proc.handleInputRows(("b",), iter([2, 2, 2]), TimerValues(1, -1))
    assert [next(it_a), next(it_b), next(it_a), next(it_b), next(it_b)] == [
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("b", 2),
        ("b", 3),
    ]
    timer_out = list(proc.handleExpiredTimer(("a",), TimerValues(1, -1), ExpiredTimerInfo(1)))
    assert timer_out == [("timer", "a", (2,))]
    proc.close()


def test_state_without_a_key_is_refused(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    class UsesStateInInit(Counter):
        def init(self, handle: StatefulProcessorHandle) -> None:
            super().init(handle)
            self.count.get()

    proc = tiered(UsesStateInInit(), state_uri=str(tmp_path))
    task["now"] = streaming(0)
    with pytest.raises(NoGroupingKeyError, match="handleInputRows"):
        proc.init(FakeHandle())


def test_driver_and_bounded_modes_write_nothing(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = tiered(Counter(), state_uri=str(state))
    assert run_task(proc, task, TaskInfo("driver"), []) == []
    bounded = TaskInfo("bounded", 0)
    out = run_task(proc, task, bounded, [(("a",), [1, 1]), (("b",), [1]), (("a",), [1])])
    assert out == [("a", 1), ("a", 2), ("b", 1), ("a", 1)]  # only the current key is kept
    assert list(state.rglob("*")) == []


def test_ttl_uses_the_batch_processing_time(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    proc = tiered(Counter(ttl_ms=100), state_uri=str(tmp_path))
    assert run_task(proc, task, streaming(0), [(("a",), [1])], now_ms=1_000) == [("a", 1)]
    assert run_task(proc, task, streaming(1), [(("a",), [1])], now_ms=1_050) == [("a", 2)]
    # written at 1050 with ttl 100: expired at 1150
    assert run_task(proc, task, streaming(2), [(("a",), [1])], now_ms=1_150) == [("a", 1)]


def test_delete_if_exists_drops_state(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    run_task(tiered(Counter(), state_uri=str(tmp_path)), task, streaming(0), [(("a",), [1])])
    proc = tiered(Counter(drop="count"), state_uri=str(tmp_path))
    assert run_task(proc, task, streaming(1), [(("a",), [1])]) == [("a", 1)]


def test_handle_api_details(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    proc = tiered(Counter(), state_uri=str(tmp_path))
    # Spark pickles the proxy before any init; the copy carries settings, never a task
    clone = pickle.loads(pickle.dumps(proc))
    assert clone._task is None and clone.config == proc.config
    task["now"] = streaming(0)
    fake = FakeHandle()
    proc.init(fake)
    inner: Any = proc.processor
    list(proc.handleInputRows((np.str_("a"),), iter([4, 4, 5]), TimerValues(1, -1)))
    inner.handle.registerTimer(99)
    assert list(inner.handle.listTimers()) == [99] and fake.timers == [99]
    inner.handle.deleteTimer(99)
    assert fake.timers == []
    assert sorted(inner.hist.iterator()) == [((4,), (2,)), ((5,), (1,))]
    assert sorted(inner.hist.keys()) == [(4,), (5,)]
    assert sorted(inner.hist.values()) == [(1,), (2,)]
    assert inner.hist.containsKey((4,)) and not inner.hist.containsKey((6,))
    inner.hist.removeKey((4,))
    assert list(inner.hist.keys()) == [(5,)]
    assert [t[0] for t in inner.vals.get()] == [4, 4, 5]
    inner.vals.put([(7,)])
    assert list(inner.vals.get()) == [(7,)] and inner.vals.exists()
    with pytest.raises(EmptyListError):
        inner.vals.put([])
    with pytest.raises(EmptyListError):
        inner.vals.appendList([])
    with pytest.raises(SchemaError):
        inner.count.update(("not a number",))
    inner.vals.clear()
    assert not inner.vals.exists() and list(inner.vals.get()) == []
    with pytest.raises(StateKindError):
        inner.handle.getListState("count", "n BIGINT")
    proc.close()


def test_keys_are_normalized_to_python_scalars() -> None:
    ts = pd.Timestamp("2024-01-02 03:04:05")
    key = normalize_key((np.int64(5), np.float64(1.5), np.bool_(True), ts, "s"))
    assert key == (5, 1.5, True, ts.to_pydatetime(), "s")
    assert [type(v) for v in key[:3]] == [int, float, bool]
    assert normalize_key("x") == ("x",) and normalize_key(["a", 1]) == ("a", 1)


def test_ddl_parsing() -> None:
    schema = to_arrow(
        "s",
        "a INT, `b c` STRING NOT NULL, d DECIMAL(10,2), e ARRAY<BIGINT>, "
        "f MAP<STRING, DOUBLE>, g STRUCT<x: INT, y: TIMESTAMP>, h timestamp_ntz",
    )
    assert schema.names == ["a", "b c", "d", "e", "f", "g", "h"]
    assert schema.field("a").type == pa.int32()
    assert not schema.field("b c").nullable
    assert schema.field("d").type == pa.decimal128(10, 2)
    assert schema.field("e").type == pa.list_(pa.int64())
    assert pa.types.is_map(schema.field("f").type)
    assert schema.field("g").type.field("y").type == pa.timestamp("us", tz="UTC")
    assert schema.field("h").type == pa.timestamp("us")
    assert parse_ddl("n bigint") == StructType([StructField("n", LongType())])
    with pytest.raises(SchemaError, match="cannot parse"):
        to_arrow("s", "n WHATEVER")
    used: list[str] = []

    def fallback(ddl: str) -> StructType:
        used.append(ddl)
        return StructType([StructField("n", LongType())])

    assert to_arrow("s", "n BIGINT COMMENT 'x'", fallback).names == ["n"]
    assert used == ["n BIGINT COMMENT 'x'"]
    with pytest.raises(SchemaError):
        to_arrow("s", 42)  # type: ignore[arg-type]


def test_pyfiles_zip_and_state_summary(task: dict[str, TaskInfo], tmp_path: Path) -> None:
    names = build(tmp_path / "dist" / "pyfiles.zip")
    with zipfile.ZipFile(tmp_path / "dist" / "pyfiles.zip") as zf:
        listed = zf.namelist()
    assert listed == names
    assert "fsstate/__init__.py" in listed and "fsstate_spark/tiered/processor.py" in listed
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in listed)

    state = tmp_path / "state"
    proc = tiered(Counter(), state_uri=str(state), name="counter")
    run_task(proc, task, streaming(0, partition=0), [(("a",), [1, 2])])
    run_task(proc, task, streaming(0, partition=1), [(("b",), [3])])
    summary = state_summary(str(state))
    assert set(summary.stores) == {("query-1", "counter", 0), ("query-1", "counter", 1)}
    assert summary.files > 0 and summary.bytes > 0
    assert summary.rows_by_table()["vals"] == 3
    assert "counter" in summary.format()


def test_hot_state_calls_are_key_cursor_methods(tmp_path: Path) -> None:
    """The declared states are subclasses whose hot methods are the engine's accessors; off
    their hit path the Tiered* methods answer (errors included)."""
    from fsstate_spark.state.handles import (
        KeyBinding,
        TieredHandle,
        TieredListState,
        TieredMapState,
        TieredValueState,
    )

    store = PartitionStore.open(str(tmp_path), "op", 0, None)
    binding = KeyBinding()
    handle = TieredHandle(FakeHandle(), store, binding)
    v = handle.getValueState("c", "c BIGINT")
    lst = handle.getListState("l", "x BIGINT")
    m = handle.getMapState("m", "u STRING", "n BIGINT")
    for state, cls, names in (
        (v, TieredValueState, ("get", "update")),
        (lst, TieredListState, ("appendValue",)),
        (m, TieredMapState, ("getValue", "containsKey", "updateValue")),
    ):
        assert isinstance(state, cls) and type(state) is not cls
        for name in names:
            assert getattr(type(state), name) is not getattr(cls, name), name
            assert getattr(type(state), name).__doc__ == getattr(cls, name).__doc__
    with pytest.raises(NoGroupingKeyError):
        v.get()
    binding.key = ("a",)
    assert v.get() is None
    v.update((1,))
    v.update((v.get()[0] + 1,))  # type: ignore[index]
    with pytest.raises(SchemaError):
        v.update(("x",))
    lst.appendValue((1,))
    lst.appendValue((2,))
    m.updateValue(("p",), (1,))
    m.updateValue(("p",), (m.getValue(("p",))[0] + 1,))  # type: ignore[index]
    assert (v.get(), list(lst.get()), m.getValue(("p",)), m.containsKey(("q",))) == (
        (2,),
        [(1,), (2,)],
        (2,),
        False,
    )
    binding.key = None
    with pytest.raises(NoGroupingKeyError):
        m.updateValue(("p",), (3,))


def test_init_declares_spark_s_marker_state_before_the_user_s_state(
    task: dict[str, TaskInfo], tmp_path: Path
) -> None:
    """Spark's offline repartition needs the operator's Spark store to hold a state variable:
    every tiered processor declares one with Spark's handle, and the lineage variable
    (fsstate_spark.tiered.lineage), and only those."""
    task["now"] = TaskInfo("driver")
    handle = FakeHandle()
    tiered(Counter(), state_uri=str(tmp_path)).init(handle)
    assert handle.declared == [
        (SPARK_MARKER, SPARK_MARKER_SCHEMA),
        (LINEAGE_VAR, LINEAGE_SCHEMA),
    ]
