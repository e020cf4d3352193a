"""Contract tests of value, list and map tables, run in every tier configuration and on every
storage backend (local disk, the S3 server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore
from fsstate.storage.location import Location
from tests.support.engine import KEY, UKEY, VAL, Factory, store_factory, to_tier
from tests.support.plugin import s3_options


@pytest.fixture(params=["local", "s3"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    """Empty stores on local disk and on the S3 server (every contract test runs on both)."""
    if request.param == "local":
        return store_factory(Location.parse(str(tmp_path / "state")))
    uri = request.getfixturevalue("s3_uri")
    return store_factory(Location.parse(uri, s3_options(request.getfixturevalue("s3_server"))))


def test_value_roundtrip(make_store: Factory, tier: str) -> None:
    s = make_store()
    t = s.value_table("v", VAL, KEY)
    t.update(("a",), (1, "x"))
    t.update(("b",), (2, "y"))
    t.update(("a",), (3, "z"))
    t.clear(("b",))
    s = to_tier(s, tier, 0)
    t2 = s.table("v")
    assert t2.get(("a",)) == (3, "z")
    assert t2.get(("b",)) is None
    assert t2.exists(("a",)) and not t2.exists(("b",)) and not t2.exists(("c",))
    assert sorted(t2.keys()) == [("a",)]


def test_delete_then_reput_same_epoch(make_store: Factory, tier: str) -> None:
    """A delete then a re-put in one epoch stays correct after sealing and Parquet writes."""
    s = make_store()
    v = s.value_table("v", VAL, KEY)
    m = s.map_table("m", UKEY, VAL, KEY)
    lst = s.list_table("l", VAL, KEY)
    v.update(("a",), (1, "old"))
    m.update(("a",), ("i",), (1, "old"))
    lst.append(("a",), (1, "old"))
    s = to_tier(s, tier, 0)
    v, m, lst = s.table("v"), s.table("m"), s.table("l")
    # same epoch: delete, then put again
    v.clear(("a",))
    v.update(("a",), (2, "new"))
    m.remove(("a",), ("i",))
    m.update(("a",), ("i",), (2, "new"))
    lst.clear(("a",))
    lst.append(("a",), (2, "new"))
    s = to_tier(s, tier, 1)
    v, m, lst = s.table("v"), s.table("m"), s.table("l")
    assert v.get(("a",)) == (2, "new")
    assert m.get(("a",), ("i",)) == (2, "new")
    assert lst.get(("a",)) == [(2, "new")]
    # and the reverse order: put then delete in one epoch
    v.update(("a",), (3, "gone"))
    v.clear(("a",))
    m.update(("a",), ("j",), (3, "gone"))
    m.remove(("a",), ("j",))
    s = to_tier(s, tier, 2)
    assert s.table("v").get(("a",)) is None
    assert s.table("m").get(("a",), ("j",)) is None
    assert s.table("m").get(("a",), ("i",)) == (2, "new")


def test_list_semantics(make_store: Factory, tier: str) -> None:
    s = make_store()
    lst = s.list_table("l", VAL, KEY)
    lst.append(("a",), (1, "x"))
    lst.extend(("a",), [(2, "y"), (3, "z")])
    lst.put(("b",), [(9, "q")])
    lst.put(("c",), [(1, "c")])
    lst.clear(("c",))
    s = to_tier(s, tier, 0)
    lst = s.table("l")
    assert lst.get(("a",)) == [(1, "x"), (2, "y"), (3, "z")]
    assert lst.get(("b",)) == [(9, "q")]
    assert lst.get(("c",)) == [] and not lst.exists(("c",))
    lst.append(("a",), (4, "w"))
    lst.put(("b",), [(8, "p"), (7, "o")])
    s = to_tier(s, tier, 1)
    lst = s.table("l")
    assert lst.get(("a",)) == [(1, "x"), (2, "y"), (3, "z"), (4, "w")]
    assert lst.get(("b",)) == [(8, "p"), (7, "o")]


def test_map_semantics(make_store: Factory, tier: str) -> None:
    s = make_store()
    m = s.map_table("m", UKEY, VAL, KEY)
    m.update(("a",), ("i1",), (1, "x"))
    m.update(("a",), ("i2",), (2, "y"))
    m.update(("a",), ("i3",), (3, "z"))
    m.remove(("a",), ("i2",))
    m.update(("a",), ("i1",), (4, "w"))  # entries iterate in user-key order, not write order
    m.update(("b",), ("i1",), (5, "v"))
    m.clear(("b",))
    s = to_tier(s, tier, 0)
    m = s.table("m")
    assert list(m.items(("a",))) == [(("i1",), (4, "w")), (("i3",), (3, "z"))]
    assert list(m.user_keys(("a",))) == [("i1",), ("i3",)]
    assert list(m.values(("a",))) == [(4, "w"), (3, "z")]
    assert m.contains(("a",), ("i3",)) and not m.contains(("a",), ("i2",))
    assert not m.exists(("b",)) and list(m.items(("b",))) == []


def test_range_delete(make_store: Factory, tier: str) -> None:
    s = make_store()
    key = pa.schema([pa.field("window_start", pa.int64()), pa.field("user", pa.string())])
    v = s.value_table("w", VAL, key)
    for w in (0, 10, 20, 30):
        for u in ("a", "b"):
            v.update((w, u), (w, u))
    s = to_tier(s, tier, 0)
    v = s.table("w")
    v.delete_range((0, ""), (20, ""))  # windows 0 and 10 closed
    v.update((10, "a"), (99, "late"))  # re-put after the range delete survives
    s = to_tier(s, tier, 1)
    v = s.table("w")
    assert sorted(v.keys()) == [(10, "a"), (20, "a"), (20, "b"), (30, "a"), (30, "b")]
    assert v.get((0, "a")) is None and v.get((10, "a")) == (99, "late")


def test_batched_ops(make_store: Factory, tier: str) -> None:
    s = make_store()
    v = s.value_table("v", VAL, KEY)
    m = s.map_table("m", UKEY, VAL, KEY)
    lst = s.list_table("l", VAL, KEY)
    v.update(("a",), (0, "hot"))  # a hot view that put_many must override
    keys = pa.table({"user": ["a", "b", "a"]})
    vals = pa.table({"count": [1, 2, 3], "label": ["x", "y", "z"]})
    v.put_many(keys, vals)
    m.put_many(keys, pa.table({"item": ["i", "i", "j"]}), vals)
    lst.append(("a",), (0, "first"))
    lst.append_many(keys, vals)
    s = to_tier(s, tier, 0)
    v, m, lst = s.table("v"), s.table("m"), s.table("l")
    got = v.get_many(pa.table({"user": ["a", "b", "zz"]}))
    assert got.column("count").to_pylist() == [3, 2, None]
    assert got.column("_found").to_pylist() == [True, True, False]
    assert v.get(("a",)) == (3, "z")
    mg = m.get_many(pa.table({"user": ["a", "a", "b"]}), pa.table({"item": ["i", "j", "j"]}))
    assert mg.column("label").to_pylist() == ["x", "z", None]
    assert lst.get(("a",)) == [(0, "first"), (1, "x"), (3, "z")]
    assert lst.get(("b",)) == [(2, "y")]


def test_ttl_visibility(make_store: Factory, tier: str) -> None:
    s = make_store()
    s.set_time(100)
    v = s.value_table("v", VAL, KEY, ttl_ms=500)
    m = s.map_table("m", UKEY, VAL, KEY, ttl_ms=500)
    lst = s.list_table("l", VAL, KEY, ttl_ms=500)
    v.update(("a",), (1, "x"))
    m.update(("a",), ("i",), (1, "x"))
    lst.append(("a",), (1, "x"))
    s.set_time(300)
    m.update(("a",), ("j",), (2, "y"))
    lst.append(("a",), (2, "y"))
    s = to_tier(s, tier, 0)
    s.set_time(599)
    v, m, lst = s.table("v"), s.table("m"), s.table("l")
    assert v.get(("a",)) == (1, "x")
    s.set_time(600)  # expiry 600 <= now: expired, before any cleanup
    assert v.get(("a",)) is None and not v.exists(("a",))
    assert m.get(("a",), ("i",)) is None and list(m.user_keys(("a",))) == [("j",)]
    assert lst.get(("a",)) == [(2, "y")]
    s.set_time(800)
    assert not lst.exists(("a",)) and not m.exists(("a",))


def test_lasting_and_expiring_values_mix(make_store: Factory, tier: str) -> None:
    """Values written before a TTL was set never expire; later ones do, on every tier (the
    memtable holds the two as different cells; a reopened table warms up from a mix)."""
    s = make_store()
    s.set_time(100)
    v = s.value_table("v", VAL, KEY)
    m = s.map_table("m", UKEY, VAL, KEY)
    for i in range(6):
        v.update((f"k{i}",), (i, "lasting"))
        m.update(("a",), (f"u{i}",), (i, "lasting"))
    v.ttl_ms = m.ttl_ms = 500
    for i in range(3, 9):  # k3..k5 / u3..u5 rewritten with an expiry, k6.. new
        v.update((f"k{i}",), (i, "expiring"))
        m.update(("a",), (f"u{i}",), (i, "expiring"))
    s = to_tier(s, tier, 0)
    v, m = s.table("v"), s.table("m")
    keys = pa.table({"user": [f"k{i}" for i in range(10)]})
    expect = [(i, "lasting") for i in range(3)] + [(i, "expiring") for i in range(3, 9)]
    assert [v.get((f"k{i}",)) for i in range(10)] == [*expect, None]
    assert v.get_many(keys).column("count").to_pylist() == [*range(9), None]
    assert list(m.items(("a",))) == [((f"u{i}",), e) for i, e in enumerate(expect)]
    s.set_time(600)
    assert [v.get((f"k{i}",)) for i in range(10)] == [*expect[:3], *[None] * 7]
    assert v.get_many(keys).column("count").to_pylist() == [0, 1, 2, *[None] * 7]
    assert [u for u, _ in m.items(("a",))] == [("u0",), ("u1",), ("u2",)]
    assert m.get(("a",), ("u4",)) is None and m.contains(("a",), ("u2",))
    assert s.expire() == 12
    assert sorted(v.keys()) == [("k0",), ("k1",), ("k2",)] and m.exists(("a",))
    s.commit(1)
    again = PartitionStore.open(s.fileio, s.operator, s.partition, 1, s.config)
    again.set_time(10**9)  # lasting values outlive any clock
    assert sorted(again.table("v").keys()) == [("k0",), ("k1",), ("k2",)]
    assert len(list(again.table("m").items(("a",)))) == 3


def test_vectorized_get_many_matches_point_gets(make_store: Factory) -> None:
    """get_many's Arrow path (no hot view, runs in memory) agrees with point reads."""
    import random

    rng = random.Random(3)
    s = make_store()
    s.set_time(100)
    for ttl in (None, 50):
        v = s.value_table(f"v{ttl}", VAL, KEY, ttl_ms=ttl)
        for round_ in range(4):
            keys = [f"k{rng.randrange(300)}" for _ in range(200)]
            vals = [(rng.randrange(1000), f"r{round_}") for _ in keys]
            v.put_many(
                pa.table({"user": keys}),
                pa.table({"count": [x for x, _ in vals], "label": [y for _, y in vals]}),
            )
            for _ in range(20):
                v.clear((f"k{rng.randrange(300)}",))
                v.update((f"k{rng.randrange(300)}",), (round_, "point"))
            v.seal()
            v.evict_clean()
            s.set_time(100 + 20 * round_)
        # a last batched write with repeated keys, still unsorted when get_many reads it
        keys = [f"k{rng.randrange(300)}" for _ in range(300)]
        v.put_many(
            pa.table({"user": keys}),
            pa.table({"count": list(range(len(keys))), "label": ["last"] * len(keys)}),
        )
        if ttl is not None:  # a TTL-indexed table writes point by point: seal those views
            v.seal()
            v.evict_clean()
        probe = [f"k{i}" for i in range(0, 320, 3)] + ["k3", "k3", "nope"]
        rng.shuffle(probe)
        assert v._views == {} and all(r.in_memory for r in v.runs)
        unsorted = ttl is None
        assert v.runs[-1]._segment._sorted is not unsorted  # type: ignore[union-attr]
        got = v.get_many(pa.table({"user": probe}))
        assert v.runs[-1]._segment._sorted is not unsorted  # type: ignore[union-attr]
        expected = [v.get((k,)) for k in probe]
        assert got.column("_found").to_pylist() == [e is not None for e in expected]
        counts = got.column("count").to_pylist()
        labels = got.column("label").to_pylist()
        assert [None if c is None else (c, lab) for c, lab in zip(counts, labels)] == expected
        # every key, twice: enough keys for the joins to beat per-key lookups in hot views
        _check_get_many_with_clean_views(s, v, [f"k{i}" for i in range(320)] * 2)


