"""State on object storage, against a real S3 server (SeaweedFS on loopback): the publish
protocol under racing attempts, the requests each operation makes, and stores that ignore
conditional writes. Local disk runs the race too (``link(2)`` publishes manifests there)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from devkit.s3_server import S3Info
from fsstate import PartitionStore, StoreConfig
from fsstate.errors import ConfigError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import read_manifest
from fsstate.tables import ValueTable
from tests.support.engine import KEY, VAL, settle_leases
from tests.support.faultproxy import CountingProxy
from tests.support.plugin import s3_options

ROUNDS = 100


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "local":
        return Location.parse(str(tmp_path / "state"))
    info = request.getfixturevalue("s3_server")
    return Location.parse(request.getfixturevalue("s3_uri"), s3_options(info))


def _data_files(fileio: FileIO, store_dir: str) -> set[str]:
    prefix = store_dir + "/"
    return {f.path[len(prefix) :] for f in fileio.list(f"{store_dir}/data")}


def _race(
    root: Location, config: StoreConfig, version: int
) -> tuple[str, dict[str, PartitionStore]]:
    """Attempts ``a`` and ``b`` of ``version``, both opened at ``version - 1``, commit it at
    once: exactly one publishes, the other adopts. The winner's name and both stores."""
    attempts = {
        name: PartitionStore.open(root, "race", 0, version - 1, config) for name in ("a", "b")
    }
    for name, store in attempts.items():
        t = store.value_table("v", VAL, KEY)
        t.update(("k",), (version, name))
        t.update((f"{name}{version}",), (version, name))
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def commit(name: str, store: PartitionStore) -> None:
        barrier.wait()
        results[name] = store.commit(version)

    threads = [threading.Thread(target=commit, args=item) for item in attempts.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    adopted = {name: results[name].adopted for name in attempts}
    assert sorted(adopted.values()) == [False, True], f"round {version}: {adopted}"
    return next(n for n, a in adopted.items() if not a), attempts


def _check_round(
    root: Location,
    config: StoreConfig,
    attempts: dict[str, PartitionStore],
    winner: str,
    version: int,
) -> set[str]:
    """Version ``version`` builds on the one before it and holds the winner's rows, in both
    attempts' stores and (every tenth round) opened from storage. The files it references."""
    fileio, store_dir = attempts[winner].fileio, attempts[winner].store_dir
    published = read_manifest(fileio, store_dir, version)
    if version > 1:
        parent = read_manifest(fileio, store_dir, version - 1)
        assert (published.parent_version, published.parent_checksum) == (
            version - 1,
            parent.checksum,
        )
    loser = "b" if winner == "a" else "a"
    for store in attempts.values():
        assert store.version == version and not store.dirty
        t = store.value_table("v", VAL, KEY)
        assert t.get(("k",)) == (version, winner) and t.get((f"{loser}{version}",)) is None
    if version % 10 == 0:
        fresh = PartitionStore.open(root, "race", 0, version, config)
        assert fresh.value_table("v", VAL, KEY).get(("k",)) == (version, winner)
        fresh.close()
    return published.files()


def _check_losers_collected(root: Location, config: StoreConfig, losers: set[str]) -> None:
    """The losers' files stay until the grace time, then go; the winners' stay."""
    last = PartitionStore.open(root, "race", 0, ROUNDS, config)
    fileio, store_dir = last.fileio, last.store_dir
    settle_leases()  # the attempts' stores are closed: their files are nobody's pending output
    assert last.collect_garbage() == 0  # younger than the grace time: they may be in flight
    assert losers <= _data_files(fileio, store_dir)
    time.sleep(1.5)
    short = StoreConfig(orphan_grace_ms=1_000)
    assert PartitionStore.open(root, "race", 0, ROUNDS, short).collect_garbage() == len(losers)
    assert not (losers & _data_files(fileio, store_dir))
    for version in last.retained_versions()[-5:]:  # winners' files all still there
        again = PartitionStore.open(root, "race", 0, version, config)
        assert again.value_table("v", VAL, KEY).get(("k",))[0] == version  # type: ignore[index]


def test_two_writers_race_to_publish_each_version(root: Location) -> None:
    """Two attempts of every batch race to commit the same version from the same base, 100
    times: exactly one publishes, the other adopts its version, the loser's files are never
    referenced, the next version builds on the winner, and the loser's files go only after the
    grace time."""
    config = StoreConfig(orphan_grace_ms=600_000, orphan_scan_every_commits=1_000_000)
    first = PartitionStore.open(root, "race", 0, None, config)
    first.value_table("v", VAL, KEY).update(("k",), (0, "base"))
    first.commit(0)
    fileio, store_dir = first.fileio, first.store_dir
    losers: set[str] = set()
    wins = {"a": 0, "b": 0}
    files = _data_files(fileio, store_dir)
    for version in range(1, ROUNDS + 1):
        before = files
        winner, attempts = _race(root, config, version)
        wins[winner] += 1
        referenced = _check_round(root, config, attempts, winner, version)
        files = _data_files(fileio, store_dir)
        new = files - before
        assert new & referenced and new - referenced  # the winner's files and the loser's
        losers |= new - referenced
        for store in attempts.values():
            store.close()
    assert len(losers) >= ROUNDS and wins["a"] and wins["b"]  # both sides won some rounds
    _check_losers_collected(root, config, losers)


def _delta(fileio: FileIO, before: dict[str, int]) -> dict[str, int]:
    now = fileio.stats.snapshot()
    return {
        k: now[k] - before[k]
        for k in ("get", "put", "head", "list", "delete")
        if now[k] - before[k]
    }


def test_requests_of_each_operation(s3_server: S3Info, s3_uri: str) -> None:
    """The requests the docstring of fsstate.store.partition documents, counted by FileIO and
    cross-checked with a counting proxy in front of the server."""
    with CountingProxy(s3_server.endpoint) as proxy:
        opts = {**s3_options(s3_server), "endpoint": proxy.url}
        loc = Location.parse(s3_uri, opts)
        config = StoreConfig(retain_versions=3, orphan_scan_every_commits=1_000)
        s = PartitionStore.open(loc, "req", 0, None, config)
        s.fileio.check_conditional_writes()  # probed once per bucket and process (3-4 requests)
        v = s.value_table("v", VAL, KEY)
        for i in range(200):
            v.update((f"k{i}",), (i, "x"))
        _check_commits(s, v, proxy)
        _check_catch_up(loc, config)
        _check_reopen_compact_and_collect(loc, config)


def _check_commits(s: PartitionStore, v: ValueTable, proxy: CountingProxy) -> None:
    """Commits 1 to 4 of ``s`` (its table ``v`` dirty): the requests each makes."""
    fileio = s.fileio
    proxy.reset_counts()
    before = fileio.stats.snapshot()
    s.commit(1)  # version numbers not divisible by orphan_scan_every_commits: no listing
    # the table's run + the manifest, and the writer's lease before the run (once per
    # lease tag and root: fsstate.storage.leases)
    assert _delta(fileio, before) == {"put": 3}
    assert dict(proxy.counts) == {"PUT": 3}
    before = fileio.stats.snapshot()
    s.commit(2)  # nothing changed: the manifest only
    assert _delta(fileio, before) == {"put": 1}
    v.update(("k1",), (1, "y"))
    s.commit(3)
    before = fileio.stats.snapshot()
    v.update(("k2",), (2, "y"))
    s.commit(4)  # the window drops version 1: its manifest (and files 2 retired), 1 request
    # and, once per process and store, a listing of the lineage's manifests
    assert _delta(fileio, before) == {"put": 2, "delete": 1, "list": 1}


def _check_catch_up(loc: Location, config: StoreConfig) -> None:
    """A worker that served version 2 catches up to 4; another process reads a run whole."""
    # a worker that served version 2 catches up to 4: two manifests, the new data files of
    # the viewed keys' tables
    copy = PartitionStore.open(loc, "req", 0, 2, config)
    copy_io = copy.fileio
    before = copy_io.stats.snapshot()
    assert copy.value_table("v", VAL, KEY).get(("k5",)) == (5, "x")
    # the small run file this process wrote is in its block cache (written through)
    assert _delta(copy_io, before) == {}
    before = copy_io.stats.snapshot()
    assert copy.refresh(4)
    assert _delta(copy_io, before) == {"get": 4}  # manifests 4 and 3, two delta files
    # in another process (an empty block cache), the small run file is read whole
    copy.controller.cache.shrink_to(0)
    other = PartitionStore.open(loc, "req", 0, 2, config)
    before = other.fileio.stats.snapshot()
    assert other.value_table("v", VAL, KEY).get(("k5",)) == (5, "x")
    assert _delta(other.fileio, before) == {"get": 1}
    other.close()


def _check_reopen_compact_and_collect(loc: Location, config: StoreConfig) -> None:
    """Opening version 4 again, compacting it, collecting the store's garbage: the requests."""
    # opening a version reads its manifest and nothing else
    fresh_io = FileIO(loc)
    before = fresh_io.stats.snapshot()
    fresh = PartitionStore.open(fresh_io, "req", 0, 4, config)
    assert _delta(fresh_io, before) == {"get": 1}
    # a worker that opens a version again reads only its manifest: the files it read
    # before are in the process's block cache (immutable: never stale)
    assert fresh.value_table("v", VAL, KEY).get(("k7",)) == (7, "x")
    fresh.close()
    before = fresh_io.stats.snapshot()
    fresh = PartitionStore.open(fresh_io, "req", 0, 4, config)
    assert fresh.value_table("v", VAL, KEY).get(("k7",)) == (7, "x")
    assert _delta(fresh_io, before) == {"get": 1}
    # compaction: writes one file
    t = fresh.value_table("v", VAL, KEY)
    t.release_segments()
    before = fresh_io.stats.snapshot()
    written = fresh.compact(force=True)
    # (the runs it merges are in the block cache already; cold, one GET per small run)
    assert written > 0 and _delta(fresh_io, before) == {"put": 1}
    # the collection of the store (fsstate.store.gc), out of the commit path: the leases
    # (two listings), the layout records (a listing; operator.json absent here), the
    # store's directory (one listing), each retained manifest not read before in this
    # process (3, 4, 5); nothing is garbage, so nothing to delete
    fresh.commit(5)
    gc_before = fresh_io.stats.snapshot()
    assert fresh.collect_garbage(grace_ms=0) == 0
    assert _delta(fresh_io, gc_before) == {"list": 4, "get": 3}
    gc_before = fresh_io.stats.snapshot()
    fresh.collect_garbage(grace_ms=0)  # again: the manifests' file sets are known
    assert _delta(fresh_io, gc_before) == {"list": 4}


def test_a_store_that_ignores_conditional_writes_is_refused(s3_server: S3Info, s3_uri: str) -> None:
    """A proxy that answers 200 where the server refuses a conditional PUT (412) acts as a store
    that ignores the condition: the probe notices, the store is refused with a clear error,
    and it runs only when declared single-writer."""
    from fsstate.storage import fileio as fileio_mod

    with CountingProxy(s3_server.endpoint) as proxy:
        proxy.rewrite_status = {412: 200}
        fileio_mod._conditional.clear()
        opts = {**s3_options(s3_server), "endpoint": proxy.url}
        with pytest.raises(ConfigError, match="ignores conditional writes"):
            PartitionStore.open(Location.parse(s3_uri, opts), "u", 0).commit(0)
        single = Location.parse(s3_uri, {**opts, "single_writer": "true"})
        s = PartitionStore.open(single, "u", 0)
        s.value_table("v", VAL, KEY).update(("a",), (1, "x"))
        assert not s.commit(0).adopted
        again = PartitionStore.open(single, "u", 0, 0)
        assert again.value_table("v", VAL, KEY).get(("a",)) == (1, "x")
    fileio_mod._conditional.clear()
