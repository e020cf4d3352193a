"""Key-cursor accessors (fsstate.tables.cursor) against the table's own methods, on every tier."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from fsstate import PartitionStore
from fsstate.errors import SchemaError
from fsstate.tables.cursor import Getter, Updater
from fsstate.tables.maps import MapTable
from fsstate.tables.value import ValueTable
from tests.support.engine import KEY, UKEY, VAL, to_tier

Factory = Callable[..., PartitionStore]


class Cell:
    """A current-key cell."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None


class Counted:
    """Key-cursor accessors of a table whose slow callables count their calls."""

    def __init__(self, table: ValueTable) -> None:
        self.cell = Cell()
        self.table = table
        self.slow_gets = 0
        self.slow_updates = 0
        self.get: Getter
        self.update: Updater
        self.get, self.update = table.cursor_ops(self.cell, self._get_slow, self._update_slow)

    def _get_slow(self) -> tuple[Any, ...] | None:
        self.slow_gets += 1
        if self.cell.key is None:
            raise LookupError("no key bound")
        return self.table.get(self.cell.key)

    def _update_slow(self, value: tuple[Any, ...]) -> None:
        self.slow_updates += 1
        if self.cell.key is None:
            raise LookupError("no key bound")
        self.table.update(self.cell.key, value)

    def at(self, key: tuple[Any, ...]) -> Counted:
        """Bind ``key``."""
        self.cell.key = key
        return self


def test_accessors_match_the_table_on_every_tier(make_store: Factory, tier: str) -> None:
    store = make_store()
    t = store.value_table("v", VAL, KEY)
    for i in range(20):
        t.update((f"u{i}",), (i, "a"))
    t.clear(("u3",))
    store = to_tier(store, tier, 1)
    t = store.value_table("v", VAL, KEY)
    c = Counted(t)
    for i in range(22):  # cold keys, a cleared key and never-written keys
        assert (
            c.at((f"u{i}",)).get() == t.get((f"u{i}",)) == (None if i in (3, 20, 21) else (i, "a"))
        )
    for i in range(22):  # read-modify-write through the accessors, as a processor does
        old = c.at((f"u{i}",)).get()
        c.update(((old[0] if old else 0) + 100, "b"))
    for i in range(22):
        assert t.get((f"u{i}",)) == ((100 if i in (3, 20, 21) else i + 100), "b")
    store.commit(2)
    again = PartitionStore.open(store.fileio, store.operator, store.partition, 2, store.config)
    assert again.value_table("v", VAL, KEY).get(("u7",)) == (107, "b")


def test_hot_calls_take_the_fast_path(make_store: Factory) -> None:
    store = make_store()
    t = store.value_table("v", VAL, KEY)
    c = Counted(t).at(("a",))
    c.update((1, "x"))  # a new key: the table's own update (growth, key check)
    assert (c.slow_gets, c.slow_updates) == (0, 1)
    for n in range(2, 50):
        assert c.get() == (n - 1, "x")
        c.update((n, "x"))
    assert (c.slow_gets, c.slow_updates) == (0, 1)
    assert t.get(("a",)) == (49, "x")
    seq = store.next_seq
    c.update((50, "x"))
    assert store.next_seq == seq + 1 and t.dirty


def test_off_the_fast_path_the_slow_callables_decide(make_store: Factory) -> None:
    store = make_store()
    t = store.value_table("v", VAL, KEY)
    c = Counted(t)
    with pytest.raises(LookupError):
        c.get()  # no key bound
    with pytest.raises(LookupError):
        c.update((1, "x"))
    c.at(("a",)).update((1, "x"))
    before = (store.next_seq, t.get(("a",)))
    for bad in [(1,), ("1", "x"), 5, (2**63, "x")]:
        with pytest.raises(SchemaError):
            c.update(bad)
    assert (store.next_seq, t.get(("a",))) == before
    c.update([np.int64(7), "y"])  # normalized by the table's checker, stored as plain tuple
    got = t.get(("a",))
    assert got == (7, "y") and type(got) is tuple and type(got[0]) is int


