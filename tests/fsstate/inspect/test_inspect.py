"""fsstate.inspect on real files: the catalog, snapshots (TTL at the commit clock, lists per
element), change feeds across retention, and verification of damaged files."""

from __future__ import annotations

import random
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig, read_changes, read_table
from fsstate.errors import ConfigError, UnknownStateError, VersionNotFoundError
from fsstate.inspect import Snapshot, find_stores, verify_stores
from fsstate.storage import runs
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


WIDE_KEY = pa.schema([("g", pa.string()), ("i", pa.int64())])
WIDE_VAL = pa.schema([("n", pa.int64()), ("pad", pa.string())])
UKEY = pa.schema([("u", pa.int64())])


@pytest.mark.parametrize("seed", range(3))
def test_key_ranges_read_every_row_once(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table read in the key ranges of :meth:`Snapshot.cut_points` equals the whole read
    (value, list with TTL and map; null key fields; shadowed, cleared and range-deleted rows
    across several runs), a key's list elements or map entries stay in one range, and a
    table read again reads the same (reads of a snapshot are independent)."""
    monkeypatch.setattr(runs, "WHOLE_FILE_BYTES_MAX", 0)  # every file offers cuts
    rng = random.Random(seed)
    print(f"seed {seed}")
    s = PartitionStore.open(
        str(tmp_path), "op", 0, config=StoreConfig(retain_versions=20, row_group_bytes=1024)
    )
    v = s.value_table("v", WIDE_VAL, WIDE_KEY)
    lst = s.list_table("l", WIDE_VAL, WIDE_KEY, ttl_ms=5000)
    m = s.map_table("m", UKEY, WIDE_VAL, WIDE_KEY)

    def key() -> tuple[str | None, int]:
        return (rng.choice([None, "a", "b", "c"]), rng.randrange(60))

    for version in range(8):
        s.set_time(1000 * version)
        for _ in range(120):
            k, val = key(), (rng.randrange(100), "x" * rng.randrange(40))
            op = rng.random()
            if op < 0.4:
                v.update(k, val)
            elif op < 0.5:
                v.clear(k)
            elif op < 0.7:
                lst.append(k, val)
            elif op < 0.75:
                lst.clear(k)
            elif op < 0.95:
                m.update(k, (rng.randrange(5),), val)
            else:
                m.remove(k, (rng.randrange(5),))
        if version % 3 == 2:
            lo = ("b", rng.randrange(60))
            v.delete_range(lo, ("b", lo[1] + 10))
        s.expire()
        s.commit(version)
    s.close()

    pieces_seen = 0
    with Snapshot(str(tmp_path), "op", 0) as snap:
        for name in ("v", "l", "m"):
            whole = snap.read(name, with_expiry=True, with_seq=True)
            for chunk_bytes in (1, 3000, 10**9):
                cuts = snap.cut_points(name, chunk_bytes)
                edges = [None, *cuts, None]
                pieces = [
                    snap.read(name, with_expiry=True, with_seq=True, start=a, stop=b)
                    for a, b in pairwise(edges)
                ]
                where = f"seed {seed} {name} chunk_bytes={chunk_bytes} cuts={cuts}"
                assert [r for p in pieces for r in p.to_pylist()] == whole.to_pylist(), where
                keys = [{(r["g"], r["i"]) for r in p.to_pylist()} for p in pieces]
                assert sum(len(k) for k in keys) == len(set().union(*keys)), where
                pieces_seen += len(cuts)
            assert snap.stored_bytes(name) > 0
    assert pieces_seen > 0, f"seed {seed}: no table was cut"
