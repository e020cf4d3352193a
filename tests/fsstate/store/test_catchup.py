"""Catch-up: a clean copy of an older version advanced in place to a newer committed version.

Two store objects of one partition play two Spark Python workers: each commits some versions,
the other catches up with :meth:`PartitionStore.refresh`. After every refresh the copy must
read exactly what a store freshly opened at that version reads; refresh must refuse copies
whose history diverged, and never resurrect deleted rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.errors import CommitConflictError
from fsstate.storage.manifest import LINEAGE_STEPS_MAX, descends, manifest_path, read_manifest
from tests.support.engine import KEY, UKEY, VAL

NOW = 1_000
ELEM = pa.schema([pa.field("x", pa.int64())])


def _open(root: Path, version: int | None) -> PartitionStore:
    store = PartitionStore.open(str(root), "op", 0, version, StoreConfig())
    store.set_time(NOW)
    return store


def _declare(store: PartitionStore, ttl_ms: int | None = None) -> tuple[Any, Any, Any]:
    return (
        store.value_table("v", VAL, KEY, ttl_ms=ttl_ms),
        store.list_table("l", ELEM, KEY),
        store.map_table("m", UKEY, VAL, KEY),
    )


def _snapshot(store: PartitionStore, users: list[str]) -> dict[str, Any]:
    v, lst, m = _declare(store)
    out: dict[str, Any] = {}
    for u in users:
        out[u] = (v.get((u,)), lst.get((u,)), list(m.items((u,))))  # maps in user-key order
    return out


USERS = [f"u{i}" for i in range(40)]


def _write(store: PartitionStore, step: int, users: list[str]) -> None:
    v, lst, m = _declare(store)
    for i, u in enumerate(users):
        k = (u,)
        if (i + step) % 7 == 0:
            v.clear(k)
            m.clear(k)
        else:
            v.update(k, (step * 100 + i, f"s{step}"))
            m.update(k, (f"i{step % 3}",), (i, None))
        if (i + step) % 5 == 0:
            lst.clear(k)
        lst.append(k, (step,))
        if (i + step) % 4 == 0:
            m.remove(k, ("i0",))


@pytest.fixture
def two_copies(tmp_path: Path) -> tuple[Path, PartitionStore, PartitionStore]:
    """Copy A committed versions 0 and 1 and stays idle (hot); copy B was opened at 1."""
    root = tmp_path / "state"
    a = _open(root, None)
    _write(a, 0, USERS)
    a.commit(0)
    _write(a, 1, USERS[::2])
    a.commit(1)
    _snapshot(a, USERS)  # every key hot in A
    b = _open(root, 1)
    return root, a, b


def test_refresh_to_the_same_version_keeps_everything(
    two_copies: tuple[Path, PartitionStore, PartitionStore],
) -> None:
    _root, a, _b = two_copies
    hot = a.stats().tables["v"].hot_keys
    assert a.refresh(1) is True
    assert a.version == 1
    assert a.stats().tables["v"].hot_keys == hot


def test_refresh_applies_what_other_copies_committed(
    two_copies: tuple[Path, PartitionStore, PartitionStore],
) -> None:
    root, a, b = two_copies
    _write(b, 2, USERS[:25])
    b.commit(2)
    _write(b, 3, [*USERS[10:], "new1", "new2"])
    b.commit(3)
    hot_before = a.stats().tables["v"].hot_keys
    assert a.refresh(3) is True
    assert a.version == 3
    assert not a.dirty
    users = [*USERS, "new1", "new2", "never"]
    assert _snapshot(a, users) == _snapshot(_open(root, 3), users)
    # views of keys nobody changed survived; changed ones were replayed, not dropped
    assert a.stats().tables["v"].hot_keys >= hot_before
    # the copy commits on top, and a fresh open agrees
    _write(a, 4, USERS[:5])
    a.commit(4)
    assert _snapshot(a, users) == _snapshot(_open(root, 4), users)


def test_a_second_commit_of_a_version_adopts_the_first(tmp_path: Path) -> None:
    """A version is published once: a retried task that commits it again on the same parent
    adopts the first attempt's version, and copies of it keep catching up."""
    root = tmp_path / "state"
    a = _open(root, None)
    _write(a, 0, USERS)
    a.commit(0)
    _write(a, 1, USERS)
    first = a.commit(1)  # A's version 1
    b = _open(root, 0)
    _write(b, 7, USERS[:3])
    info = b.commit(1)  # a retried task commits version 1 again, differently
    assert not first.adopted and info.adopted and b.version == 1 and not b.dirty
    users = [*USERS, "never"]
    assert _snapshot(b, users) == _snapshot(a, users) == _snapshot(_open(root, 1), users)
    assert a.refresh(1) is True  # nothing changed under A's copy
    _write(b, 8, USERS[:3])
    b.commit(2)
    assert a.refresh(2) is True
    target = read_manifest(b.fileio, b.store_dir, 2)
    assert descends(b.fileio, b.store_dir, read_manifest(b.fileio, b.store_dir, 0), target)


