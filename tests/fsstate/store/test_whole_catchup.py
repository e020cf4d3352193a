"""Whole tables across catch-up: a table loaded whole (a small one, on its first cold miss)
answers a miss as empty without a lookup, and stays whole when it catches up to versions
another copy committed (the delta then brings every key's new rows, new keys included).

Two store objects of one partition play two Spark Python workers taking turns at random (as a
partition moves between workers); each turn refreshes its copy to the newest version, runs a
seeded mix of reads and writes over value (with TTL), list and map tables — new keys, clears,
removes, range deletes, batched writes — and commits. After every commit both copies (the idle
one refreshed), and a store freshly opened at the version, read every key alike, equal to a
plain-dict reference; the version's recorded ``rows_total`` is the rows a full read counts.
The whole-table path must be taken: the copies' tables are whole after most refreshes.

Reproduce a failure with ``FSSTATE_SEED=<seed> pytest tests/fsstate/store/test_whole_catchup.py``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.storage.manifest import read_summary
from tests.support.engine import KEY, UKEY, VAL

ELEM = pa.schema([pa.field("x", pa.int64())])
TTL_MS = 3_000
STEP_MS = 1_000
EPOCHS = 40
UNIVERSE = [f"u{i:03d}" for i in range(120)]


def _tables(store: PartitionStore) -> tuple[Any, Any, Any]:
    return (
        store.value_table("v", VAL, KEY, ttl_ms=TTL_MS),
        store.list_table("l", ELEM, KEY),
        store.map_table("m", UKEY, VAL, KEY),
    )


def _read(store: PartitionStore, users: list[str] = UNIVERSE) -> dict[str, Any]:
    v, lst, m = _tables(store)
    return {u: (v.get((u,)), lst.get((u,)), list(m.items((u,)))) for u in users}


class Reference:
    """What each key holds: value (with its expiry), list, map."""

    def __init__(self) -> None:
        self.v: dict[str, tuple[tuple[Any, ...], int]] = {}
        self.l: dict[str, list[tuple[int]]] = {}
        self.m: dict[str, dict[tuple[str], tuple[Any, ...]]] = {}

    def read(self, now: int) -> dict[str, Any]:
        out = {}
        for u in UNIVERSE:
            val = self.v.get(u)
            live = val[0] if val is not None and val[1] > now else None
            out[u] = (live, list(self.l.get(u, [])), sorted(self.m.get(u, {}).items()))
        return out

    def rows(self, now: int) -> int:
        """Live rows as a version summary counts them (expired rows not removed included)."""
        del now
        return len(self.v) + sum(map(len, self.l.values())) + sum(map(len, self.m.values()))


def _turn(store: PartitionStore, ref: Reference, rng: random.Random, now: int) -> None:
    v, lst, m = _tables(store)
    for _ in range(rng.randint(10, 40)):
        u = rng.choice(UNIVERSE[: rng.choice([40, 80, 120])])  # new keys now and then
        k, r = (u,), rng.random()
        if r < 0.2:
            assert v.get(k) == ref.read(now)[u][0]
            val = (rng.randrange(1000), f"s{rng.randrange(9)}")
            v.update(k, val)
            ref.v[u] = (val, now + TTL_MS)
        elif r < 0.27:
            v.clear(k)
            ref.v.pop(u, None)
        elif r < 0.45:
            lst.append(k, (rng.randrange(100),))
            ref.l.setdefault(u, []).append(lst.get(k)[-1])
        elif r < 0.5:
            lst.clear(k)
            ref.l.pop(u, None)
        elif r < 0.75:
            item = (f"i{rng.randrange(4)}",)
            val = (rng.randrange(1000), None)
            m.update(k, item, val)
            ref.m.setdefault(u, {})[item] = val
        elif r < 0.85:
            item = (f"i{rng.randrange(4)}",)
            m.remove(k, item)
            ref.m.get(u, {}).pop(item, None)
            if u in ref.m and not ref.m[u]:
                del ref.m[u]
        elif r < 0.9:  # a batched write: the table is no longer whole until loaded again
            us = rng.sample(UNIVERSE, 5)
            vals = [(rng.randrange(1000), "b") for _ in us]
            v.put_many(
                pa.table({"user": us}),
                pa.table({"count": [x[0] for x in vals], "label": [x[1] for x in vals]}),
            )
            for uu, val in zip(us, vals, strict=True):
                ref.v[uu] = (val, now + TTL_MS)
        elif r < 0.93:
            lo, hi = sorted(rng.sample(UNIVERSE, 2))
            m.delete_range((lo,), (hi,))
            for uu in [x for x in ref.m if lo <= x < hi]:
                del ref.m[uu]
        else:
            assert m.get(k, ("i0",)) == ref.m.get(u, {}).get(("i0",))
    removed = v.expire()  # TTL cleanup, as a batch's end runs it
    for u in [u for u, (_, exp) in ref.v.items() if exp <= now]:
        del ref.v[u]
    assert removed >= 0


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_copies_taking_turns_stay_whole_and_read_as_the_reference(
    tmp_path: Path, seed: int
) -> None:
    seed = int(os.environ.get("FSSTATE_SEED", seed))
    rng = random.Random(seed)
    root = str(tmp_path / "state")
    cfg = StoreConfig(fsync=False)
    copies: list[PartitionStore | None] = [None, None]
    ref = Reference()
    whole_after_refresh = 0
    for epoch in range(EPOCHS):
        now = epoch * STEP_MS
        w = rng.randrange(2)
        store = copies[w]
        refreshed = store is not None and epoch > 0 and store.refresh(epoch - 1)
        if not refreshed:
            store = copies[w] = PartitionStore.open(root, "op", 0, config=cfg)
        assert store is not None
        store.set_time(now)
        if refreshed and all(t.complete for t in _tables(store)):
            whole_after_refresh += 1
        _turn(store, ref, rng, now)
        store.commit(epoch)
        want = ref.read(now)
        msg = f"seed={seed} epoch={epoch} writer={w}"
        # the copies read a few keys (a read makes a view: reading all would leave no key
        # without one), a fresh store reads every key
        some = rng.sample(UNIVERSE, 8)
        assert _read(store, some) == {u: want[u] for u in some}, msg
        other = copies[1 - w]
        if other is not None and rng.random() < 0.3 and other.refresh(epoch):
            other.set_time(now)
            assert _read(other, some) == {u: want[u] for u in some}, msg + " (the other copy)"
        fresh = PartitionStore.open(root, "op", 0, epoch, cfg)
        fresh.set_time(now)
        assert _read(fresh) == want, msg + " (opened fresh)"
        fresh.close()
        summary = read_summary(store.fileio, store.store_dir, epoch)
        assert summary is not None and summary.rows_total == ref.rows(now), msg
    # the whole-table path was taken: most refreshed copies had every table whole
    assert whole_after_refresh >= EPOCHS // 4, f"seed={seed}: whole {whole_after_refresh} times"