def _found(table: pa.Table) -> list[tuple[Any, ...] | None]:
    found = table.column("_found").to_pylist()
    rows = zip(table.column("count").to_pylist(), table.column("label").to_pylist())
    return [row if ok else None for ok, row in zip(found, rows)]


def _check_get_many_with_clean_views(s: Any, v: Any, probe: list[str]) -> None:
    """Clean views mirror the runs: a large get_many joins the runs and agrees with them;
    once a view is dirty, get_many reads the views. Both agree with point reads, also after
    the clock moved (expiry is decided at read time on either path)."""
    arrow_calls = []
    real = v._get_many_arrow

    def spy(ks: Any) -> Any:
        arrow_calls.append(len(ks))
        return real(ks)

    v._get_many_arrow = spy
    table = pa.table({"user": probe})
    assert v._views and not v._dirty
    for now in (s.now_ms, s.now_ms + 35):
        s.set_time(now)
        expected = [v.get((k,)) for k in probe]
        assert _found(v.get_many(table)) == expected
    assert len(arrow_calls) == 2
    v.update((probe[0],), (-1, "dirty"))
    expected = [v.get((k,)) for k in probe]
    assert _found(v.get_many(table)) == expected and expected[0] == (-1, "dirty")
    assert len(arrow_calls) == 2  # a dirty view: the runs alone are not the answer
    del v._get_many_arrow