def test_refresh_refuses_a_copy_whose_version_was_published_anew(tmp_path: Path) -> None:
    """If a version's manifest was deleted and published again on another history, a copy of
    the old one is never advanced (lineage checksums), and a commit on the other parent is a
    typed conflict."""
    root = tmp_path / "state"
    a = _open(root, None)
    _write(a, 0, USERS)
    a.commit(0)
    _write(a, 1, USERS)
    a.commit(1)
    fresh = _open(root, None)  # no parent at all
    _write(fresh, 3, USERS[:2])
    with pytest.raises(CommitConflictError, match=r"version 1 .* already published"):
        fresh.commit(1)  # version 1 exists on parent 0: nothing is published
    a.fileio.delete(manifest_path(a.store_dir, 1))  # as if retention of another history
    b = _open(root, 0)
    _write(b, 7, USERS[:3])
    assert not b.commit(1).adopted  # published anew, differently
    assert a.refresh(1) is False
    _write(b, 8, USERS[:3])
    b.commit(2)
    assert a.refresh(2) is False


def test_refresh_refuses_dirty_closed_and_older_targets(
    two_copies: tuple[Path, PartitionStore, PartitionStore],
) -> None:
    _root, a, b = two_copies
    _write(b, 2, USERS[:3])
    b.commit(2)
    assert a.refresh(0) is False  # an older version is not a descendant
    v, _lst, _m = _declare(a)
    v.update(("u1",), (1, "dirty"))
    assert a.refresh(2) is False  # uncommitted changes are never mixed with other commits
    b.close()
    c = _open(_root, 2)
    c.close()
    assert c.refresh(2) is False


def test_refresh_resets_a_table_dropped_and_declared_again(
    two_copies: tuple[Path, PartitionStore, PartitionStore],
) -> None:
    root, a, b = two_copies
    b.drop_table("v")
    v = b.value_table("v", VAL, KEY)
    v.update(("u3",), (3, "again"))
    b.commit(2)
    assert a.refresh(2) is True
    va, _lst, _m = _declare(a)
    assert va.get(("u1",)) is None  # dropped with the table, not resurrected from A's view
    assert va.get(("u3",)) == (3, "again")
    assert _snapshot(a, USERS) == _snapshot(_open(root, 2), USERS)