def test_ttl_tables_keep_their_index_and_expire(make_store: Factory) -> None:
    store = make_store()
    t = store.value_table("v", VAL, KEY)
    c = Counted(t).at(("a",))
    c.update((1, "x"))
    c.update((2, "x"))
    t.ttl_ms = 500  # a TTL declared later: writes must now carry an expiry and index it
    slow = (c.slow_gets, c.slow_updates)
    c.update((3, "x"))  # indexed, index in memory: still one frame, and the entry moves
    assert c.get() == (3, "x") and (c.slow_gets, c.slow_updates) == slow
    assert t.ttl_index().entries() == [(store.now_ms + 500, ("a",))]
    store.set_time(store.now_ms + 100)
    c.update((4, "x"))
    assert t.ttl_index().entries() == [(store.now_ms + 500, ("a",))]
    assert (c.slow_gets, c.slow_updates) == slow
    store.set_time(store.now_ms + 499)
    assert c.get() == (4, "x")
    store.set_time(store.now_ms + 1)  # expiry == now: expired, the slow path answers
    assert c.get() is None and t.get(("a",)) is None and c.slow_gets == slow[0] + 1
    assert t.expire() == 1 and len(t.ttl_index()) == 0
    c.at(("b",)).update((5, "y"))
    store.commit(1)
    again = PartitionStore.open(store.fileio, store.operator, store.partition, 1, store.config)
    again.set_time(store.now_ms)
    t2 = again.value_table("v", VAL, KEY, ttl_ms=500)
    c2 = Counted(t2).at(("b",))
    assert c2.get() == (5, "y") and not t2.ttl_loaded  # view loaded, index not read
    assert c2.get() == (5, "y") and c2.slow_gets == 1  # now a hot Timed view
    c2.update((6, "y"))  # the index is not in memory: the table's update loads it
    assert c2.slow_updates == 1 and t2.ttl_loaded
    c2.update((7, "y"))
    assert c2.slow_updates == 1
    assert t2.ttl_index().entries() == [(again.now_ms + 500, ("b",))]


def test_eviction_keeps_the_accessors_valid(make_store: Factory) -> None:
    store = make_store()
    t = store.value_table("v", VAL, KEY)
    c = Counted(t)
    for i in range(10):
        c.at((f"u{i}",)).update((i, "a"))
    store.commit(1)
    c.at(("u0",)).update((100, "a"))  # dirty: survives eviction
    t.evict_clean()
    assert t.hot_keys() == 1
    assert c.at(("u0",)).get() == (100, "a")
    assert c.at(("u5",)).get() == (5, "a")  # reloaded from the run by the slow path
    c.update((55, "a"))
    assert t.get(("u5",)) == (55, "a")
    store.commit(2)
    again = PartitionStore.open(store.fileio, store.operator, store.partition, 2, store.config)
    assert [again.value_table("v", VAL, KEY).get((f"u{i}",)) for i in (0, 5, 6)] == [
        (100, "a"),
        (55, "a"),
        (6, "a"),
    ]


def test_a_schema_without_exact_types_only_speeds_up_reads(make_store: Factory) -> None:
    store = make_store()
    schema = pa.schema([pa.field("d", pa.decimal128(10, 2))])
    t = store.value_table("dec", schema, KEY)
    c = Counted(t).at(("a",))
    c.update((1,))  # an int fits a decimal: normalized by the checker
    c.update((2,))
    assert c.slow_updates == 2
    assert str(c.get()[0]) == "2"  # type: ignore[index]


class MapCounted:
    """Map key-cursor accessors whose slow callables count their calls."""

    def __init__(self, table: MapTable) -> None:
        self.cell = Cell()
        self.table = table
        self.slow = 0

        def key() -> tuple[Any, ...]:
            self.slow += 1
            if self.cell.key is None:
                raise LookupError("no key bound")
            return self.cell.key

        self.get_value, self.contains_key, self.update_value = table.cursor_ops(
            self.cell,
            lambda u: table.get(key(), u),
            lambda u: table.contains(key(), u),
            lambda u, v: table.update(key(), u, v),
        )

    def at(self, key: tuple[Any, ...]) -> MapCounted:
        """Bind ``key``."""
        self.cell.key = key
        return self