def test_list_keys_are_accepted_and_unhashable_junk_is_refused(
    make_store: Factory, tier: str
) -> None:
    """A key or user key given as a list means the tuple of its items (the checkers accept
    lists), on every path, including the hot ones that look the key up before checking it; an
    unhashable key that is no valid key raises the typed SchemaError, not Python's TypeError."""
    import pytest

    from fsstate.errors import SchemaError

    s = make_store()
    v = s.value_table("v", VAL, KEY)
    t = s.value_table("t", VAL, KEY, ttl_ms=1000)
    m = s.map_table("m", UKEY, VAL, KEY)
    lst = s.list_table("l", VAL, KEY)
    for tbl in (v, t):
        tbl.update(("a",), (1, "x"))  # the key is known (a view), then written as a list
        tbl.update(["a"], (2, "y"))
        tbl.update(["b"], (3, "z"))
    m.update(("a",), ("i",), (1, "x"))
    m.update(["a"], ["i"], (2, "y"))
    m.update(["b"], ["j"], (3, "z"))
    lst.append(("a",), (1, "x"))
    lst.append(["a"], (2, "y"))
    lst.extend(["b"], [(3, "z")])
    s = to_tier(s, tier, 0)
    v, t, m, lst = s.table("v"), s.table("t"), s.table("m"), s.table("l")
    for tbl in (v, t):
        assert tbl.get(["a"]) == tbl.get(("a",)) == (2, "y")
        assert tbl.get(["b"]) == (3, "z") and tbl.get(["c"]) is None
    assert m.get(["a"], ["i"]) == (2, "y") and m.contains(["b"], ["j"])
    assert m.get(["a"], ["zz"]) is None and list(m.items(["b"])) == [(("j",), (3, "z"))]
    assert lst.get(["a"]) == [(1, "x"), (2, "y")] and lst.get(["b"]) == [(3, "z")]
    v.clear(["a"])
    assert v.get(("a",)) is None
    junk: list[Any] = [{"a"}, {"a": 1}, ["a", "b"], [["a"]]]
    calls: list[Callable[[Any], Any]] = [
        v.get,
        lambda k: v.update(k, (1, "x")),
        lambda k: t.update(k, (1, "x")),
        v.clear,
        lst.get,
        lambda k: lst.append(k, (1, "x")),
        lambda k: m.get(k, ("i",)),
        lambda k: m.get(("a",), k),
        lambda k: m.update(("a",), k, (1, "x")),
    ]
    for bad in junk:
        for call in calls:
            with pytest.raises(SchemaError):
                call(bad)
    assert v.get(("b",)) == (3, "z") and m.get(("a",), ("i",)) == (2, "y")
