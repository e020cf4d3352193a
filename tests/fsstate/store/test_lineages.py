"""Lineages lose nothing (issue 66), engine-level scenarios written from their descriptions, on
local files and the S3 server; every final read is in a fresh interpreter
(:func:`tests.support.lineages.read_back`): the block cache of this process would serve a
deleted file.

1. A copy's collection never deletes its original's unpublished merge or spill (leases).
5. A fork at batch 0 marks its store; the collection keeps the branch's files.
6. A collection that cannot read what it decides from deletes nothing.
7. A fork of the version retention is dropping is refused, never half-made; or, if it came
   first, retention keeps the files.
Plus what the collection keeps: live heads' windows through forks, a continued lineage's
tail dropped, a writer's orphans collected once its lease is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fsstate import PartitionStore
from fsstate.config import StoreConfig
from fsstate.errors import CommitError, GarbageCollectionError, StorageError, VersionNotFoundError
from fsstate.storage.fileio import FileIO
from fsstate.storage.leases import LeaseBook, PendingFiles, lease_book
from fsstate.storage.location import Location
from fsstate.storage.manifest import list_versions
from fsstate.store import retention as retention_mod
from fsstate.store.gc import collect
from fsstate.store.layout import Layout, publish_layout
from fsstate.store.lineage import FORKED_PATH, fork_version, list_branches
from fsstate.store.rescale import rescale
from tests.support.engine import KEY, VAL, settle_leases
from tests.support.lineages import OPERATOR, STATE, key_of, read_back
from tests.support.plugin import s3_options

STORE = f"{OPERATOR}/0"


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "local":
        return Location.parse(str(tmp_path / "state"))
    info = request.getfixturevalue("s3_server")
    return Location.parse(request.getfixturevalue("s3_uri"), s3_options(info))


def _open(
    fileio: FileIO, version: int | None, branch: str = "", cfg: StoreConfig | None = None
) -> PartitionStore:
    return PartitionStore.open(fileio, OPERATOR, 0, version, cfg, branch=branch)


def _write(store: PartitionStore, **values: int) -> None:
    t = store.value_table(STATE, VAL, KEY)
    for k, n in values.items():
        t.update((k,), (n, "x"))


def _all_files(fileio: FileIO) -> set[str]:
    return {e.path for e in fileio.list("", recursive=True)}


def test_a_copys_collection_keeps_its_originals_unpublished_merge(root: Location) -> None:
    """Lineage A commits, its compaction writes a merged run that waits for A's next commit;
    A's copy B collects with no grace at all; A commits: everything reads back."""
    fileio = FileIO(root)
    cfg = StoreConfig(orphan_grace_ms=0)
    a = _open(fileio, None, cfg=cfg)
    for v in range(4):
        _write(a, **{f"k{v}": v, "shared": v})
        a.commit(v)
    assert a.compact(force=True) > 0  # the merged run: on storage, no manifest names it
    b = PartitionStore.open(fileio, OPERATOR, 0, None, cfg)  # the copy, on a branch of v3
    fork_version(fileio, STORE, 3, branch="copy")
    b.close()
    b = _open(fileio, 3, "copy", cfg)
    _write(b, mine=1)
    b.commit(4)
    b.collect_garbage(grace_ms=0)
    _write(a, k4=4)
    a.commit(4)
    got = read_back(root, [(0, 4, ""), (0, 4, "copy")])
    assert got[key_of(0, 4, "")] == {"k0": 0, "k1": 1, "k2": 2, "k3": 3, "k4": 4, "shared": 3}
    assert got[key_of(0, 4, "copy")]["mine"] == 1