def test_map_accessors_match_the_table_on_every_tier(make_store: Factory, tier: str) -> None:
    store = make_store()
    t = store.map_table("m", UKEY, VAL, KEY)
    for i in range(6):
        for j in range(3):
            t.update((f"u{i}",), (f"i{j}",), (i * 10 + j, "a"))
    t.remove(("u1",), ("i1",))
    t.clear(("u2",))
    store = to_tier(store, tier, 1)
    t = store.map_table("m", UKEY, VAL, KEY)
    c = MapCounted(t)
    for i in range(7):
        for j in range(4):
            k, u = (f"u{i}",), (f"i{j}",)
            assert c.at(k).get_value(u) == t.get(k, u)
            assert c.contains_key(u) == t.contains(k, u) == (t.get(k, u) is not None)
    for i in range(7):  # read-modify-write of existing and new user keys
        for j in (0, 3):
            old = c.at((f"u{i}",)).get_value((f"i{j}",))
            c.update_value((f"i{j}",), ((old[0] if old else 0) + 1000, "b"))
    # iteration is in user-key order whatever the order of updates (natural order here; the
    # Spark adapter gives Spark's MapState order: tests/fsstate_spark)
    assert [u for u, _ in t.items(("u0",))] == [("i0",), ("i1",), ("i2",), ("i3",)]
    assert t.get(("u0",), ("i0",)) == (1000, "b") and t.get(("u2",), ("i1",)) is None
    store.commit(2)
    again = PartitionStore.open(store.fileio, store.operator, store.partition, 2, store.config)
    m = again.map_table("m", UKEY, VAL, KEY)
    assert list(m.items(("u0",))) == list(t.items(("u0",)))
    assert m.get(("u5",), ("i0",)) == (1050, "b")


def test_map_hot_calls_take_the_fast_path_and_bad_input_is_refused(make_store: Factory) -> None:
    store = make_store()
    t = store.map_table("m", UKEY, VAL, KEY)
    c = MapCounted(t).at(("a",))
    c.update_value(("x",), (1, "v"))  # the key's first touch (view not loaded): the table's
    slow = c.slow
    for n in range(2, 20):
        assert c.get_value(("x",)) == (n - 1, "v") and c.contains_key(("x",))
        c.update_value(("x",), (n, "v"))
    # a new user key of a loaded key: the miss and the insert stay on the fast path too, and
    # the insert counts one unit of growth for the memory controller, as the table's update
    ctl = store.controller
    growth = ctl.growth
    assert c.get_value(("y",)) is None and not c.contains_key(("y",))
    c.update_value(("y",), (7, "w"))
    assert ctl.growth == growth - 1
    assert c.slow == slow
    assert list(t.items(("a",))) == [(("x",), (19, "v")), (("y",), (7, "w"))]
    c.update_value(("x",), (19, "v"))  # an update does not move x: user-key order
    assert [u for u, _ in t.items(("a",))] == [("x",), ("y",)]
    assert c.get_value((np.str_("y"),)) == (7, "w") and c.get_value((np.str_("q"),)) is None
    seq = store.next_seq
    for bad in [(1,), ("1", "v"), 5]:
        with pytest.raises(SchemaError):
            c.update_value(("x",), bad)
    assert store.next_seq == seq and t.get(("a",), ("x",)) == (19, "v")
    slow = c.slow
    for bad_key in [(5,), ("x", "y"), "x", (1.5,), {"x"}, ["x", "y"]]:
        # a user key that fails the exact test, not in the view (or not hashable): the table
        # checks it
        with pytest.raises(SchemaError):
            c.get_value(bad_key)
        with pytest.raises(SchemaError):
            c.contains_key(bad_key)
        with pytest.raises(SchemaError):
            c.update_value(bad_key, (1, "v"))
    assert c.slow == slow + 18 and store.next_seq == seq
    # a user key given as a list is the tuple of its items (the table normalizes it)
    assert c.get_value(["y"]) == (7, "w") and c.contains_key(["y"])
    c.update_value(["y"], (8, "w"))
    assert t.get(("a",), ("y",)) == (8, "w") and c.slow == slow + 21
    c.update_value((np.str_("z"),), (3, "v"))  # normalized by the table's checker
    assert t.get(("a",), ("z",)) == (3, "v") and c.contains_key(("z",))
    t.ttl_ms = 100  # indexed from now on; the index is in memory: still the fast path
    slow = c.slow
    c.update_value(("x",), (20, "v"))
    c.update_value(("w",), (21, "v"))  # a new user key with an expiry
    assert c.get_value(("x",)) == (20, "v") and c.contains_key(("w",)) and c.slow == slow
    now = store.now_ms
    assert sorted(t.ttl_index().entries()) == [
        (now + 100, (("a",), ("w",))),
        (now + 100, (("a",), ("x",))),
    ]
    store.set_time(now + 100)
    assert c.get_value(("x",)) is None and not c.contains_key(("x",))
    assert c.slow == slow + 2  # expired: the table answers
    assert t.expire() == 2 and len(t.ttl_index()) == 0
    assert [u for u, _ in t.items(("a",))] == [("y",), ("z",)]


