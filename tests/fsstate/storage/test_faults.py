"""Storage faults between the engine and a real S3 server: a fault-injecting proxy resets
connections, answers 503 (before or after the server applied the request) and delays answers,
during commits, opens, reads and compaction.

Whatever happens: a commit publishes completely or not at all, the previous version stays
readable, nothing committed is lost or resurrected, and a failure is a typed error naming the
object and the fault (never wrong data). A fault the client's bounded retries absorb is
invisible; one they cannot absorb fails the call, and the call succeeds once the fault is gone.
"""

from __future__ import annotations

from typing import Any

import pytest

from devkit.s3_server import S3Info
from fsstate import PartitionStore, StoreConfig
from fsstate.errors import CommitError, FsStateError, StorageError
from fsstate.storage.location import Location
from tests.support.engine import KEY, VAL
from tests.support.faultproxy import CountingProxy
from tests.support.plugin import s3_options

KEYS = [(f"k{i}",) for i in range(60)]
CONFIG = StoreConfig(orphan_scan_every_commits=1_000_000)
# a fault the retries absorb (once) and one they cannot (every request until cleared)
ONCE, ALWAYS = 1, 10_000


@pytest.fixture
def proxied(s3_server: S3Info, s3_uri: str) -> Any:
    with CountingProxy(s3_server.endpoint) as proxy:
        opts = {
            **s3_options(s3_server),
            "endpoint": proxy.url,
            "retries_max": "2",
            "retry_timeout_ms": "4000",
            "timeout": "1s",
        }
        direct = Location.parse(s3_uri, s3_options(s3_server))
        yield proxy, Location.parse(s3_uri, opts), direct


def _state(store: PartitionStore) -> dict[Any, Any]:
    t = store.value_table("v", VAL, KEY)
    m = store.map_table("m", KEY, VAL, KEY)
    return {k: (t.get(k), list(m.items(k))) for k in KEYS}


def _write(store: PartitionStore, version: int) -> None:
    t = store.value_table("v", VAL, KEY)
    m = store.map_table("m", KEY, VAL, KEY)
    for i, k in enumerate(KEYS):
        if (i + version) % 3 == 0:
            t.update(k, (version, f"v{version}"))
        if (i + version) % 5 == 0:
            m.update(k, (f"u{version % 4}",), (i, "m"))


def _committed(direct: Location, version: int) -> dict[Any, Any]:
    return _state(PartitionStore.open(direct, "f", 0, version, CONFIG))


FAULTS = ["reset", "503", "reset_after", "503_after", "delay"]
FAULT_WORDS = ("503", "Service Unavailable", "connection", "error sending", "imeout")


@pytest.mark.parametrize("action", FAULTS)
@pytest.mark.parametrize("target", ["data", "manifests"])
@pytest.mark.parametrize("times", [ONCE, ALWAYS])
def test_commit_under_faults(proxied: Any, action: str, target: str, times: int) -> None:
    proxy, loc, direct = proxied
    store = PartitionStore.open(loc, "f", 0, None, CONFIG)
    _write(store, 0)
    store.commit(0)
    before = _committed(direct, 0)
    _write(store, 1)
    expected = _state(store)
    proxy.add_fault(action, method="PUT", path_contains=f"/{target}/", times=times, seconds=1.5)
    # a manifest write that landed is recognized however its answer got lost; anything else
    # that fails every time fails the commit
    landed = target == "manifests" and action in ("reset_after", "503_after", "delay")
    must_fail = times == ALWAYS and not landed
    try:
        info = store.commit(1)
        assert not must_fail, f"{action} on every {target} PUT, yet the commit succeeded"
    except CommitError as exc:
        assert must_fail, f"a single {action} must be absorbed: {exc}"
        msg = str(exc)
        assert f"/f/0/{target}/" in msg, msg  # the object
        assert any(w in msg for w in FAULT_WORDS), msg  # and the fault
        assert "version 0 is intact" in msg
        assert _committed(direct, 0) == before  # the previous version is intact
        assert PartitionStore.committed_versions(direct, "f", 0) == [0]  # nothing of 1
        proxy.clear_faults()
        info = store.commit(1)  # the retry publishes it whole
    proxy.clear_faults()
    assert not info.adopted  # a write whose answer was lost is recognized as this attempt's
    assert PartitionStore.committed_versions(direct, "f", 0) == [0, 1]
    assert _committed(direct, 1) == expected and _committed(direct, 0) == before


@pytest.mark.parametrize("action", FAULTS)
@pytest.mark.parametrize("times", [ONCE, ALWAYS])
def test_open_and_read_under_faults(proxied: Any, action: str, times: int) -> None:
    proxy, loc, direct = proxied
    store = PartitionStore.open(direct, "f", 0, None, CONFIG)
    for version in range(3):
        _write(store, version)
        store.commit(version)
    expected = _committed(direct, 2)
    proxy.add_fault(action, method="GET", times=times, seconds=1.5)
    try:
        got = _state(PartitionStore.open(loc, "f", 0, 2, CONFIG))
        assert got == expected  # absorbed: the right data
    except FsStateError as exc:
        assert isinstance(exc, StorageError), repr(exc)  # never "corrupt", never wrong data
        assert "s3://" in str(exc) and "/f/0/" in str(exc), str(exc)
        assert times == ALWAYS, f"a single {action} must be absorbed by the retries: {exc}"
    proxy.clear_faults()
    assert _state(PartitionStore.open(loc, "f", 0, 2, CONFIG)) == expected


@pytest.mark.parametrize("action", ["reset", "503", "503_after"])
def test_compaction_under_faults(proxied: Any, action: str) -> None:
    """A merge that cannot write (or read) its runs changes nothing; the next commit and every
    read still see the committed state, and the merge succeeds once the fault is gone."""
    proxy, loc, direct = proxied
    store = PartitionStore.open(loc, "f", 0, None, CONFIG)
    for version in range(5):
        _write(store, version)
        store.commit(version)
    expected = _state(store)
    for name in ("v", "m"):
        store.table(name).release_segments()
    proxy.add_fault(action, times=ALWAYS)
    with pytest.raises(StorageError) as info:
        store.compact(force=True)
    assert "/f/0/data/" in str(info.value)
    proxy.clear_faults()
    assert _state(store) == expected
    assert store.compact(force=True) > 0
    store.commit(5)
    assert _committed(direct, 5) == expected == _state(store)
