"""Batched and ordered reads against a reference model: range scans (prefix and open bounds,
reverse, limit), prefix lookups, vectorized get_many and delete_many, a map's ordered entries,
under seeded random sequences of batched and per-key writes, range deletes, commits, spills,
compactions and reopens (the seed is printed on failure)."""

from __future__ import annotations

import random
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.errors import KeyArityError, SchemaError
from fsstate.format.keyorder import sort_key
from fsstate.format.tombstones import in_range
from fsstate.storage import runs
from fsstate.tables import scan

KEY = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string())])
VAL = pa.schema([pa.field("x", pa.int64())])
GKEY = pa.schema([pa.field("g", pa.int64())])
UKEY = pa.schema([pa.field("u", pa.int64())])


def _keys_table(keys: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table({"a": pa.array([k[0] for k in keys], pa.int64()), "b": [k[1] for k in keys]})


def _rand_key(rng: random.Random) -> tuple[Any, ...]:
    b = rng.choice(["p", "q", "r", "s", None])
    return (rng.randrange(12), b)


def _rand_bound(rng: random.Random) -> tuple[Any, ...] | None:
    r = rng.random()
    if r < 0.25:
        return None
    if r < 0.7:
        return (rng.randrange(13),)
    return (rng.randrange(13), rng.choice(["p", "q", "r", "s"]))


# what _World.step picks from (a name twice: picked twice as often)
_OPS = [
    "put_many",
    "put_many",
    "delete_many",
    "update",
    "clear",
    "range",
    "map_put",
    "map_put",
    "map_del",
    "map_update",
    "map_clear",
    "map_range",
    "commit",
    "spill",
    "compact",
    "reopen",
]


class _World:
    """A store under test with a value table and a map table, and their reference models."""

    def __init__(self, root: Path, rng: random.Random, config: StoreConfig) -> None:
        self.root, self.rng, self.config = root, rng, config
        self.version = 0
        self.store = PartitionStore.open(str(root), "op", 0, None, config)
        self.declare()
        self.values: dict[tuple[Any, ...], int] = {}
        self.maps: dict[int, dict[int, int]] = {}
        self.cut_scans = 0  # chunked scans that came out in more than one piece
        self.cut_map_scans = 0  # the same over the map table (several rows per key)

    def declare(self) -> None:
        self.v = self.store.value_table("v", VAL, key_schema=KEY)
        self.m = self.store.map_table("m", UKEY, VAL, key_schema=GKEY)

    # -- writes ----------------------------------------------------------------------------
    def step(self) -> str:
        """One random operation, on the store and on the model: its name."""
        op = self.rng.choice(_OPS)
        if op.startswith("map_"):
            self._map_write(op)
        elif op in ("commit", "spill", "compact", "reopen"):
            self._store_step(op)
        else:
            self._value_write(op)
        return op

    def _value_write(self, op: str) -> None:
        rng = self.rng
        if op == "put_many":
            keys = [_rand_key(rng) for _ in range(rng.randrange(1, 30))]
            vals = [rng.randrange(1000) for _ in keys]
            self.v.put_many(_keys_table(keys), pa.table({"x": pa.array(vals, pa.int64())}))
            for k, x in zip(keys, vals):
                self.values[k] = x
        elif op == "delete_many":
            keys = [_rand_key(rng) for _ in range(rng.randrange(1, 10))]
            self.v.delete_many(_keys_table(keys))
            for k in keys:
                self.values.pop(k, None)
        elif op == "update":
            k, x = _rand_key(rng), rng.randrange(1000)
            self.v.update(k, (x,))
            self.values[k] = x
        elif op == "clear":
            k = _rand_key(rng)
            self.v.clear(k)
            self.values.pop(k, None)
        elif op == "range":
            lo, hi = _rand_bound(rng), _rand_bound(rng)
            self.v.delete_range(lo, hi)
            self.values = {k: x for k, x in self.values.items() if not in_range(k, lo, hi)}

    def _map_write(self, op: str) -> None:
        rng = self.rng
        if op == "map_put":
            rows = [(rng.randrange(5), rng.randrange(20), rng.randrange(100)) for _ in range(25)]
            self.m.put_many(
                pa.table({"g": pa.array([r[0] for r in rows], pa.int64())}),
                pa.table({"u": pa.array([r[1] for r in rows], pa.int64())}),
                pa.table({"x": pa.array([r[2] for r in rows], pa.int64())}),
            )
            for g, u, x in rows:
                self.maps.setdefault(g, {})[u] = x
        elif op == "map_del":
            rows = [(rng.randrange(5), rng.randrange(20)) for _ in range(8)]
            self.m.delete_many(
                pa.table({"g": pa.array([r[0] for r in rows], pa.int64())}),
                pa.table({"u": pa.array([r[1] for r in rows], pa.int64())}),
            )
            for g, u in rows:
                self.maps.get(g, {}).pop(u, None)
        elif op == "map_update":
            g, u, x = rng.randrange(5), rng.randrange(20), rng.randrange(100)
            if rng.random() < 0.5:
                self.m.update((g,), (u,), (x,))
                self.maps.setdefault(g, {})[u] = x
            else:
                self.m.remove((g,), (u,))
                self.maps.get(g, {}).pop(u, None)
        elif op == "map_clear":
            g = rng.randrange(5)
            self.m.clear((g,))
            self.maps.pop(g, None)
        elif op == "map_range":
            lo = rng.choice([None, (rng.randrange(6),)])
            hi = rng.choice([None, (rng.randrange(6),)])
            self.m.delete_range(lo, hi)
            self.maps = {g: m for g, m in self.maps.items() if not in_range((g,), lo, hi)}

    def _store_step(self, op: str) -> None:
        st = self.store
        if op == "commit":
            self.version += 1
            st.commit(self.version)
        elif op == "spill":
            st.spill()
        elif op == "compact":
            st.compact(force=True)
        elif op == "reopen":
            self.version += 1
            st.commit(self.version)
            st.close()
            self.store = PartitionStore.open(str(self.root), "op", 0, self.version, self.config)
            self.declare()

    # -- checks ----------------------------------------------------------------------------
    def check(self, where: str) -> None:
        rng = self.rng
        lo, hi = _rand_bound(rng), _rand_bound(rng)
        reverse = rng.random() < 0.5
        limit = rng.choice([None, 1, 3, 10])
        self._check_scan(where, lo, hi, reverse, limit)
        self._check_chunks(where, lo, hi)
        self._check_lookups(where)
        self._check_map_reads(where, reverse, limit)

    def _check_scan(self, where: str, lo: Any, hi: Any, reverse: bool, limit: int | None) -> None:
        want = sorted(
            (k for k in self.values if in_range(k, lo, hi)), key=sort_key, reverse=reverse
        )
        if limit is not None:
            want = want[:limit]
        got = self.v.scan(lo, hi, reverse=reverse, limit=limit)
        got_rows = list(zip(got.column("a").to_pylist(), got.column("b").to_pylist()))
        assert got_rows == want, f"{where}: scan({lo}, {hi}, {reverse}, {limit})"
        assert got.column("x").to_pylist() == [self.values[k] for k in want], where

    def _check_chunks(self, where: str, lo: Any, hi: Any) -> None:
        rng = self.rng
        chunk_bytes = rng.choice([1, 200, 10**9])
        pieces = list(self.v.scan_chunks(lo, hi, chunk_bytes=chunk_bytes))
        self.cut_scans += len(pieces) > 1
        assert all(p.num_rows for p in pieces), where
        whole = sorted((k for k in self.values if in_range(k, lo, hi)), key=sort_key)
        got_rows = [
            (a, b, x)
            for p in pieces
            for a, b, x in zip(p["a"].to_pylist(), p["b"].to_pylist(), p["x"].to_pylist())
        ]
        want_rows = [(*k, self.values[k]) for k in whole]
        assert got_rows == want_rows, f"{where}: scan_chunks({lo}, {hi}, {chunk_bytes})"
        # a map's pieces hold whole keys (every entry of a grouping key in one piece) and
        # carry the opt-in columns as scan does
        with_seq = rng.random() < 0.5
        mpieces = list(self.m.scan_chunks(chunk_bytes=chunk_bytes, with_seq=with_seq))
        self.cut_map_scans += len(mpieces) > 1
        whole_m = self.m.scan(with_seq=with_seq).to_pylist()
        assert [r for p in mpieces for r in p.to_pylist()] == whole_m, f"{where}: map pieces"
        assert len({p["g"][0].as_py() for p in mpieces}) == len(mpieces), where
        assert all(p["g"][0] != q["g"][-1] for q, p in pairwise(mpieces)), where

    def _check_lookups(self, where: str) -> None:
        rng = self.rng
        keys = [_rand_key(rng) for _ in range(rng.randrange(1, 40))]
        res = self.v.get_many(_keys_table(keys))
        assert res.column("_found").to_pylist() == [k in self.values for k in keys], where
        assert res.column("x").to_pylist() == [self.values.get(k) for k in keys], where

        prefixes = sorted({rng.randrange(13) for _ in range(3)})
        got = self.v.scan_prefixes(pa.table({"a": pa.array(prefixes, pa.int64())}))
        want = sorted((k for k in self.values if k[0] in prefixes), key=sort_key)
        assert list(zip(got.column("a").to_pylist(), got.column("b").to_pylist())) == want, where

    def _check_map_reads(self, where: str, reverse: bool, limit: int | None) -> None:
        rng = self.rng
        g = rng.randrange(6)
        ulo = rng.choice([None, rng.randrange(21)])
        uhi = rng.choice([None, rng.randrange(21)])
        entries = self.maps.get(g, {})
        want_u = sorted(
            (u for u in entries if (ulo is None or u >= ulo) and (uhi is None or u < uhi)),
            reverse=reverse,
        )
        if limit is not None:
            want_u = want_u[:limit]
        got = self.m.entries((g,), ulo, uhi, reverse=reverse, limit=limit)
        assert got.column("u").to_pylist() == want_u, f"{where}: entries({g}, {ulo}, {uhi})"
        assert got.column("x").to_pylist() == [entries[u] for u in want_u], where

        pairs = [(rng.randrange(6), rng.randrange(21)) for _ in range(30)]
        res = self.m.get_many(
            pa.table({"g": pa.array([p[0] for p in pairs], pa.int64())}),
            pa.table({"u": pa.array([p[1] for p in pairs], pa.int64())}),
        )
        want_x = [self.maps.get(g, {}).get(u) for g, u in pairs]
        assert res.column("x").to_pylist() == want_x, f"{where}: map get_many"


@pytest.mark.parametrize("seed", range(6))
def test_batched_reads_match_the_model(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # limited reads merge runs in chunks: tiny chunks make every read take several rounds
    monkeypatch.setattr(scan, "FIRST_CHUNK_ROWS", 1 + seed % 3)
    # chunked scans cut at row-group starts of files that are not read whole: make every file
    # one of those, in row groups of a few rows
    monkeypatch.setattr(runs, "WHOLE_FILE_BYTES_MAX", 0)
    rng = random.Random(seed)
    config = StoreConfig(retain_versions=3, row_group_bytes=1024)
    world = _World(tmp_path / "state", rng, config)
    ops: list[str] = []
    try:
        for i in range(150):
            ops.append(world.step())
            world.check(f"step {i} ({ops[-1]})")
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}, ops {ops[-12:]}: {exc}") from exc
    assert world.cut_scans, f"seed {seed}: no chunked scan was cut"
    assert world.cut_map_scans, f"seed {seed}: no chunked scan of the map was cut"


def test_bounds_are_checked(make_store: Callable[..., PartitionStore]) -> None:
    store = make_store()
    t = store.value_table("v", VAL, key_schema=KEY)
    with pytest.raises(KeyArityError, match=r"'v'.*key bound"):
        t.delete_range((1, "a", 3), None)
    with pytest.raises(KeyArityError, match="'v'"):
        t.scan((None,), None)
    with pytest.raises(SchemaError, match=r"'v'.*prefix"):
        t.scan_prefixes(pa.table({"a": [1], "b": ["x"], "c": [2]}))
    with pytest.raises(SchemaError, match="entries"):
        t.entries((1, "a"))
