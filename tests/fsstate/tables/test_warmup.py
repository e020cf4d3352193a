"""Whole loads of a table's views (:mod:`fsstate.tables.warmup`): a small table is loaded whole
on its first cold miss, and after the memory budget evicted its views again on its first cold
miss at a later version, but not twice in one version; what it reads equals a point lookup's
answer every time."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from fsstate import PartitionStore, StoreConfig

VAL = pa.schema([pa.field("n", pa.int64())])
KEY = pa.schema([pa.field("k", pa.string())])
KEYS = [(f"k{i:04d}",) for i in range(500)]


def _store(root: Path) -> PartitionStore:
    return PartitionStore.open(str(root), "op", 0, config=StoreConfig())


def test_a_table_whose_views_were_evicted_loads_whole_again_once_per_version(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    table = store.value_table("agg", VAL, KEY)
    for i, k in enumerate(KEYS):
        table.update(k, (i,))
    store.commit(1)
    store.close()

    store = _store(tmp_path)  # restored: no views
    table = store.value_table("agg", VAL, KEY)
    assert table.get(KEYS[7]) == (7,)
    assert table.complete  # the first cold miss loaded it whole
    for epoch in (2, 3):
        for k in KEYS:
            old = table.get(k)
            assert old is not None
            table.update(k, (old[0] + 1,))
        store.commit(epoch)
        store.spill()  # the budget's reclaim: clean views evicted
        assert not table.complete and not table._views
        assert table.get(KEYS[3]) == (3 + epoch - 1,)
        assert table.complete, f"epoch {epoch}: not loaded whole after the eviction"
        assert [table.get(k) for k in KEYS] == [(i + epoch - 1,) for i in range(len(KEYS))]
    store.spill()  # evicted again in the same version: point lookups, no second whole load
    assert table.get(KEYS[5]) == (7,)
    assert not table.complete and len(table._views) == 1
    assert table.get(("absent",)) is None
