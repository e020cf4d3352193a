"""Whole loads of a table's views (:mod:`fsstate.tables.warmup`): a small table is loaded whole
on its first cold miss, and again on the first cold miss after the memory budget evicted its
views; what it reads equals a point lookup's answer every time."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from fsstate import PartitionStore, StoreConfig

VAL = pa.schema([pa.field("n", pa.int64())])
KEY = pa.schema([pa.field("k", pa.string())])
KEYS = [(f"k{i:04d}",) for i in range(500)]


def _store(root: Path) -> PartitionStore:
    return PartitionStore.open(str(root), "op", 0, config=StoreConfig())


def test_a_table_whose_views_were_evicted_loads_whole_again_on_its_next_cold_miss(
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
    assert table.get(("absent",)) is None
