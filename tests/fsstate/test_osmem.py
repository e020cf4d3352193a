"""The collector settings of fsstate's tasks (:mod:`fsstate.osmem`): a relaxed young threshold
that comes back as it was; what a process keeps frozen at each task's start, thawed once per
interval (a fork counts from its own first task); and what freezing relies on: a closed store
is freed by reference counting alone."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig, osmem
from fsstate.osmem import (
    YOUNG_OBJECTS_MAX,
    freeze_survivors,
    gc_paused,
    gc_relaxed,
    task_collector,
)
from fsstate.store.pool import StorePool
from tests.support.engine import KEY, UKEY, VAL


@pytest.fixture()
def thresholds() -> Iterator[None]:
    old = gc.get_threshold()
    yield
    gc.set_threshold(*old)


@pytest.mark.usefixtures("thresholds")
def test_relaxed_collection_raises_only_the_young_threshold_and_restores_it() -> None:
    gc.set_threshold(700, 10, 10)
    with gc_relaxed():
        assert gc.get_threshold() == (YOUNG_OBJECTS_MAX, 10, 10)
        with gc_relaxed(50_000):  # nested: a lower request leaves the higher one
            assert gc.get_threshold() == (YOUNG_OBJECTS_MAX, 10, 10)
        with gc_paused():
            assert not gc.isenabled()
        assert gc.isenabled()
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(RuntimeError), gc_relaxed():
        raise RuntimeError("a failing task")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("thresholds")
def test_a_task_runs_relaxed_with_the_process_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(osmem, "_THAWED", [])
    gc.set_threshold(700, 10, 10)
    try:
        with task_collector():
            assert gc.get_threshold() == (YOUNG_OBJECTS_MAX, 10, 10)
            assert gc.get_freeze_count() > 1_000
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("thresholds")
@pytest.mark.parametrize("user", [0, 500_000])
def test_relaxed_collection_keeps_a_users_own_choice(user: int) -> None:
    """Automatic collection off (0) stays off; a higher threshold stays."""
    gc.set_threshold(user, 10, 10)
    with gc_relaxed():
        assert gc.get_threshold() == (user, 10, 10)
    assert gc.get_threshold() == (user, 10, 10)


def test_each_task_freezes_what_survived_and_an_interval_thaws_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(osmem, "_THAWED", [])
    try:
        freeze_survivors()
        frozen = gc.get_freeze_count()
        assert frozen > 1_000  # at least the modules
        kept = [[i] for i in range(1_000)]  # tracked objects a worker keeps between tasks
        freeze_survivors()  # the next task: they are frozen too
        assert gc.get_freeze_count() >= frozen + len(kept)
        assert not any(o is kept for o in gc.get_objects())  # (frozen ones are not listed)
        with gc_paused():  # a cycle kept until the next task, then garbage: only a thaw frees it
            box = Box([])
            box.inner.append(box)
            gone = weakref.ref(box)
            freeze_survivors()
            del box
        freeze_survivors()  # within the interval: still held
        gc.collect()
        assert gone() is not None
        freeze_survivors(thaw_every_s=0.0)  # the interval is over: thawed, collected, frozen
        assert gone() is None
        assert gc.get_freeze_count() > 1_000  # this task runs with the survivors frozen
        assert not any(o is kept for o in gc.get_objects())
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # a forked worker counts from its own first task, which only freezes
            gc.unfreeze()
            freeze_survivors(thaw_every_s=0.0)
            os.write(write, b"1" if gc.get_freeze_count() > 1_000 else b"0")
            os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"1"
        os.waitpid(pid, 0)
        os.close(read)
    finally:
        gc.unfreeze()


class Box:
    """A weakly referenceable object to put in a reference cycle."""

    def __init__(self, inner: list[object]) -> None:
        self.inner = inner


ELEM = pa.schema([pa.field("x", pa.int64())])


def _fill(store: PartitionStore, step: int) -> None:
    v = store.value_table("v", VAL, KEY, ttl_ms=60_000)
    lst = store.list_table("l", ELEM, KEY)
    m = store.map_table("m", UKEY, VAL, KEY)
    for i in range(300):
        k = (f"u{i}",)
        v.get(k)  # views loaded from the runs, and the TTL index
        v.update(k, (step * 1_000 + i, f"s{step}"))
        lst.append(k, (i,))
        m.update(k, (f"i{i % 3}",), (i, None))
        if i % 7 == 0:
            m.clear(k)


@pytest.mark.parametrize("how", ["close", "pool"])
def test_a_closed_store_is_freed_without_the_cyclic_collector(tmp_path: Path, how: str) -> None:
    """What freezing relies on: a store a worker closes (evicted from its pool, or closed) is
    no reference cycle, so freezing it while it was cached holds nothing after it closes."""
    first = PartitionStore.open(str(tmp_path), "op", 0, None, StoreConfig())
    first.set_time(1_000)
    _fill(first, 0)
    first.commit(0)
    first.close()
    store = PartitionStore.open(str(tmp_path), "op", 0, 0, StoreConfig())  # read from storage
    store.set_time(2_000)
    _fill(store, 1)
    store.commit(1)
    _fill(store, 2)  # dirty again: a failed attempt's store is closed too
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gone = weakref.ref(store)
        tables = [weakref.ref(t) for t in store._tables.values()]
        if how == "pool":
            pool = StorePool(max_idle=0)
            pool.release(store)  # not kept: closed
        else:
            store.close()
        del store
        assert gone() is None
        assert all(t() is None for t in tables)
    finally:
        if was_enabled:
            gc.enable()
