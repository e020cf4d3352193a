"""Whole loads of a table's views (:mod:`fsstate.tables.warmup`): a small table is loaded whole
on its first cold miss, and after the memory budget evicted its views again on its first cold
miss at a later version, but not twice in one version; a value table whose newest run holds
every live key loads that run only; what it reads equals a point lookup's answer every time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.storage.runs import Run

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
        # every key was rewritten: its newest run alone gave every key its view
        assert len(table._views) == len(KEYS), f"epoch {epoch}: not loaded after the eviction"
        assert [table.get(k) for k in KEYS] == [(i + epoch - 1,) for i in range(len(KEYS))]
    store.spill()  # evicted again in the same version: point lookups, no second whole load
    assert table.get(KEYS[5]) == (7,)
    assert not table.complete and len(table._views) == 1
    assert table.get(("absent",)) is None


def _rewrite_all(root: Path, versions: int, deleted: tuple[int, ...] = ()) -> None:
    """Commit ``versions`` versions, each writing every key still live (``deleted`` keys are
    deleted in version 2 and never written again)."""
    store = _store(root)
    table = store.value_table("agg", VAL, KEY)
    for v in range(1, versions + 1):
        for i, k in enumerate(KEYS):
            if v >= 2 and i in deleted:
                if v == 2:
                    table.clear(k)
                continue
            table.update(k, (i * 100 + v,))
        store.commit(v)
    store.close()


def test_a_reopened_table_whose_newest_run_holds_every_live_key_reads_that_run_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted = (3, 250)
    _rewrite_all(tmp_path, 5, deleted)  # five runs, each of every live key: below compaction
    store = _store(tmp_path)
    table = store.value_table("agg", VAL, KEY)
    assert len(table.runs) == 5
    read: list[Run] = []
    segments = Run.segments

    def counted(run: Run, *args: Any) -> Any:
        read.append(run)
        return segments(run, *args)

    monkeypatch.setattr(Run, "segments", counted)
    assert table.get(KEYS[7]) == (705,)
    assert read == [table.runs[-1]], "the older runs were read too"
    monkeypatch.undo()
    assert not table.complete  # keys without a view still take a point lookup
    want = [None if i in deleted else (i * 100 + 5,) for i in range(len(KEYS))]
    assert [table.get(k) for k in KEYS] == want  # the deleted keys: their tombstones, older runs
    assert table.get(("never",)) is None
    store.close()


def test_a_newest_run_without_every_live_key_loads_every_run(tmp_path: Path) -> None:
    _rewrite_all(tmp_path, 3)
    store = _store(tmp_path)
    table = store.value_table("agg", VAL, KEY)
    for i, k in enumerate(KEYS[:10]):  # version 4 rewrites ten keys only, deletes one
        table.update(k, (i * 100 + 4,))
    table.clear(KEYS[20])
    store.commit(4)
    store.close()

    store = _store(tmp_path)
    table = store.value_table("agg", VAL, KEY)
    assert table.get(KEYS[400]) == (40003,)
    assert table.complete  # loaded whole: every run read
    assert [table.get(k) for k in KEYS] == [
        None if i == 20 else (i * 100 + (4 if i < 10 else 3),) for i in range(len(KEYS))
    ]
    store.close()
