"""Incremental snapshots, lazy restore, re-commits and retention on real files."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.errors import (
    DataFileCorruptError,
    ManifestCorruptError,
    VersionNotFoundError,
)
from tests.support.engine import KEY, VAL, as_another_process

Factory = Callable[..., PartitionStore]


def _data_files(root: Path) -> set[str]:
    return {p.name for p in root.rglob("data/*.parquet")}


def test_commit_writes_only_changes(make_store: Factory, tmp_path: Path) -> None:
    s = make_store()
    t = s.value_table("v", VAL, KEY)
    for i in range(20_000):
        t.update((f"k{i}",), (i, f"label-{i * 7919 % 10007}"))
    first = s.commit(0)
    t.update(("k1",), (-1, "changed"))
    second = s.commit(1)
    assert second.files_written == 1
    assert second.bytes_written < first.bytes_written / 5
    untouched = s.commit(2)
    assert untouched.files_written == 0 and untouched.bytes_written == 0
    s2 = PartitionStore.open(str(tmp_path / "state"), "op", 0, 2)
    t2 = s2.value_table("v", VAL, KEY)
    assert t2.get(("k1",)) == (-1, "changed") and t2.get(("k999",)) == (
        999,
        f"label-{999 * 7919 % 10007}",
    )


def test_open_is_lazy(make_store: Factory, tmp_path: Path) -> None:
    s = make_store()
    t = s.value_table("v", VAL, KEY)
    t.update(("a",), (1, "x"))
    s.commit(0)
    for f in (tmp_path / "state").rglob("data/*.parquet"):
        f.write_bytes(b"garbage")  # opening must not read data files
    as_another_process(s)
    s2 = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    t2 = s2.value_table("v", VAL, KEY)
    with pytest.raises(DataFileCorruptError) as info:
        t2.get(("a",))
    assert ".parquet" in str(info.value) and info.value.path.endswith(".parquet")


def test_state_file_is_plain_parquet(make_store: Factory, tmp_path: Path) -> None:
    s = make_store()
    m = s.map_table("m", pa.schema([pa.field("item", pa.string())]), VAL, KEY)
    m.update(("alice",), ("book",), (3, "x"))
    s.commit(0)
    (path,) = list((tmp_path / "state").rglob("data/m~*.parquet"))
    table = pq.read_table(path)
    flat = table.flatten()
    assert flat.column("key.user").to_pylist() == ["alice"]
    assert flat.column("ukey.item").to_pylist() == ["book"]
    assert flat.column("value.count").type == pa.int64()
    assert flat.column("value.count").to_pylist() == [3]
    assert table.schema.metadata[b"fsstate.state"] == b"m"


def test_a_version_is_published_once_and_attempts_do_not_clash(
    make_store: Factory, tmp_path: Path
) -> None:
    s = make_store()
    t = s.value_table("v", VAL, KEY)
    t.update(("a",), (1, "x"))
    s.commit(0)
    # two attempts of batch 1 from version 0: the first to publish wins, the second adopts it
    a1 = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    a1.value_table("v", VAL, KEY).update(("a",), (2, "attempt1"))
    assert not a1.commit(1).adopted
    a2 = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    a2.value_table("v", VAL, KEY).update(("a",), (2, "attempt2"))
    assert a2.commit(1).adopted
    assert a2.value_table("v", VAL, KEY).get(("a",)) == (2, "attempt1")
    r = PartitionStore.open(str(tmp_path / "state"), "op", 0, 1)
    assert r.value_table("v", VAL, KEY).get(("a",)) == (2, "attempt1")
    # the loser's data file is on disk but no manifest names it
    referenced = {os.path.basename(p) for p in r._manifest.files()}  # type: ignore[union-attr]
    assert len(_data_files(tmp_path / "state") - referenced) == 1


def test_retention_deletes_unreferenced_files(make_store: Factory, tmp_path: Path) -> None:
    s = make_store(retain_versions=3)
    t = s.value_table("v", VAL, KEY)
    for version in range(10):
        t.update(("a",), (version, "x"))
        s.commit(version)
        if version == 8:
            # more runs than compaction_max_runs by now: let the background merge finish so
            # that the last commit references its output (else it is an orphan on disk until
            # the orphan scan, and the file listing below would race with it)
            s.controller.compactor().wait_idle()
    assert s.retained_versions() == [7, 8, 9]
    with pytest.raises(VersionNotFoundError, match="retained versions: 7, 8, 9"):
        PartitionStore.open(str(tmp_path / "state"), "op", 0, 2)
    s.controller.compactor().wait_idle()
    referenced: set[str] = set()
    for v in (7, 8, 9):
        r = PartitionStore.open(str(tmp_path / "state"), "op", 0, v)
        referenced |= {os.path.basename(p) for p in r._manifest.files()}  # type: ignore[union-attr]
    assert _data_files(tmp_path / "state") == referenced
    assert PartitionStore.open(str(tmp_path / "state"), "op", 0, 7).value_table("v", VAL, KEY).get(
        ("a",)
    ) == (7, "x")


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupt_manifest_names_file_and_previous_opens(
    make_store: Factory, tmp_path: Path, damage: str
) -> None:
    s = make_store()
    t = s.value_table("v", VAL, KEY)
    t.update(("a",), (1, "x"))
    s.commit(0)
    t.update(("a",), (2, "y"))
    s.commit(1)
    (mpath,) = [p for p in (tmp_path / "state").rglob("manifests/*.json") if p.stem.endswith("1")]
    data = mpath.read_bytes()
    if damage == "truncate":
        mpath.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        flipped = data.replace(b'"next_seq":', b'"next_seq":9', 1)
        assert flipped != data
        mpath.write_bytes(flipped)
    else:
        mpath.write_bytes(b"\x00\xff" * 10)
    with pytest.raises(ManifestCorruptError) as info:
        PartitionStore.open(str(tmp_path / "state"), "op", 0, 1)
    assert str(mpath) in str(info.value) and info.value.path == str(mpath)
    prev = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    assert prev.value_table("v", VAL, KEY).get(("a",)) == (1, "x")


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "delete"])
def test_corrupt_data_file_names_file_and_previous_opens(
    make_store: Factory, tmp_path: Path, damage: str
) -> None:
    s = make_store()
    t = s.value_table("v", VAL, KEY)
    t.update(("a",), (1, "x"))
    s.commit(0)
    before = _data_files(tmp_path / "state")
    t.update(("a",), (2, "y" * 100))
    s.commit(1)
    (new_name,) = _data_files(tmp_path / "state") - before
    (path,) = list((tmp_path / "state").rglob(new_name))
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-20])
    elif damage == "bitflip":
        i = data.index(b"yyyy")
        path.write_bytes(data[:i] + b"zzzz" + data[i + 4 :])
    else:
        path.unlink()
    as_another_process(s)
    s1 = PartitionStore.open(str(tmp_path / "state"), "op", 0, 1)
    with pytest.raises(DataFileCorruptError) as info:
        s1.value_table("v", VAL, KEY).get(("a",))
    assert new_name in str(info.value)
    prev = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    assert prev.value_table("v", VAL, KEY).get(("a",)) == (1, "x")


def test_failed_commit_keeps_previous_version(
    make_store: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fsstate.errors import CommitError, StorageError
    from fsstate.storage import fileio as fileio_mod

    s = make_store()
    t = s.value_table("v", VAL, KEY)
    t.update(("a",), (1, "x"))
    s.commit(0)
    t.update(("a",), (2, "y"))

    def boom(self: object, path: str, data: bytes) -> bool:
        raise StorageError(f"disk full writing {path}")

    monkeypatch.setattr(fileio_mod.FileIO, "publish_if_absent", boom)
    with pytest.raises(CommitError, match="version 0 is intact"):
        s.commit(1)
    monkeypatch.undo()
    with pytest.raises(VersionNotFoundError):
        PartitionStore.open(str(tmp_path / "state"), "op", 0, 1)
    prev = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    assert prev.value_table("v", VAL, KEY).get(("a",)) == (1, "x")
    s.commit(1)  # the retry succeeds with the same in-memory state
    again = PartitionStore.open(str(tmp_path / "state"), "op", 0, 1)
    assert again.value_table("v", VAL, KEY).get(("a",)) == (2, "y")


def test_config_validation() -> None:
    from fsstate.errors import ConfigError

    with pytest.raises(ConfigError, match="retain_versions"):
        StoreConfig(retain_versions=0)
    with pytest.raises(ConfigError, match="fsync"):
        StoreConfig(fsync="yes")  # type: ignore[arg-type]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name fds")
@pytest.mark.parametrize("fsync", [True, False])
def test_commit_flushes_files_and_directories_before_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    """Every published file is fsynced under its temporary name before it gets its final name
    (rename for data files, link for the manifest) and its directory after, and a version's
    manifest is published only once its files are durable; fsync=False skips the flushes (and
    still commits)."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def rec_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rec_replace(src: str, dst: str) -> None:
        events.append(("publish", dst))
        real_replace(src, dst)

    def rec_link(src: str, dst: str) -> None:
        events.append(("publish", dst))
        real_link(src, dst)

    monkeypatch.setattr(os, "fsync", rec_fsync)
    monkeypatch.setattr(os, "replace", rec_replace)
    monkeypatch.setattr(os, "link", rec_link)
    s = PartitionStore.open(str(tmp_path / "state"), "op", 0, config=StoreConfig(fsync=fsync))
    s.value_table("v", VAL, KEY, ttl_ms=60_000).update(("a",), (1, "x"))
    s.list_table("l", VAL, KEY).append(("a",), (2, "y"))
    s.commit(0)
    everything = [p for e, p in events if e == "publish"]
    # the writer's lease first (fsstate.storage.leases), before any file of it exists
    assert "/_fsstate/leases/" in everything[0]
    published = [p for p in everything if "/_fsstate/leases/" not in p]
    # 2 runs, a TTL index run, then the manifest
    assert len(published) == 4 and published[-1].endswith(".json")
    if not fsync:
        assert [e for e in events if e[0] == "fsync"] == []
    else:
        for target in published:
            i = events.index(("publish", target))
            parent = os.path.dirname(target)
            # the file's data before it gets its name (under its temp name), its directory after
            tmp_synced = events[i - 1]
            assert tmp_synced[0] == "fsync" and os.path.dirname(tmp_synced[1]) == parent
            assert os.path.basename(tmp_synced[1]).startswith(".tmp-")
            assert events[i + 1] == ("fsync", parent)
        manifest_at = events.index(("publish", published[-1]))
        assert all(events.index(("publish", p)) + 1 < manifest_at for p in published[:-1])
    again = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    assert again.value_table("v", VAL, KEY).get(("a",)) == (1, "x")