def test_a_long_batchs_spill_survives_another_lineages_collection(root: Location) -> None:
    fileio = FileIO(root)
    cfg = StoreConfig(orphan_grace_ms=0)
    a = _open(fileio, None, cfg=cfg)
    _write(a, x=1)
    a.commit(0)
    fork_version(fileio, STORE, 0, branch="other")
    _write(a, y=2)
    assert a.spill()[1] > 0  # the batch's rows are on storage only, under A's lease
    other = _open(fileio, 0, "other", cfg)
    assert other.collect_garbage(grace_ms=0) == 0
    a.commit(1)
    assert read_back(root, [(0, 1, "")])[key_of(0, 1, "")] == {"x": 1, "y": 2}


def test_a_file_whose_lease_lapsed_is_never_published(root: Location) -> None:
    """A writer stalled longer than its lease (no renewal): its commit refuses, the previous
    version intact."""
    fileio = FileIO(root)
    now = [1_000_000]
    book = LeaseBook(lease_ms=60_000, clock=lambda: now[0])
    a = _open(fileio, None)
    a.ctx.pending = PendingFiles(fileio, book)
    _write(a, x=1)
    a.commit(0)
    _write(a, y=2)
    a.spill()
    now[0] += 61_000  # no keeper ran: the lease lapsed
    with pytest.raises(CommitError, match="lease"):
        a.commit(1)
    assert read_back(root, [(0, 0, "")])[key_of(0, 0, "")] == {"x": 1}


def test_a_dead_writers_orphans_go_and_a_live_ones_stay(root: Location) -> None:
    fileio = FileIO(root)
    dead_book = LeaseBook(rotate_ms=0)
    live_book = LeaseBook()
    base = _open(fileio, None)
    _write(base, x=1)
    base.commit(0)
    base.close()
    dead, live = _open(fileio, 0), _open(fileio, 0)
    dead.ctx.pending = PendingFiles(fileio, dead_book)
    live.ctx.pending = PendingFiles(fileio, live_book)
    for s, k in ((dead, "d"), (live, "l")):
        _write(s, **{k: 1})
        s.spill()
    dead.close()  # its files will never be published
    dead_book.tag()  # rotated: the old tag is no longer written under
    dead_book.keep()  # and its lease is released
    done = collect(fileio, OPERATOR, retain=10, grace_ms=0)
    assert done.files == 1
    data = {e.path.rsplit("/", 1)[-1] for e in fileio.list(f"{STORE}/data")}
    assert any(live_book.writer in n for n in data)
    assert not any(dead_book.writer in n for n in data)
    live.commit(1)
    assert read_back(root, [(0, 1, "")])[key_of(0, 1, "")] == {"x": 1, "l": 1}


def test_a_fork_at_batch_0_marks_its_store_and_keeps_its_files(root: Location) -> None:
    fileio = FileIO(root)
    s = _open(fileio, None)
    s.fork_to("first")
    _write(s, x=1)
    s.commit(0)
    assert fileio.exists(f"{STORE}/{FORKED_PATH}")
    collect(fileio, OPERATOR, retain=1, grace_ms=0, abandoned_ms=0)
    assert list_branches(fileio, STORE) == ["first"]
    assert read_back(root, [(0, 0, "first")])[key_of(0, 0, "first")] == {"x": 1}