def test_list_accessor_matches_the_table_on_every_tier(make_store: Factory, tier: str) -> None:
    store = make_store()
    t = store.list_table("l", VAL, KEY)
    for i in range(5):
        t.extend((f"u{i}",), [(i, "a"), (i, "b")])
    t.clear(("u1",))
    store = to_tier(store, tier, 1)
    t = store.list_table("l", VAL, KEY)
    cell = Cell()
    slow: list[tuple[Any, ...]] = []

    def append_slow(v: tuple[Any, ...]) -> None:
        slow.append(v)
        assert cell.key is not None
        t.append(cell.key, v)

    append = t.cursor_ops(cell, append_slow)
    for i in range(6):  # cold keys get the table's blind append, then the fast path
        cell.key = (f"u{i}",)
        append((100 + i, "c"))
        append((200 + i, "d"))
    assert len(slow) == (1 if tier == "memory" else 6)  # one slow append per cold key
    for i in range(6):
        before = [] if i in (1, 5) else [(i, "a"), (i, "b")]
        assert t.get((f"u{i}",)) == [*before, (100 + i, "c"), (200 + i, "d")]
    seq = store.next_seq
    for bad in [(1,), ("1", "x"), 5]:
        with pytest.raises(SchemaError):
            append(bad)
    assert store.next_seq == seq
    store.commit(2)
    again = PartitionStore.open(store.fileio, store.operator, store.partition, 2, store.config)
    assert again.list_table("l", VAL, KEY).get(("u0",)) == [
        (0, "a"),
        (0, "b"),
        (100, "c"),
        (200, "d"),
    ]


def test_list_accessor_keeps_the_ttl_index(make_store: Factory) -> None:
    store = make_store()
    t = store.list_table("l", VAL, KEY, ttl_ms=100)
    cell = Cell()
    cell.key = ("a",)
    append = t.cursor_ops(cell, lambda v: t.append(("a",), v))
    append((1, "x"))
    append((2, "x"))
    assert len(t.ttl_index()) == 1
    store.set_time(store.now_ms + 100)
    assert t.get(("a",)) == [] and t.expire() == 2


def test_closing_the_store_releases_what_accessors_hold(make_store: Factory) -> None:
    from fsstate.errors import StoreClosedError

    store = make_store()
    t = store.value_table("v", VAL, KEY)
    c = Counted(t)
    for i in range(100):
        c.at((f"u{i}",)).update((i, "a"))
    store.commit(1)
    store.close()
    assert t.hot_keys() == 0 and not t.runs  # freed although the accessors still hold t
    with pytest.raises(StoreClosedError):
        c.at(("u1",)).get()
    with pytest.raises(StoreClosedError):
        c.update((1, "a"))
    with pytest.raises(StoreClosedError):
        t.update(("new",), (1, "a"))
