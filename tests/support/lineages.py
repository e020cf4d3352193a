"""Stores with several lineages, written as a query's tasks write them, and read back in a fresh
interpreter (a plain module: import it).

:func:`two_lineages` writes operator :data:`OPERATOR` (value state :data:`STATE`) through
epochs as a query's tasks do (:func:`fsstate.store.epoch.begin_epoch` following the lineage):
lineage A commits batches 0, 1, 2 on the trunk; lineage B, a second planning of batch 1 (the
checkpoint restored after batch 0), forks version 0 into a branch and commits batches 1, 2
there.

:func:`read_back` reads versions in a new Python process: the block cache of the process that
wrote (or deleted) a file keeps serving it, so only a fresh process tells whether a version is
really readable from storage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import list_versions, read_manifest
from fsstate.store import store_dir_for
from fsstate.store.epoch import StoreAddress, begin_epoch
from fsstate.store.lineage import branch_for
from fsstate.store.pool import StorePool
from fsstate.store.record import EpochRecord, Writer
from tests.support.engine import KEY, VAL, run_probe

OPERATOR = "op"
STATE = "v"

_READER = """
import json, sys
from fsstate import PartitionStore
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from tests.support.engine import KEY, VAL
args = json.loads({args!r})
fileio = FileIO(Location.parse(args["uri"], args["options"]))
out = {{}}
for op, part, version, branch, layout in args["reads"]:
    key = f"{{op}}/{{layout}}/{{part}}@{{branch or 'trunk'}}:{{version}}"
    try:
        s = PartitionStore.open(fileio, op, part, version, layout=layout, branch=branch)
        t = s.value_table(args["state"], VAL, KEY)
        out[key] = {{k[0]: t.get(k)[0] for k in t.keys()}}
        s.close()
    except Exception as exc:
        out[key] = "ERROR " + type(exc).__name__ + ": " + str(exc)[:300]
print("PROBE " + json.dumps(out))
"""


def read_back(
    root: Location,
    reads: Sequence[tuple[int, int, str] | tuple[int, int, str, str]],
    *,
    operator: str = OPERATOR,
    state: str = STATE,
) -> dict[str, Any]:
    """Read value state ``state`` of (partition, version, branch[, layout]) of ``operator``
    in a fresh interpreter; returns ``{"<op>/<layout>/<p>@<branch>:<v>": {key: count}}``, or
    an ``"ERROR <type>: ..."`` string where the version does not read."""
    rows = [(operator, r[0], r[1], r[2], r[3] if len(r) > 3 else "") for r in reads]  # type: ignore[misc]
    args = {"uri": root.uri(), "options": dict(root.options), "reads": rows, "state": state}
    seen, _ = run_probe(_READER.format(args=json.dumps(args)))
    return seen


def key_of(partition: int, version: int, branch: str, layout: str = "") -> str:
    """The :func:`read_back` key of a read."""
    return f"{OPERATOR}/{layout}/{partition}@{branch or 'trunk'}:{version}"


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
