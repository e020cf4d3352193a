"""fsstate.inspect on stores with branches (issue 45), local and on the S3 server: the catalog
finds each store's branches in its one listing (never as stores or trunk versions of their
own, whatever they are named), snapshots and change feeds read a branch, verify checks every
branch's files, and a dropped branch's files go by the collection while the trunk's stay.
Readers see each operator on the lineage committed last unless told which."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fsstate.config import StoreConfig
from fsstate.errors import ConfigError
from fsstate.inspect import Snapshot, find_stores, read_changes, read_table, verify_stores
from fsstate.inspect.catalog import BranchRef, Fork, branch_names, on_branch, read_fork
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import read_manifest
from fsstate.store.gc import collect
from fsstate.store.lineage import drop_branch, fork_version, list_branches
from tests.support.engine import settle_leases
from tests.support.lineages import OPERATOR, STATE, files_of, two_lineages
from tests.support.plugin import s3_options


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "local":
        return Location.parse(str(tmp_path / "state"))
    info = request.getfixturevalue("s3_server")
    return Location.parse(request.getfixturevalue("s3_uri"), s3_options(info))


def _values(table: object) -> dict[str, int]:
    return {r["user"]: r["count"] for r in table.to_pylist()}  # type: ignore[attr-defined]


def test_the_catalog_finds_branches_in_its_one_listing(root: Location) -> None:
    fileio = FileIO(root)
    branch = two_lineages(fileio)
    before = dataclasses.replace(fileio.stats)
    stores = find_stores(fileio)
    assert (fileio.stats.list - before.list, fileio.stats.get - before.get) == (1, 0)
    # seen on the lineage committed last (both are live: the branch forked an older version)
    assert [(s.partition, s.versions, s.branch) for s in stores] == [
        (0, (0, 1, 2), branch),
        (1, (0, 1, 2), branch),
    ]
    assert all([(b.name, b.versions) for b in s.branches] == [(branch, (0, 1, 2))] for s in stores)
    assert all(s.trunk == (0, 1, 2) for s in stores)
    stores = find_stores(fileio, branch="")
    assert branch_names(stores) == [branch]
    assert read_fork(fileio, stores[0], branch) == Fork("", 0)
    assert read_fork(fileio, stores[0], "nope") is None
    views = on_branch(stores, branch)
    assert [(v.partition, v.versions, v.branch) for v in views] == [
        (0, (0, 1, 2), branch),
        (1, (0, 1, 2), branch),
    ]
    assert on_branch(stores, "nope") == [] and on_branch(stores, "") == stores
    assert all(isinstance(b, BranchRef) for s in stores for b in s.lineages)


def test_branches_named_like_the_layout_are_never_stores_or_trunk_versions(root: Location) -> None:
    """Branches named ``manifests``, ``layouts``, ``data`` or digits hold ``<20 digits>.json``
    files as the trunk's manifests and the layout records do: they stay branches."""
    fileio = FileIO(root)
    two_lineages(fileio, partitions=1)
    odd = ["manifests", "layouts", "data", "7", "0"]
    for name in odd:
        fork_version(fileio, f"{OPERATOR}/0", 1, branch=name)
    (store,) = find_stores(fileio, branch="")
    assert store.versions == (0, 1, 2) and store.since == -1
    assert set(odd) <= set(store.branch_names)
    assert all(b.versions == (1,) for b in store.branches if b.name in odd)
    assert read_fork(fileio, store, "layouts") == Fork("", 1)


def test_snapshots_and_change_feeds_read_a_branch(root: Location) -> None:
    fileio = FileIO(root)
    branch = two_lineages(fileio)
    stores = find_stores(fileio, branch="")
    with Snapshot.of(fileio, stores[0]) as trunk:
        assert _values(trunk.read(STATE)) == {"a0": 3}
    (view,) = on_branch(stores[1:], branch)
    with Snapshot.of(fileio, view) as snap:
        assert snap.version == 2 and snap.branch == branch
        assert _values(snap.read(STATE)) == {"a1": 1, "b1": 10}
    assert _values(read_table(fileio, OPERATOR, 0, STATE, 1, branch=branch)) == {"a0": 1, "b0": 9}
    feed = read_changes(fileio, OPERATOR, 0, STATE, 1, 2, branch=branch)
    assert [(r["batch_id"], r["change_type"], r["user"]) for r in feed.to_pylist()] == [
        (1, "update", "b0"),
        (2, "update", "b0"),
    ]
    with pytest.raises(ConfigError, match="branch name"):
        Snapshot(fileio, OPERATOR, 0, branch="../x")


def test_verify_checks_every_branch_and_names_it(root: Location) -> None:
    fileio = FileIO(root)
    branch = two_lineages(fileio)
    report = verify_stores(fileio, find_stores(fileio))
    assert report.ok and report.versions == 12, report.lines()
    only = sorted(files_of(fileio, 1, branch) - files_of(fileio, 1, ""))
    fileio.delete(f"{OPERATOR}/1/{only[-1]}")
    users = [v for v in (0, 1, 2) if only[-1] in read_manifest(fileio, "op/1", v, branch).files()]
    for latest_only in (False, True):
        report = verify_stores(fileio, find_stores(fileio), latest_only=latest_only)
        assert not report.ok
        (problem,) = report.problems
        assert problem.path.endswith(only[-1]) and problem.versions == ()
        assert [b for b, _ in problem.branches] == [branch]
        assert f"branch {branch} versions" in report.lines()[0]
        expect = [2] if latest_only else users
        assert report.to_doc()["problems"][0]["branches"] == {branch: expect}


def test_a_dropped_branch_goes_and_gc_keeps_every_trunk_file(root: Location) -> None:
    fileio = FileIO(root)
    branch = two_lineages(fileio)
    for p in range(2):  # a lineage is in every partition (each of its run's tasks forks)
        fork_version(fileio, f"{OPERATOR}/{p}", 1, source=branch, branch="child")
    trunk = [files_of(fileio, p, "") for p in range(2)]
    child = files_of(fileio, 0, "child")
    doomed = [files_of(fileio, p, branch) - trunk[p] - files_of(fileio, p, "child") for p in (0, 1)]
    assert all(doomed)
    with pytest.raises(ConfigError, match="trunk"):
        drop_branch(fileio, f"{OPERATOR}/0", "")
    for p in range(2):
        assert drop_branch(fileio, f"{OPERATOR}/{p}", branch) == 3
        assert drop_branch(fileio, f"{OPERATOR}/{p}", branch) == 0
    settle_leases()
    collect(fileio, OPERATOR, retain=1 << 40, grace_ms=0, abandoned_ms=0)
    for p in range(2):
        have = {e.path.split("/", 2)[2] for e in fileio.list(f"{OPERATOR}/{p}/data")}
        assert trunk[p] <= have and not doomed[p] & have
    assert list_branches(fileio, f"{OPERATOR}/0") == ["child"]
    assert child <= {e.path.split("/", 2)[2] for e in fileio.list(f"{OPERATOR}/0/data")}
    # the branch forked from the dropped one still reads (a reader's default: the lineage
    # committed last), and the trunk does
    assert _values(read_table(fileio, OPERATOR, 0, STATE, 1, branch="child")) == {"a0": 1, "b0": 9}
    assert _values(read_table(fileio, OPERATOR, 1, STATE)) == {"a1": 1, "b1": 9}
    assert _values(read_table(fileio, OPERATOR, 1, STATE, branch="")) == {"a1": 3}
    assert verify_stores(fileio, find_stores(fileio)).ok
    assert StoreConfig().orphan_grace_ms > 0  # the default grace keeps young files: gc's default
