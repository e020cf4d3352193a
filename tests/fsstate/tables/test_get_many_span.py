"""get_many over runs on disk reads only the row groups whose key bounds overlap the span of
the requested keys (:func:`fsstate.tables.batched.key_span`), and answers as point reads do:
composite keys with nulls and NaN, absent keys, keys at the edges of row groups, shadowed and
deleted rows in newer runs."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.config import EngineConfig
from fsstate.controller import MemoryController
from fsstate.tables.batched import key_span

KEY = pa.schema(
    [pa.field("p", pa.int64()), pa.field("x", pa.float64()), pa.field("s", pa.string())]
)
VAL = pa.schema([pa.field("n", pa.int64()), pa.field("pad", pa.string())])
PAD = "x" * 1024  # files too large to be read whole under the small cache below


def _open(root: Path, version: int | None, ctl: MemoryController) -> PartitionStore:
    cfg = StoreConfig(row_group_rows=40, row_group_bytes=16 * 1024)
    store = PartitionStore.open(str(root), "op", 0, version, cfg)
    store.controller.unregister(store)  # a private controller: a 1 MiB budget, no thread
    store.controller = ctl
    store.ctx.cache = ctl.cache
    ctl.register(store)
    return store


def _keys(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(KEY)], schema=KEY)


def _norm(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """NaN compares unequal to itself: a stand-in for comparing keys."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in key)


def test_key_span_is_the_stored_order() -> None:
    rows = [(2, 1.0, "b"), (1, None, "a"), (1, math.nan, "z"), (1, 0.5, None), (2, 1.0, None)]
    first, last = key_span(_keys(rows).columns)
    assert first == (1, 0.5, None)
    assert last == (2, 1.0, None)
    assert key_span([pa.array([], pa.int64())]) == (None, None)


@pytest.mark.parametrize("seed", [1, 2])
def test_get_many_on_disk_reads_the_span_only(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    ctl = MemoryController(
        EngineConfig(memory_limit_bytes=1024 * 1024, background_compaction=False)
    )
    store = _open(tmp_path / "state", None, ctl)
    v = store.value_table("v", VAL, KEY)
    xs: list[float | None] = [0.0, 0.5, 1.5, None, math.nan]
    universe = [(p, x, s) for p in range(12) for x in xs for s in ("a", "b", None)]
    model: dict[tuple[Any, ...], int] = {}
    for version in range(1, 5):  # four runs on disk, newer ones shadowing and deleting
        chosen = rng.sample(universe, 90)
        ns = [version * 1000 + i for i in range(90)]
        v.put_many(_keys(chosen), pa.table({"n": ns, "pad": [PAD] * 90}))
        for k, n in zip(chosen, ns):
            model[_norm(k)] = n
        gone = rng.sample(chosen, 10)
        v.delete_many(_keys(gone))
        for k in gone:
            model.pop(_norm(k), None)
        store.commit(version)
    store.close()
    reopened = _open(tmp_path / "state", 4, ctl)
    v = reopened.table("v")
    assert len(v.runs) >= 2 and not any(r.in_memory for r in v.runs)
    groups = sum(r._disk_run(v.ctx).num_row_groups for r in v.runs)  # type: ignore[attr-defined]
    assert groups > 2 * len(v.runs)
    # a narrow span (two values of p) with keys present, deleted and never written
    probe = [k for k in universe if k[0] in (5, 6)] + [(5, 9.0, "q"), (6, None, None)]
    rng.shuffle(probe)
    cache = v.ctx.cache
    misses0 = cache.misses
    got = v.get_many(_keys(probe))
    read = cache.misses - misses0
    want = [model.get(_norm(k)) for k in probe]
    found = got.column("_found").to_pylist()
    values = got.column("n").to_pylist()
    assert [n if ok else None for ok, n in zip(found, values)] == want
    assert all(x == PAD for x, ok in zip(got.column("pad").to_pylist(), found) if ok)
    # point reads agree, on keys holding NaN too (every NaN is one key, as in Arrow's join)
    point = [v.get(k) for k in probe]
    assert [None if r is None else r[0] for r in point] == want
    assert 0 < read < groups / 2, (read, groups)
    reopened.close()
