"""TTL index behaviour of SPARK-50302 (seed 002): one-to-one and min-expiry one-to-many."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore
from fsstate.tables.ttl_index import TtlIndex
from tests.support.engine import KEY, VAL, to_tier
from tests.support.model import engine_rows_with_ttl

Factory = Callable[..., PartitionStore]
V1 = pa.schema([pa.field("v", pa.string())])


def test_seed_value_example(make_store: Factory) -> None:
    """foo updated at 100 and 200 with ttl 500: one index entry (700, foo); cleanup at 800."""
    s = make_store()
    s.set_time(100)
    t = s.value_table("foo_state", V1, KEY, ttl_ms=500)
    t.update(("foo",), ("v1",))
    assert t.ttl_index().entries() == [(600, ("foo",))]
    s.set_time(200)
    t.update(("foo",), ("v2",))
    assert t.ttl_index().entries() == [(700, ("foo",))]  # not [(600, foo), (700, foo)]
    s.set_time(800)
    before = t.ttl_index().lookups
    assert s.expire() == 1
    assert t.ttl_index().lookups - before == 1  # one lookup, no wasted second pass
    assert t.ttl_index().entries() == []
    assert t.get(("foo",)) is None


def test_seed_list_example(make_store: Factory) -> None:
    """list foo with expiries 600, 700, 900 indexed once at 600; cleanup at 800 leaves (900)."""
    s = make_store()
    t = s.list_table("foo_list", V1, KEY, ttl_ms=500)
    for now, v in ((100, "v1"), (200, "v2"), (400, "v3")):
        s.set_time(now)
        t.append(("foo",), (v,))
    assert t.ttl_index().entries() == [(600, ("foo",))]
    assert t.ttl_index().count(("foo",)) == 3
    s.set_time(800)
    before = t.ttl_index().lookups
    assert s.expire() == 2
    assert t.ttl_index().lookups - before == 1
    assert t.ttl_index().entries() == [(900, ("foo",))]
    assert t.ttl_index().count(("foo",)) == 1
    assert t.get(("foo",)) == [("v3",)]


def test_index_never_exceeds_primary(make_store: Factory) -> None:
    s = make_store()
    s.set_time(0)
    m = s.map_table("m", pa.schema([pa.field("u", pa.int64())]), VAL, KEY, ttl_ms=50)
    for step in range(200):
        s.set_time(step * 7)
        m.update((f"k{step % 5}",), (step % 3,), (step, "x"))
        if step % 11 == 0:
            m.remove((f"k{step % 5}",), (step % 3,))
        if step % 17 == 0:
            s.expire()
        assert len(m.ttl_index()) <= engine_rows_with_ttl(m)


def test_cleanup_cost_is_proportional_to_expired(make_store: Factory) -> None:
    s = make_store()
    s.set_time(0)
    t = s.value_table("v", VAL, KEY, ttl_ms=100)
    for i in range(1000):
        t.update((f"k{i}",), (i, "x"))
    s.set_time(50)
    for i in range(10):
        t.update((f"hot{i}",), (i, "y"))  # expire at 150
    s.set_time(120)
    before = t.ttl_index().lookups
    assert s.expire() == 1000
    assert t.ttl_index().lookups - before == 1000
    s.set_time(140)
    before = t.ttl_index().lookups
    assert s.expire() == 0
    assert t.ttl_index().lookups - before == 0  # nothing expired, nothing looked up


@pytest.mark.parametrize("tier", ["spilled", "reopened"])
def test_index_survives_snapshots(make_store: Factory, tier: str) -> None:
    s = make_store()
    s.set_time(100)
    t = s.list_table("foo_list", V1, KEY, ttl_ms=500)
    t.append(("foo",), ("v1",))
    s.set_time(400)
    t.append(("foo",), ("v3",))
    s = to_tier(s, tier, 0)
    t = s.table("foo_list")
    assert t.ttl_index().entries() == [(600, ("foo",))]
    s.set_time(800)
    assert s.expire() == 1
    s = to_tier(s, tier, 1)
    assert s.table("foo_list").ttl_index().entries() == [(900, ("foo",))]


def test_ttl_index_unit() -> None:
    idx = TtlIndex()
    idx.set("a", 10)
    idx.set("b", 10)
    idx.set("a", 20)
    idx.discard("b")
    assert idx.entries() == [(20, "a")] and len(idx) == 1
    assert idx.pop_expired(15) == []
    assert idx.pop_expired(20) == [(20, "a")]
    assert len(idx) == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lazy_buckets_match_a_dict_and_stay_bounded(seed: int) -> None:
    """Moves and removals leave stale bucket occurrences behind: cleanup must skip them (an
    entry moved away and back must expire once), the occurrences must stay within twice the
    live entries (rebuilds), and the change log must replay to the same index."""
    import random

    rng = random.Random(seed)
    idx, replica = TtlIndex(), TtlIndex()
    model: dict[str, int] = {}
    now = 0
    for step in range(20_000):
        r = rng.random()
        entry = f"e{rng.randrange(300)}"
        if r < 0.75:
            exp = now + rng.choice([5, 5, 5, 40, 41, 200])  # few distinct expiries: moves back
            idx.set(entry, exp)
            model[entry] = exp
        elif r < 0.9:
            idx.discard(entry)
            model.pop(entry, None)
        else:
            now += rng.randrange(1, 30)
            want = sorted((e, k) for k, e in model.items() if e <= now)
            got = idx.pop_expired(now)
            assert sorted(got) == want, f"seed {seed} step {step}"
            assert [e for e, _ in got] == sorted(e for e, _ in got), f"seed {seed} step {step}"
            for _, k in want:
                del model[k]
        if step % 97 == 0:  # a snapshot: the replica replays the change rows
            for op, exp, ent, count in idx.changes():
                replica.apply_row(op, exp, ent, count)
            idx.mark_snapshotted()
            assert sorted(replica.entries()) == sorted(idx.entries()), f"seed {seed} step {step}"
        occurrences = sum(len(b) for b in idx._buckets.values())
        assert occurrences <= 2 * len(model) + 1025, f"seed {seed} step {step}"
        assert sorted(idx.entries()) == sorted((e, k) for k, e in model.items()), step
    # entries flipping between two far expiries and never expiring: only rebuilds bound it
    for step in range(5_000):
        entry = f"e{step % 300}"
        exp = 10**9 + (step // 300) % 2
        idx.set(entry, exp)
        model[entry] = exp
        occurrences = sum(len(b) for b in idx._buckets.values())
        assert occurrences <= 2 * len(model) + 1025, f"seed {seed} flip {step}"
    assert sorted(idx.pop_expired(2 * 10**9)) == sorted((e, k) for k, e in model.items())
    assert len(idx) == 0 and not idx._buckets


@pytest.mark.parametrize("kind", ["value", "list", "map"])
def test_index_file_chain_stays_bounded(make_store: Factory, kind: str) -> None:
    """A TTL table committed every batch keeps at most INDEX_RUNS_MAX index files (the commit
    that would pass it writes the whole index instead), and every version's index, rebuilt from
    its files alone, equals the live one."""
    import random

    from fsstate.storage.manifest import read_manifest
    from fsstate.tables.ttl_index import INDEX_RUNS_MAX

    rng = random.Random(5)
    s = make_store()
    ukey = pa.schema([pa.field("u", pa.string())])

    def declare(store: PartitionStore) -> Any:
        if kind == "value":
            return store.value_table("t", VAL, KEY, ttl_ms=5_000)
        if kind == "list":
            return store.list_table("t", VAL, KEY, ttl_ms=5_000)
        return store.map_table("t", ukey, VAL, KEY, ttl_ms=5_000)

    t = declare(s)
    longest = 0
    for version in range(120):
        s.set_time(1_000 + 1_000 * version)
        for _ in range(rng.randint(1, 30)):
            k = (f"k{rng.randrange(300)}",)
            if kind == "value":
                t.update(k, (version, "x"))
            elif kind == "list":
                t.append(k, (version, "x"))
            else:
                t.update(k, (f"u{rng.randrange(3)}",), (version, "x"))
        s.expire()
        s.commit(version)
        runs = read_manifest(s.fileio, s.store_dir, version).tables["t"].ttl_runs
        longest = max(longest, len(runs))
        assert len(runs) <= INDEX_RUNS_MAX == 16
        if version % 17 == 0:
            again = PartitionStore.open(s.fileio, s.operator, s.partition, version, s.config)
            assert sorted(declare(again).ttl_index().entries()) == sorted(t.ttl_index().entries())
            again.close()
    assert longest > 2  # change files did chain up between whole-index files
