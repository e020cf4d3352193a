"""fsstate.inspect on real files: the catalog, snapshots (TTL at the commit clock, lists per
element), change feeds across retention, and verification of damaged files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig, read_changes, read_table
from fsstate.errors import ConfigError, UnknownStateError, VersionNotFoundError
from fsstate.inspect import Snapshot, find_stores, verify_stores
from fsstate.storage.fileio import FileIO

KEY = pa.schema([("k", pa.string())])
VAL = pa.schema([("n", pa.int64())])


def _store(root: Path, op: str = "op", part: int = 0, retain: int = 10) -> PartitionStore:
    return PartitionStore.open(str(root), op, part, config=StoreConfig(retain_versions=retain))


def _history(root: Path) -> None:
    s = _store(root)
    v = s.value_table("v", VAL, KEY)
    lst = s.list_table("l", VAL, KEY, ttl_ms=1000)
    s.set_time(1000)
    v.update(("a",), (1,))
    v.update(("b",), (2,))
    lst.append(("a",), (10,))
    lst.append(("a",), (11,))
    s.commit(0)
    s.set_time(1500)
    v.clear(("a",))
    lst.put(("b",), [(20,)])
    s.commit(1)
    s.set_time(2100)  # a's elements (expiry 2000) expire; b's (2500) stay
    s.expire()
    s.commit(2)
    s.close()


def test_snapshots_resolve_ttl_at_the_commit_clock_and_lists_per_element(tmp_path: Path) -> None:
    _history(tmp_path)
    assert read_table(str(tmp_path), "op", 0, "l", 0).to_pylist() == [
        {"k": "a", "n": 10},
        {"k": "a", "n": 11},
    ]
    assert read_table(str(tmp_path), "op", 0, "l", 1).num_rows == 3
    assert read_table(str(tmp_path), "op", 0, "l", 2).to_pylist() == [{"k": "b", "n": 20}]
    # the same version read at an earlier time still shows what had not expired then
    at = read_table(str(tmp_path), "op", 0, "l", 1, now_ms=2001, with_expiry=True)
    assert at.to_pylist() == [{"k": "b", "n": 20, "_expires_at_ms": 2500}]
    with Snapshot(str(tmp_path), "op", 0) as snap:
        assert snap.version == 2 and snap.clock_ms == 2100
        assert sorted(snap.specs) == ["l", "v"]
        with pytest.raises(UnknownStateError, match=r"'nope'.*pick one"):
            snap.read("nope")


def test_change_feed_and_its_limits(tmp_path: Path) -> None:
    _history(tmp_path)
    feed = read_changes(str(tmp_path), "op", 0, "v", 0)
    assert feed.to_pylist() == [
        {"batch_id": 0, "change_type": "update", "k": "a", "n": 1},
        {"batch_id": 0, "change_type": "update", "k": "b", "n": 2},
        {"batch_id": 1, "change_type": "delete", "k": "a", "n": None},
    ]
    lst = read_changes(str(tmp_path), "op", 0, "l", 2, 2, with_seq=True).to_pylist()
    assert [(r["change_type"], r["k"], r["n"]) for r in lst] == [
        ("delete", "a", 10),
        ("delete", "a", 11),
    ]
    with pytest.raises(ConfigError, match="not a range"):
        read_changes(str(tmp_path), "op", 0, "v", 2, 1)
    with pytest.raises(VersionNotFoundError, match=r"version 3 .* not committed"):
        read_changes(str(tmp_path), "op", 0, "v", 1, 5)
    s2 = PartitionStore.open(str(tmp_path), "op", 0, 2, StoreConfig(retain_versions=2))
    s2.value_table("v", VAL, KEY).update(("c",), (3,))
    s2.commit(3)
    s2.commit(4)
    s2.close()
    with pytest.raises(VersionNotFoundError, match="no longer retained"):
        read_changes(str(tmp_path), "op", 0, "v", 3)


def test_catalog_finds_stores_at_any_depth(tmp_path: Path) -> None:
    for prefix, op, part in [("q1", "Counter", 0), ("q1", "Counter", 1), ("q2", "odd name/x", 0)]:
        s = _store(tmp_path / prefix, op, part)
        s.value_table("v", VAL, KEY).update(("a",), (1,))
        s.commit(0)
        s.commit(1)
        s.close()
    stores = find_stores(str(tmp_path))
    assert [(s.prefix, s.operator, s.partition, s.versions) for s in stores] == [
        ("q1", "Counter", 0, (0, 1)),
        ("q1", "Counter", 1, (0, 1)),
        ("q2", "odd name/x", 0, (0, 1)),
    ]
    assert [s.partition for s in find_stores(str(tmp_path), prefix="q1", partition=1)] == [1]
    odd = find_stores(str(tmp_path), operator="odd name/x")[0]
    rows = Snapshot.of(FileIO(str(tmp_path)), odd).read("v")
    assert rows.to_pylist() == [{"k": "a", "n": 1}]


def test_verify_names_truncated_and_flipped_files(tmp_path: Path) -> None:
    _history(tmp_path)
    io = FileIO(str(tmp_path))
    report = verify_stores(io, find_stores(io))
    assert report.ok and report.versions == 3 and report.files >= 3
    data = sorted(p for p in (tmp_path / "op" / "0" / "data").iterdir())
    truncated, flipped = data[0], data[-1]
    truncated.write_bytes(truncated.read_bytes()[:-7])
    raw = bytearray(flipped.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    flipped.write_bytes(bytes(raw))
    report = verify_stores(io, find_stores(io))
    bad = {Path(p.path).name: p for p in report.problems}
    assert set(bad) == {truncated.name, flipped.name}
    assert "bytes" in bad[truncated.name].error
    assert "checksum" in bad[flipped.name].error and bad[flipped.name].versions
