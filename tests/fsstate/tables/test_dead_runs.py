"""Runs a range tombstone hides entirely are dropped at commit, unread, and compaction is bounded
by read depth (the most runs one key may be in), not by the number of runs.

Time-prefixed state (window panes keyed by their start, deleted a closed window at a time by
``delete_range(None, (cutoff,))``) writes runs of disjoint first-field spans: those runs need no
merging, and once their window closes they are dropped whole. Every test compares reads with
what was written, before and after the drop, after a reopen from storage and after a catch-up.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.config import EngineConfig
from fsstate.controller import MemoryController
from fsstate.format.tombstones import RangeTombstones
from fsstate.storage.depth import RUNS_PER_DEPTH_MAX, read_depth
from fsstate.storage.manifest import read_manifest

PANE_KEY = pa.schema([pa.field("start", pa.int64()), pa.field("k", pa.string())])
FLOAT_KEY = pa.schema([pa.field("start", pa.float64()), pa.field("k", pa.string())])
COUNT = pa.schema([pa.field("n", pa.int64())])


def _open(root: Path, version: int | None = None) -> PartitionStore:
    """The store on a private controller without the background compactor: run lists change
    only where a test says."""
    store = PartitionStore.open(str(root), "op", 0, version, StoreConfig())
    ctl = MemoryController(EngineConfig(background_compaction=False))
    store.controller.unregister(store)
    store.controller = ctl
    store.ctx.cache = ctl.cache
    ctl.register(store)
    return store


def _panes(store: PartitionStore, starts: range, keys: int = 5) -> dict[tuple[int, str], int]:
    """One version per window start: ``keys`` panes of that start (one run each)."""
    t = store.value_table("panes", COUNT, PANE_KEY)
    written: dict[tuple[int, str], int] = {}
    for start in starts:
        for i in range(keys):
            key = (start, f"k{i}")
            t.update(key, (start * 10 + i,))
            written[key] = start * 10 + i
        store.commit(start)
    return written


def _reads(store: PartitionStore, keys: list[tuple[int, str]]) -> dict[tuple[int, str], object]:
    t = store.value_table("panes", COUNT, PANE_KEY)
    t.evict_clean()  # read from the runs, not the views
    return {k: (None if (v := t.get(k)) is None else v[0]) for k in keys}


def test_hides_span_needs_one_newer_single_field_tombstone_over_the_whole_span() -> None:
    r = RangeTombstones([(None, (10,), 5)])
    assert r.hides_span(0, 9, 4)
    assert not r.hides_span(0, 10, 4)  # the bound is exclusive
    assert not r.hides_span(0, 9, 5)  # not newer than the run's newest row
    assert RangeTombstones([((3,), (10,), 5)]).hides_span(3, 9, 1)
    assert not RangeTombstones([((3,), (10,), 5)]).hides_span(2, 9, 1)
    # two tombstones that together cover the span do not count: each must cover it alone
    assert not RangeTombstones([(None, (5,), 9), ((5,), (10,), 9)]).hides_span(0, 9, 1)
    # a two-field bound is never used (a null or NaN later field compares unlike stored order)
    assert not RangeTombstones([(None, (10, "a"), 9)]).hides_span(0, 5, 1)
    assert not RangeTombstones([(None, ("x",), 9)]).hides_span(0, 5, 1)  # does not compare


def test_closed_windows_runs_are_dropped_at_commit_and_reads_do_not_change(
    tmp_path: Path,
) -> None:
    root = tmp_path / "state"
    s = _open(root)
    written = _panes(s, range(6))
    t = s.value_table("panes", COUNT, PANE_KEY)
    assert len(t.runs) == 6 and read_depth(t.runs) == 1
    s.value_table("panes", COUNT, PANE_KEY).delete_range(None, (3,))  # windows 0-2 close
    s.commit(6)
    assert s.stats().dead_runs_dropped == 3
    assert len(t.runs) == 3
    manifest = read_manifest(s.fileio, s.store_dir, 6)
    assert len(manifest.tables["panes"].runs) == 3
    want = {k: (None if k[0] < 3 else v) for k, v in written.items()}
    assert _reads(s, list(written)) == want
    assert _reads(_open(root, 6), list(written)) == want
    old = _open(root, 5)  # a copy from before the delete catches up across the drop
    assert _reads(old, list(written)) == {k: v for k, v in written.items()}
    assert old.refresh(6)
    assert _reads(old, list(written)) == want
    s.close()
    old.close()


def test_a_run_with_rows_newer_than_the_tombstone_stays(tmp_path: Path) -> None:
    s = _open(tmp_path / "state")
    written = _panes(s, range(3))
    t = s.value_table("panes", COUNT, PANE_KEY)
    t.delete_range(None, (2,))
    t.update((1, "late"), (99,))  # written after the delete, in its range: a live row
    s.commit(3)
    assert s.stats().dead_runs_dropped == 2  # the runs of windows 0 and 1, not the new one
    want = {k: (None if k[0] < 2 else v) for k, v in written.items()}
    assert _reads(s, [*written, (1, "late")]) == {**want, (1, "late"): 99}
    s.commit(4)  # the next commit keeps the run that holds the late row
    assert s.stats().dead_runs_dropped == 2
    assert _reads(s, [*written, (1, "late")]) == {**want, (1, "late"): 99}
    s.close()


def test_runs_whose_lead_field_is_null_or_nan_are_never_dropped(tmp_path: Path) -> None:
    s = _open(tmp_path / "state")
    t = s.value_table("panes", COUNT, FLOAT_KEY)
    t.update((float("nan"), "a"), (1,))
    s.commit(0)
    t.update((None, "b"), (2,))
    s.commit(1)
    t.update((1.0, "c"), (3,))
    s.commit(2)
    t.update((2.0, "d"), (4,))
    t.update((float("nan"), "e"), (5,))  # one run: a value first, NaN last
    s.commit(3)
    t.delete_range(None, (5.0,))
    s.commit(4)
    assert s.stats().dead_runs_dropped == 1  # only the run of (1.0, "c")
    assert t.get((2.0, "d")) is None
    assert t.get((float("nan"), "e")) == (5,)
    t.evict_clean()
    assert t.get((float("nan"), "a")) == (1,)  # NaN and null keys are never in a range
    assert t.get((None, "b")) == (2,)
    assert t.get((1.0, "c")) is None
    s.close()


def test_disjoint_runs_are_not_compacted_until_many(tmp_path: Path) -> None:
    """Read depth, not the run count, queues compaction: runs of disjoint spans stay apart
    until there are ``RUNS_PER_DEPTH_MAX`` times ``compaction_max_runs`` of them, while runs
    that share keys are merged past ``compaction_max_runs``."""
    from fsstate.storage.depth import needs_merge

    s = _open(tmp_path / "state")
    _panes(s, range(12))
    t = s.value_table("panes", COUNT, PANE_KEY)
    assert read_depth(t.runs) == 1
    assert not needs_merge(t.runs, 8)
    assert needs_merge(t.runs, 12 // RUNS_PER_DEPTH_MAX - 1)  # past the cap on all runs
    for version in range(12, 22):  # ten runs that all hold window 0's key k0
        t.update((0, "k0"), (version,))
        s.commit(version)
    assert read_depth(t.runs) == 11
    assert needs_merge(t.runs, 8)
    s.close()


@pytest.mark.parametrize("reopen", [False, True])
def test_depth_counts_runs_of_unknown_span(tmp_path: Path, reopen: bool) -> None:
    """A run opened from storage has no known span until its footer is read: it counts as
    overlapping every key, so compaction never skips a table it knows nothing about."""
    root = tmp_path / "state"
    s = _open(root)
    _panes(s, range(4))
    if reopen:
        s.close()
        s = _open(root, 3)
    t = s.value_table("panes", COUNT, PANE_KEY)
    assert read_depth(t.runs) == (4 if reopen else 1)
    s.close()