def test_a_collection_that_cannot_read_deletes_nothing(
    root: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    fileio = FileIO(root)
    s = _open(fileio, None, cfg=StoreConfig(retain_versions=50))
    for v in range(6):
        _write(s, **{f"k{v}": v})
        s.commit(v)
        if v == 2:
            s.compact(force=True)
    s.close()
    fork_version(fileio, STORE, 5, branch="next")  # the trunk is continued: its tail is garbage
    before = _all_files(fileio)
    real = FileIO.read_bytes

    def flaky(self: FileIO, path: str) -> bytes:
        if path.endswith("next/00000000000000000005.json"):  # what keeps every file
            raise StorageError(f"503 reading {path}")
        return real(self, path)

    monkeypatch.setattr(FileIO, "read_bytes", flaky)
    with pytest.raises(GarbageCollectionError, match="nothing was deleted"):
        collect(fileio, OPERATOR, retain=1, grace_ms=0, abandoned_ms=0)
    assert _all_files(fileio) == before
    monkeypatch.undo()
    done = collect(fileio, OPERATOR, retain=1, grace_ms=0, abandoned_ms=0)
    assert done.manifests >= 5
    assert read_back(root, [(0, 5, "next")])[key_of(0, 5, "next")] == {f"k{v}": v for v in range(6)}


@pytest.mark.parametrize("fork_first", [False, True])
def test_a_fork_of_the_version_being_dropped_is_refused_or_kept(
    root: Location, monkeypatch: pytest.MonkeyPatch, fork_first: bool
) -> None:
    """Retention drops version 1 at commit 3 (2 retained), with the files version 2 retired;
    a fork of version 1 lands right before the drop deletes its manifest (kept: retention
    sees its mark), or right after (refused: nothing of the branch is made)."""
    fileio = FileIO(root)
    s = _open(fileio, None, cfg=StoreConfig(retain_versions=2))
    _write(s, a=1)
    s.commit(0)
    s.value_table(STATE, VAL, KEY).clear(("a",))
    _write(s, b=2)
    s.commit(1)
    assert s.compact(force=True) > 0
    _write(s, c=3)
    s.commit(2)  # names the merged run: retires versions 0 and 1's own files
    _write(s, d=4)
    outcome: dict[str, Any] = {}

    def fork() -> None:
        try:
            outcome["fork"] = fork_version(fileio, STORE, 1, branch="late")
        except VersionNotFoundError as exc:
            outcome["refused"] = exc

    if fork_first:
        real_delete = FileIO.delete_many

        def delete_many(self: FileIO, paths: Any) -> None:
            if any(p.endswith("manifests/00000000000000000001.json") for p in paths):
                fork()
            real_delete(self, paths)

        monkeypatch.setattr(FileIO, "delete_many", delete_many)
    else:
        real_marks = retention_mod.fork_marks

        def marks_after_drop(*args: Any, **kwargs: Any) -> Any:
            fork()
            return real_marks(*args, **kwargs)

        monkeypatch.setattr(retention_mod, "fork_marks", marks_after_drop)
    s.commit(3)
    monkeypatch.undo()
    if fork_first:
        assert "fork" in outcome
        assert read_back(root, [(0, 1, "late")])[key_of(0, 1, "late")] == {"b": 2}
    else:
        assert "refused" in outcome
        assert list_versions(fileio, STORE, "late") == []
    assert read_back(root, [(0, 3, "")])[key_of(0, 3, "")] == {"b": 2, "c": 3, "d": 4}


def test_the_collection_keeps_every_live_heads_window_and_drops_continued_tails(
    root: Location,
) -> None:
    """The trunk runs 0..5; a restart forks its head (the trunk is continued) and runs 6..9;
    a roll-back forks version 4 of the trunk and runs 5..6. Retain 3: each live head keeps
    its newest 3 versions, the continued trunk nothing of its own."""
    fileio = FileIO(root)
    cfg = StoreConfig(retain_versions=100)
    s = _open(fileio, None, cfg=cfg)
    for v in range(6):
        _write(s, t=v)
        s.commit(v)
        if v == 2:
            assert s.compact(force=True) > 0  # versions 3.. name the merged run instead
    s.close()
    fork_version(fileio, STORE, 5, branch="restart")
    r = _open(fileio, 5, "restart", cfg)
    for v in range(6, 10):
        _write(r, r=v)
        r.commit(v)
    r.close()
    fork_version(fileio, STORE, 4, branch="rollback")
    b = _open(fileio, 4, "rollback", cfg)
    for v in (5, 6):
        _write(b, b=v)
        b.commit(v)
    b.close()
    lease_book().rotate()  # the files written so far are no writer's pending output
    lease_book().keep()
    done = collect(fileio, OPERATOR, retain=3, grace_ms=0, abandoned_ms=0)
    assert list_versions(fileio, STORE) == []
    assert list_versions(fileio, STORE, "restart") == [7, 8, 9]
    assert list_versions(fileio, STORE, "rollback") == [4, 5, 6]
    assert done.files == 3  # the runs the merge at 3 replaced: no retained version names them
    reads = [(0, 9, "restart"), (0, 7, "restart"), (0, 4, "rollback"), (0, 6, "rollback")]
    got = read_back(root, reads)
    assert got[key_of(0, 9, "restart")] == {"t": 5, "r": 9}
    assert got[key_of(0, 7, "restart")] == {"t": 5, "r": 7}
    assert got[key_of(0, 4, "rollback")] == {"t": 4}
    assert got[key_of(0, 6, "rollback")] == {"t": 4, "b": 6}


def test_a_young_continued_lineage_keeps_its_window(root: Location) -> None:
    """A lineage whose head was forked lately may still have a writer (a copy taken of a
    running query): it keeps its window until it is older than ``abandoned_ms``."""
    fileio = FileIO(root)
    s = _open(fileio, None)
    for v in range(4):
        _write(s, t=v)
        s.commit(v)
    fork_version(fileio, STORE, 3, branch="copy")
    collect(fileio, OPERATOR, retain=2, grace_ms=0)  # the default: a day
    assert list_versions(fileio, STORE) == [2, 3]  # a live head's window yet
    _write(s, t=4)
    s.commit(4)  # the original goes on: a live head again
    collect(fileio, OPERATOR, retain=2, grace_ms=0, abandoned_ms=0)
    assert list_versions(fileio, STORE) == [2, 3, 4]  # 2: the copy's window below its fork
    assert read_back(root, [(0, 4, "")])[key_of(0, 4, "")] == {"t": 4}


def test_the_collection_keeps_an_older_generation_a_live_lineage_uses(root: Location) -> None:
    """A copy goes on in generation 0 while the original is rescaled out of it: the
    collection drops the original's versions there (the new generation's history no longer
    reaches them) and never the copy's, in any partition."""
    fileio = FileIO(root)
    publish_layout(fileio, OPERATOR, Layout(0, 2))
    stores = [_open_p(fileio, p, None) for p in (0, 1)]
    for v in range(4):
        for p, s in enumerate(stores):
            _write(s, **{f"t{p}": v})
            s.commit(v)
    for p in (0, 1):
        fork_version(fileio, f"{OPERATOR}/{p}", 2, branch="copy")
        c = _open_p(fileio, p, 2, "copy")
        for v in (3, 4):
            _write(c, **{f"c{p}": v})
            c.commit(v)
        c.close()
    done = rescale(
        fileio, OPERATOR, partitions=1, keys=["user"], partition_of=lambda t: [0] * t.num_rows,
        version=3, as_version=4, lineages=["", ""], source="",
    )  # fmt: skip
    new = _open_p(fileio, 0, 4, layout=done.layout.dir, cfg=StoreConfig(retain_versions=2))
    for v in range(5, 9):
        _write(new, n=v)
        new.commit(v)
    settle_leases()
    collect(fileio, OPERATOR, retain=2, grace_ms=0, abandoned_ms=0)
    for p in (0, 1):
        assert list_versions(fileio, f"{OPERATOR}/{p}") == []  # the rescaled original's
        assert list_versions(fileio, f"{OPERATOR}/{p}", "copy") == [3, 4]
    got = read_back(root, [(0, 4, "copy"), (1, 4, "copy"), (0, 8, "", done.layout.dir)])
    assert got[key_of(0, 4, "copy")] == {"t0": 2, "c0": 4}
    assert got[key_of(1, 4, "copy")] == {"t1": 2, "c1": 4}
    assert got[key_of(0, 8, "", done.layout.dir)] == {"t0": 3, "t1": 3, "n": 8}


def _open_p(
    fileio: FileIO,
    partition: int,
    version: int | None,
    branch: str = "",
    layout: str = "",
    cfg: StoreConfig | None = None,
) -> PartitionStore:
    return PartitionStore.open(fileio, OPERATOR, partition, version, cfg, layout, branch=branch)
