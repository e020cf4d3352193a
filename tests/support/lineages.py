"""Stores with a branch, as ``tiered()`` leaves them when a query's checkpoint was restored
(a plain module: import it).

:func:`two_lineages` writes operator :data:`OPERATOR` (value state :data:`STATE`) through
epochs as a query's tasks do (:func:`fsstate.store.epoch.begin_epoch` following the lineage):
lineage A commits batches 0, 1, 2 on the trunk; lineage B, a second planning of batch 1 (the
checkpoint restored after batch 0), forks version 0 into a branch and commits batches 1, 2
there.
"""

from __future__ import annotations

from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import list_versions, read_manifest
from fsstate.store import store_dir_for
from fsstate.store.branches import branch_for
from fsstate.store.epoch import StoreAddress, begin_epoch
from fsstate.store.pool import StorePool
from fsstate.store.record import EpochRecord, Writer
from tests.support.engine import KEY, VAL

OPERATOR = "op"
STATE = "v"


def _epoch(
    fileio: FileIO, partition: int, epoch: int, planned: int, writes: dict[str, int], branch: str
) -> None:
    run = begin_epoch(
        StoreAddress(fileio, OPERATOR, partition, branch=branch),
        epoch,
        writer=Writer("run", "i", planned),
        pool=StorePool(),  # a new task: nothing cached
        follow_lineage=True,
    )
    t = run.store.value_table(STATE, VAL, KEY)
    for k, n in writes.items():
        t.update((f"{k}{partition}",), (n, f"e{epoch}"))
    run.commit(EpochRecord())


def two_lineages(fileio: FileIO, partitions: int = 2) -> str:
    """Write the two lineages (see the module docstring) in every partition; B's branch.

    Per partition ``p`` the trunk holds ``{a<p>: 3}`` at version 2, the branch
    ``{a<p>: 1, b<p>: 10}``; the branch starts at version 0 of the trunk."""
    for p in range(partitions):
        _epoch(fileio, p, 0, 100, {"a": 1}, "")
        _epoch(fileio, p, 1, 200, {"a": 2}, "")
        _epoch(fileio, p, 2, 300, {"a": 3}, "")
    branch = branch_for("", 0, 250)
    for p in range(partitions):
        _epoch(fileio, p, 1, 250, {"b": 9}, "")  # meets A's batch 1: forks version 0
        _epoch(fileio, p, 2, 260, {"b": 10}, branch)
    return branch


def files_of(fileio: FileIO, partition: int, branch: str) -> set[str]:
    """Every file the retained manifests of ``branch`` reference in a partition (relative to
    the store directory)."""
    store_dir = store_dir_for(OPERATOR, partition)
    out: set[str] = set()
    for v in list_versions(fileio, store_dir, branch):
        out |= read_manifest(fileio, store_dir, v, branch).files()
    return out