def test_failed_data_write_then_retry_keeps_every_row_once(
    make_store: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that fails while writing data files can be retried without losing rows."""
    from fsstate.errors import CommitError, StorageError
    from fsstate.storage import fileio as fileio_mod

    s = make_store()
    lst = s.list_table("l", VAL, KEY)
    for i in range(600):
        lst.append((f"k{i % 7}",), (i, "x"))
    real = fileio_mod.ParquetStream.write_row_group
    calls = {"n": 0}

    def flaky(self: fileio_mod.ParquetStream, batch: pa.RecordBatch) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # mid-stream: the file is open, nothing published yet
            raise StorageError("transient failure writing a row group")
        real(self, batch)

    monkeypatch.setattr(fileio_mod.ParquetStream, "write_row_group", flaky)
    with pytest.raises(CommitError):
        s.commit(0)
    data = tmp_path / "state"
    files = [p for p in data.rglob("*") if p.is_file() and "_fsstate" not in p.parts]
    assert not files  # the partial file is gone (the writer's lease stays while it lives)
    s.commit(0)
    monkeypatch.undo()
    r = PartitionStore.open(str(tmp_path / "state"), "op", 0, 0)
    got = r.list_table("l", VAL, KEY).get(("k3",))
    assert [v for v, _ in got] == [i for i in range(600) if i % 7 == 3]