def test_a_bottom_compaction_keeps_newer_tombstones_and_is_crossed(
    two_copies: tuple[Path, PartitionStore, PartitionStore],
) -> None:
    """A bottom merge keeps the tombstones a copy of the lineage needs: no reset, no
    resurrection, and the copy's other views survive."""
    root, a, b = two_copies
    va, _l, _m = _declare(a)
    assert va.get(("u2",)) is not None  # hot in A
    vb, _l, _m = _declare(b)
    vb.clear(("u2",))
    b.commit(2)
    b.compact(force=True)  # a bottom merge: the tombstone of u2 is newer than A's version
    bottom = b.table("v").runs[0].ref
    assert bottom is not None and bottom.drops_tombstones
    assert bottom.tombstones_from_seq is not None
    assert bottom.tombstones_from_seq <= read_manifest(a.fileio, a.store_dir, 1).next_seq
    b.commit(3)
    table_before = a.table("v")
    assert a.refresh(3) is True
    assert a.table("v") is table_before  # advanced, not reset
    assert ("u1",) in table_before._views  # untouched views kept
    assert a.table("v").get(("u2",)) is None
    assert _snapshot(a, USERS) == _snapshot(_open(root, 3), USERS)


def test_no_resurrection_after_a_bottom_compaction_dropped_the_tombstone(
    two_copies: tuple[Path, PartitionStore, PartitionStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A merge that dropped a tombstone newer than the copy's version resets the table."""
    root, a, b = two_copies
    va, _l, _m = _declare(a)
    assert va.get(("u2",)) is not None  # hot in A
    vb, _l, _m = _declare(b)
    vb.clear(("u2",))
    b.commit(2)
    monkeypatch.setattr(b, "tombstone_horizon_seq", lambda: b.next_seq)  # drop them all
    b.compact(force=True)  # the tombstone of u2 goes with its rows
    bottom = b.table("v").runs[0].ref
    assert bottom is not None and bottom.tombstones_from_seq == b.next_seq
    b.commit(3)
    table_before = a.table("v")
    assert a.refresh(3) is True
    # reset in place to the target's entry: the same object (users' references stay valid),
    # no view kept
    assert a.table("v") is table_before and not table_before._views
    assert va.get(("u2",)) is None
    assert _snapshot(a, USERS) == _snapshot(_open(root, 3), USERS)


def test_range_deletes_and_ttl_changes_are_caught_up(tmp_path: Path) -> None:
    root = tmp_path / "state"
    a = _open(root, None)
    v = a.value_table("v", VAL, KEY, ttl_ms=100)
    for i, u in enumerate(USERS):
        v.update((u,), (i, "x"))
    a.commit(0)
    assert len(v.ttl_index()) == len(USERS)  # A holds its TTL index in memory
    b = _open(root, 0)
    vb = b.value_table("v", VAL, KEY, ttl_ms=100)
    b.set_time(NOW + 50)
    vb.update(("u1",), (1, "later"))  # now expires at NOW + 150
    b.commit(1)
    assert a.refresh(1) is True
    a.set_time(NOW + 120)
    removed = a.expire()
    assert removed == len(USERS) - 1
    assert v.get(("u1",)) == (1, "later")
    a.commit(2)
    c = _open(root, 2)
    c.set_time(NOW + 120)
    assert c.value_table("v", VAL, KEY, ttl_ms=100).get(("u1",)) == (1, "later")
    b2 = _open(root, 2)
    b2.value_table("v", VAL, KEY, ttl_ms=100).delete_range(("u0",), ("u5",))
    b2.commit(3)
    assert a.refresh(3) is True
    a.set_time(NOW + 120)
    assert a.value_table("v", VAL, KEY, ttl_ms=100).get(("u1",)) is None


def test_local_compaction_outputs_are_kept_across_a_catch_up(tmp_path: Path) -> None:
    root = tmp_path / "state"
    a = _open(root, None)
    for step in range(6):
        _write(a, step, USERS)
        a.commit(step)
    runs_before = len(a.table("v").runs)
    a.compact(force=True)  # merged after the commit: not published yet
    merged = [r for r in a.table("v").runs if r.replaces]
    assert merged and len(a.table("v").runs) < runs_before
    b = _open(root, 5)
    _write(b, 6, USERS[:4])
    b.commit(6)
    assert a.refresh(6) is True
    assert merged[0] in a.table("v").runs  # adopted in place of the runs it merged
    a.commit(7)
    published = read_manifest(a.fileio, a.store_dir, 7).tables["v"].runs
    assert merged[0].ref is not None and merged[0].ref.path in {r.path for r in published}
    assert _snapshot(a, USERS) == _snapshot(_open(root, 7), USERS)


def test_a_missing_file_leaves_the_copy_untouched(
    two_copies: tuple[Path, PartitionStore, PartitionStore],
) -> None:
    _root, a, b = two_copies
    before = _snapshot(a, USERS)
    _write(b, 2, USERS)
    b.commit(2)
    old = {r.path for e in read_manifest(a.fileio, a.store_dir, 1).tables.values() for r in e.runs}
    new = read_manifest(a.fileio, a.store_dir, 2)
    for e in new.tables.values():
        for r in e.runs:
            if r.path not in old:
                a.fileio.delete(f"{a.store_dir}/{r.path}")
    assert a.refresh(2) is False
    assert a.version == 1
    assert _snapshot(a, USERS) == before


def test_no_resurrection_when_a_bottom_merge_left_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything deleted, then merged from the bottom with every tombstone dropped (as for
    deletions older than the lineage a catch-up walks): no run remains to carry a tombstone."""
    root = tmp_path / "state"
    a = _open(root, None)
    va = a.value_table("v", VAL, KEY)
    for i, u in enumerate(USERS):
        va.update((u,), (i, "x"))
    a.commit(0)
    b = _open(root, 0)
    vb = b.value_table("v", VAL, KEY)
    for u in USERS:
        vb.clear((u,))
    b.commit(1)
    monkeypatch.setattr(b, "tombstone_horizon_seq", lambda: b.next_seq)
    b.compact(force=True)
    assert b.table("v").runs == []
    b.commit(2)
    assert a.refresh(2) is True
    assert all(a.table("v").get((u,)) is None for u in USERS)


def test_manifests_record_the_next_seqs_of_the_lineage(tmp_path: Path) -> None:
    """Each manifest lists its ancestors' next_seq (at most LINEAGE_STEPS_MAX, oldest first);
    the horizon below which tombstones may go is the oldest of them."""
    root = tmp_path / "state"
    a = _open(root, None)
    seqs = []
    for step in range(LINEAGE_STEPS_MAX + 3):
        _write(a, step, USERS[:3])
        a.commit(step)
        seqs.append(read_manifest(a.fileio, a.store_dir, step).next_seq)
    last = read_manifest(a.fileio, a.store_dir, LINEAGE_STEPS_MAX + 2)
    assert last.lineage_next_seqs == seqs[-1 - LINEAGE_STEPS_MAX : -1]
    assert a.tombstone_horizon_seq() == seqs[-1 - LINEAGE_STEPS_MAX]
    a.commit(LINEAGE_STEPS_MAX + 2)  # committed again: same parent, same lineage
    again = read_manifest(a.fileio, a.store_dir, LINEAGE_STEPS_MAX + 2)
    assert again.lineage_next_seqs == last.lineage_next_seqs
    assert _open(root, None).tombstone_horizon_seq() == 0  # never committed: nothing to keep


def test_alternating_copies_cross_many_bottom_merges(tmp_path: Path) -> None:
    """Two copies take turns, each compacting down to the bottom after its commit: every
    catch-up advances (no reset) and reads what a fresh open reads."""
    root = tmp_path / "state"
    a = _open(root, None)
    _write(a, 0, USERS)
    a.commit(0)
    copies = [a, _open(root, 0)]
    crossed = 0
    for step in range(1, 13):
        s = copies[step % 2]
        if step > 1:
            tables_before = dict(s._tables)
            known = {r.path for e in s._manifest.tables.values() for r in e.runs}
            target = read_manifest(s.fileio, s.store_dir, step - 1)
            crossed += any(
                r.tombstones_from_seq is not None and r.path not in known
                for e in target.tables.values()
                for r in e.runs
            )
            assert s.refresh(step - 1) is True
            assert all(s._tables.get(n) is t for n, t in tables_before.items())  # no reset
        _write(s, step, USERS[step % 3 :: 2])
        s.commit(step)
        s.compact(force=True)
        assert _snapshot(s, USERS) == _snapshot(_open(root, step), USERS)
    assert crossed >= 5  # bottom merges published by one copy, crossed by the other


def _spy_conversions_and_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[str]]:
    """Spies on the rows converted to views (their counts) and the data files read (their
    paths), until ``monkeypatch`` is undone: the two lists they append to."""
    from fsstate.format.segment import Segment
    from fsstate.storage.fileio import FileIO
    from fsstate.tables import newest

    converted: list[int] = []
    data_reads: list[str] = []
    rows_at = Segment._rows_at
    views_of = newest._views_of
    open_parquet = FileIO.open_parquet
    read_bytes = FileIO.read_bytes

    def spy_rows_at(self: Segment, indices: list[int]) -> Any:
        converted.append(len(indices))
        return rows_at(self, indices)

    def spy_views_of(rows: Any) -> list[Any]:
        converted.append(rows.num_rows)
        return views_of(rows)

    def spy_open(self: FileIO, path: str) -> Any:
        data_reads.append(path)
        return open_parquet(self, path)

    def spy_read(self: FileIO, path: str) -> bytes:
        if path.endswith(".parquet"):
            data_reads.append(path)
        return read_bytes(self, path)

    monkeypatch.setattr(Segment, "_rows_at", spy_rows_at)
    monkeypatch.setattr(newest, "_views_of", spy_views_of)
    monkeypatch.setattr(FileIO, "open_parquet", spy_open)
    monkeypatch.setattr(FileIO, "read_bytes", spy_read)
    return converted, data_reads


@pytest.mark.parametrize("kind", ["value", "map"])
def test_refresh_reads_only_what_views_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The delta of a partition another copy filled is as big as that batch's state: a copy
    converts only the rows of the keys it holds views of, and without views reads no data
    (a value table by its vectorized newest-view path, other kinds by op rows)."""

    def table(store: PartitionStore) -> Any:
        if kind == "value":
            return store.value_table("v", VAL, KEY)
        return store.map_table("v", UKEY, VAL, KEY)

    def put(t: Any, key: str, value: tuple[Any, ...]) -> None:
        if kind == "value":
            t.update((key,), value)
        else:
            t.update((key,), ("x",), value)

    def got(t: Any, key: str) -> Any:
        return t.get((key,)) if kind == "value" else t.get((key,), ("x",))

    root = tmp_path / "state"
    a = _open(root, None)
    va = table(a)
    for u in ("u0", "u1", "u2"):
        put(va, u, (0, "a"))
    a.commit(0)
    b = _open(root, 0)
    vb = table(b)
    for i in range(2_000):
        put(vb, f"n{i}", (i, "x" * 100))
    put(vb, "u1", (1, "b"))
    b.commit(1)
    put(vb, "n5", (5, "again"))
    b.commit(2)

    converted, data_reads = _spy_conversions_and_reads(monkeypatch)
    assert a.refresh(1) is True
    assert sum(converted) == 1  # u1's one new row, not the 2,000 new keys'
    assert a.stats().tables["v"].hot_keys == 3
    assert got(va, "u1") == (1, "b")
    va.evict_clean()  # a copy without views
    data_reads.clear()
    assert a.refresh(2) is True
    assert data_reads == []
    monkeypatch.undo()
    users = ["u0", "u1", "u2", "n0", "n5", "n1999", "never"]
    fresh = table(_open(root, 2))
    assert [got(va, u) for u in users] == [got(fresh, u) for u in users]
