"""Forking and rolling back a stopped query: Spark's checkpoint cut at a batch, fsstate's state
following it in O(metadata).

Spark keeps a query's progress as batch-numbered files in its checkpoint; fsstate's state
follows the checkpoint by itself (:mod:`fsstate_spark.tiered.lineage`: every task reads from
Spark's state which version of which branch it continues, and a batch planned anew forks its
store in O(metadata)). So both operations are cuts of Spark's checkpoint at a committed batch
``n``, and nothing of fsstate's state is copied or deleted:

* :func:`fork_query` copies a checkpoint up to batch ``n`` to a new location (the files Spark
  wrote after ``n`` are left out): the copy restarts at batch ``n + 1`` on its own, and its
  fsstate state branches from version ``n`` at its first batch (the versions the original
  wrote after ``n`` are never read).
* :func:`rollback_query` cuts a checkpoint in place at batch ``n``: the query restarts at
  ``n + 1`` as if the later batches never ran; fsstate's later versions stay on storage until
  retention drops them, and the re-run batches go on on a branch of their own.

What is cut (every file of a batch after ``n``; a file's ``.crc`` companion with it):
``offsets/<b>``, ``commits/<b>``, ``sources/<i>/<b>`` and ``<b>.compact``, the state store
versions after ``n + 1`` (``state/<op>/<partition>/<v>[_<id>].{zip,changelog,delta,snapshot}``:
a store's version ``v`` is its state after batch ``v - 1``) and the operator metadata and state
schema files of batches after ``n`` (``state/<op>/_metadata/...``, ``state/<op>/_stateSchema/...``
named ``<b>`` or ``<b>_<id>``). Measured against Spark's own handles: a cut checkpoint restarts
exactly as a copy of the checkpoint taken after batch ``n`` (tests/fsstate_spark/test_fork.py).

Invariants:

* Only a stopped query's checkpoint is cut (the caller's promise: a running query would write
  behind the cut); ``n`` must be a committed batch, else :class:`fsstate.errors.ConfigError`
  and nothing changes. A fork's target must be empty and apart from its source: neither the
  same location, nor inside it (the copy would be a part of what it copies), nor holding it;
  refused before any I/O.
* A rollback deletes the cut files newest batch first, the commit log before the offsets log,
  so an interrupted rollback leaves a checkpoint Spark restarts from a batch at or after ``n``
  (run it again to finish). A fork writes the copy's ``metadata`` last: a fork interrupted
  before it is no checkpoint.
* The sink is not the checkpoint's: a file sink's ``_spark_metadata`` (or any sink that
  remembers batch ids) must be rolled back or pointed elsewhere by the user (docs/operations.md).
* Storage I/O through FileIO (local paths and object stores alike).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError
from fsstate.inspect.checkpoint import checkpoint_uri, read_checkpoint
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location

__all__ = ["CheckpointCut", "fork_query", "rollback_query"]

_STORE_FILE = re.compile(r"^(\d+)(_[^.]*)?\.(zip|changelog|delta|snapshot)$")
_BATCH_FILE = re.compile(r"^(\d+)(\.compact)?$")
_META_FILE = re.compile(r"^(\d+)(_.*)?$")


@dataclass(frozen=True)
class CheckpointCut:
    """The outcome of a fork or a roll-back.

    Attributes:
        checkpoint: the checkpoint that was cut (the fork's copy, or the rolled-back one).
        query_id: the query's id (the copy keeps it: its state follows its own lineage).
        batch: the last batch the checkpoint keeps; the query restarts at ``batch + 1``.
        removed: files cut (a fork: files of the source left out of the copy).
        copied: files copied (0 for a roll-back).
    """

    checkpoint: str
    query_id: str
    batch: int
    removed: int
    copied: int


def _batch_of(rel: str) -> tuple[int, int] | None:
    """(batch number, the last batch that keeps it) of a checkpoint file, or None if the file
    is not batch-numbered (kept by every cut). A store version ``v`` is kept by a cut at
    ``v - 1``."""
    parts = rel.split("/")
    name = parts[-1]
    if name.startswith(".") and name.endswith(".crc"):
        name = name[1:-4]
    top = parts[0]
    if top in ("offsets", "commits") and len(parts) == 2 and name.isdigit():
        return int(name), int(name)
    if top == "sources" and len(parts) == 3:
        m = _BATCH_FILE.match(name)
        return (int(m.group(1)), int(m.group(1))) if m else None
    if top == "state" and len(parts) >= 4:
        if parts[2] in ("_metadata", "_stateSchema"):
            m = _META_FILE.match(name)
            return (int(m.group(1)), int(m.group(1))) if m else None
        if parts[2].isdigit() and "SSTs" not in parts:
            m = _STORE_FILE.match(name)
            return (int(m.group(1)), int(m.group(1)) - 1) if m else None
    return None


def _cut(fileio: FileIO, batch: int) -> tuple[list[str], list[str]]:
    """(files kept, files cut, newest batch first) of the checkpoint at ``batch``."""
    kept: list[str] = []
    cut: list[tuple[int, int, str]] = []
    for entry in fileio.list("", recursive=True):
        rel = entry.path
        found = _batch_of(rel)
        if found is None or found[1] <= batch:
            kept.append(rel)
            continue
        # newest first; within a batch the commit log before the offsets log before the rest
        rank = 0 if rel.split("/")[0] == "commits" else 1 if rel.startswith("offsets/") else 2
        cut.append((-found[1], rank, rel))
    return kept, [rel for _, _, rel in sorted(cut)]


def _committed(fileio: FileIO, batch: int | None, where: str) -> tuple[str, int]:
    """The query id and the batch to cut at (the last committed one when None).

    Raises:
        ConfigError: not a checkpoint, no batch committed, or ``batch`` not committed.
    """
    ckpt = read_checkpoint(fileio)
    last = ckpt.committed
    if last is None:
        raise ConfigError(f"checkpoint {where} has no committed batch: nothing to keep")
    if batch is None:
        return ckpt.query_id, last
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0 or batch > last:
        raise ConfigError(
            f"batch {batch!r} of checkpoint {where}: give a committed batch, 0 to {last}"
        )
    if not fileio.exists(f"commits/{batch}"):
        raise ConfigError(
            f"batch {batch} of checkpoint {where} has no commit (retained commits end at "
            f"{last}; Spark deletes the oldest): give a retained committed batch"
        )
    return ckpt.query_id, batch


def _apart(source: Location, target: Location) -> None:
    """Refuse a fork target that is the source checkpoint, inside it or holding it (local
    paths compared with symbolic links resolved).

    Raises:
        ConfigError: the two locations overlap.
    """
    src, dst = _path_of(source), _path_of(target)
    if (source.scheme, source.bucket) != (target.scheme, target.bucket):
        return
    if dst == src:
        how = "is the source checkpoint"
    elif dst.startswith(src + "/") or not src:
        how = f"is inside the source checkpoint {source.describe('')}"
    elif src.startswith(dst + "/") or not dst:
        how = f"holds the source checkpoint {source.describe('')}"
    else:
        return
    raise ConfigError(
        f"fork target {target.describe('')} {how}: give a new location outside the source "
        "checkpoint and not holding it"
    )


def _path_of(location: Location) -> str:
    """The path of ``location`` to compare (a local one's symbolic links resolved), without a
    trailing ``/``."""
    path = os.path.realpath(location.path) if location.is_local else location.path
    return path.rstrip("/")


def _fileio(location: str, storage_options: dict[str, Any] | None) -> FileIO:
    return FileIO(Location.parse(checkpoint_uri(location), storage_options or {}))


def rollback_query(
    checkpoint: str, batch: int, *, storage_options: dict[str, Any] | None = None
) -> CheckpointCut:
    """Roll a stopped query back to committed ``batch``: it restarts at ``batch + 1``, with the
    state it had after ``batch`` (Spark's and fsstate's; see the module docstring).

    Args:
        checkpoint: the query's checkpoint location (a path or URI).
        batch: the committed batch to go back to.
        storage_options: object store settings for the checkpoint's URI.

    Returns:
        What was cut.

    Raises:
        ConfigError: not a checkpoint, or ``batch`` is not a retained committed batch.
    """
    fileio = _fileio(checkpoint, storage_options)
    where = fileio.describe("")
    query_id, keep = _committed(fileio, batch, where)
    _, doomed = _cut(fileio, keep)
    for rel in doomed:  # one at a time, in order: an interruption leaves a usable checkpoint
        fileio.delete(rel)
    return CheckpointCut(where, query_id, keep, len(doomed), 0)


def fork_query(
    checkpoint: str,
    target: str,
    *,
    batch: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> CheckpointCut:
    """Copy a stopped query's checkpoint up to committed ``batch`` (default: its last) to
    ``target``: a query started on ``target`` continues from there with state of its own
    (fsstate's branches from the original's in O(metadata) at its first batch).

    Args:
        checkpoint: the original's checkpoint location.
        target: the new checkpoint location (empty or absent).
        batch: the committed batch the copy starts after (None: the last committed).
        storage_options: object store settings for both URIs.

    Returns:
        What was copied and left out.

    Raises:
        ConfigError: not a checkpoint, ``batch`` not a retained committed batch, or
            ``target`` not empty, or ``target`` and ``checkpoint`` the same location or one
            inside the other.
    """
    source = _fileio(checkpoint, storage_options)
    dest = _fileio(target, storage_options)
    _apart(source.location, dest.location)
    where = source.describe("")
    query_id, keep = _committed(source, batch, where)
    if dest.list("", recursive=True):
        raise ConfigError(
            f"fork target {dest.describe('')} is not empty: give a new checkpoint location"
        )
    kept, left = _cut(source, keep)
    last = [rel for rel in kept if rel in ("metadata", ".metadata.crc")]
    for rel in [r for r in kept if r not in last] + last:  # metadata last: then it exists
        dest.publish_bytes(rel, source.read_bytes(rel))
    return CheckpointCut(dest.describe(""), query_id, keep, len(left), len(kept))
