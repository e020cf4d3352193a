"""Timers on the engine against a dict model, across commits and reopens (seeded)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from fsstate import PartitionStore
from fsstate.errors import ConfigError
from fsstate_spark.state.timers import Timers, check_state_name

KEY = pa.schema([pa.field("k", pa.string()), pa.field("n", pa.int64())])


def test_register_list_delete_fire_in_order(tmp_path: Path) -> None:
    store = PartitionStore.open(str(tmp_path), "op", 0, None)
    t = Timers(store, KEY)
    t.register(("a", 1), 300)
    t.register(("a", 1), 100)
    t.register(("b", 2), 100)
    t.register(("a", 1), 100)  # again: one timer
    t.register(("c", None), 50)
    assert list(t.listed(("a", 1))) == [300, 100]  # Spark's order: low byte first
    t.delete(("c", None), 50)
    assert t.due(100) == [(("a", 1), 100), (("b", 2), 100)]
    assert t.due(100) == []  # taken out of the index
    t.delete(("a", 1), 100)
    t.delete(("b", 2), 100)
    store.commit(0)
    store.close()
    store = PartitionStore.open(str(tmp_path), "op", 0, 0)
    t = Timers(store, KEY)
    assert list(t.listed(("a", 1))) == [300]
    t.register(("d", 4), 10)  # below the purge point: due at the next call
    assert t.due(200) == [(("d", 4), 10)]
    assert t.due(1000) == [(("a", 1), 300)]
    store.close()


def test_reserved_names() -> None:
    check_state_name("count")
    with pytest.raises(ConfigError, match="_fsstate_"):
        check_state_name("_fsstate_timers")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_against_a_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    model: dict[tuple[str, int], set[int]] = {}
    store = PartitionStore.open(str(tmp_path), "op", 0, None)
    fired_upto = -1
    version = -1
    for step in range(150):
        t = Timers(store, KEY)
        for _ in range(rng.randint(0, 12)):
            key = (rng.choice("abcd"), rng.randint(0, 2))
            ts = rng.randint(0, 200)
            if rng.random() < 0.7:
                t.register(key, ts)
                model.setdefault(key, set()).add(ts)
            else:
                t.delete(key, ts)
                model.get(key, set()).discard(ts)
            want = sorted(model.get(key, set()), key=lambda ts: ts.to_bytes(8, "little"))
            assert list(t.listed(key)) == want, f"seed {seed} step {step}"
        if rng.random() < 0.3:
            through = rng.randint(max(fired_upto, 0), 220)
            fired_upto = max(fired_upto, through)
            want = sorted(
                ((ts, key) for key, tss in model.items() for ts in tss if ts <= through),
            )
            got = t.due(through)
            assert sorted((ts, k) for k, ts in got) == want, f"seed {seed} step {step}"
            assert [ts for _, ts in got] == sorted(ts for _, ts in got), f"seed {seed}"
            for k, ts in got:
                t.delete(k, ts)
                model[k].discard(ts)
        t.flush()
        if rng.random() < 0.3:
            version += 1
            store.commit(version)
            if rng.random() < 0.5:
                store.close()
                store = PartitionStore.open(str(tmp_path), "op", 0, version)
    store.close()
