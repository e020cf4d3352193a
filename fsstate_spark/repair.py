"""Repairing a stopped ``tiered()`` query whose state is damaged: back to its newest whole batch.

:func:`repair_query` looks at a stopped query's committed batches, newest first, and finds the
newest one whose state is whole: in every partition of every ``tiered()`` operator, the version
of the lineage the checkpoint runs on (:mod:`fsstate.inspect.lineage`) is there, its manifest
reads, and every file it names is on storage at its recorded size. With ``apply``, it rolls the
query back to that batch (:func:`fsstate_spark.fork.rollback_query`: Spark's checkpoint cut
after it), so the restarted query re-runs the later batches from whole state, on a lineage of
its own; without, it only says what it would do (a dry run). A file that is present but
corrupt is found by ``fsstate verify``, which reads every file whole.

Invariants:

* Read-only unless ``apply``; with ``apply``, only Spark's checkpoint changes (the roll-back's
  own guarantees: an interrupted roll-back leaves a checkpoint Spark restarts from, at or after
  the target; run the repair again). fsstate's state is never written.
* No Spark session: the checkpoint and the state are read as files. The state location is the
  query's ``tiered()`` ``state_uri`` (the command line resolves the default from Spark's
  settings).
* Refused, nothing changed, when no retained committed batch has whole state (restore a backup
  then), or when the query has no ``tiered()`` state under the location given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError
from fsstate.inspect.catalog import StoreRef
from fsstate.inspect.checkpoint import (
    SparkCheckpoint,
    checkpoint_uri,
    query_stores,
    read_checkpoint,
)
from fsstate.inspect.lineage import BatchState, batch_state, planning_of
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate_spark.fork import CheckpointCut, rollback_query

__all__ = ["Repair", "repair_query"]


@dataclass(frozen=True)
class Repair:
    """What :func:`repair_query` found (and did).

    Attributes:
        checkpoint: the checkpoint (full location).
        query_id: its query id.
        committed: its last committed batch.
        batch: the newest committed batch whose state is whole.
        broken: the batches after it, each operator's state where it is not whole.
        applied: the roll-back done (None: a dry run, or nothing to do).
    """

    checkpoint: str
    query_id: str
    committed: int
    batch: int
    broken: tuple[BatchState, ...]
    applied: CheckpointCut | None = None

    @property
    def needed(self) -> bool:
        """Whether the query must go back (its last batch's state is not whole)."""
        return self.batch != self.committed

    def to_doc(self) -> dict[str, Any]:
        """The repair as a JSON document."""
        return {
            "checkpoint": self.checkpoint,
            "query": self.query_id,
            "committed_batch": self.committed,
            "whole_batch": self.batch,
            "needed": self.needed,
            "applied": self.applied is not None,
            "broken": [
                {"batch": s.batch, "operator": s.operator, "what": s.describe()}
                for s in self.broken
            ],
        }


def repair_query(
    checkpoint: str,
    state_uri: str,
    *,
    apply: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Repair:
    """Find the newest committed batch of a stopped query whose ``tiered()`` state is whole,
    and with ``apply`` roll the query back to it (see the module docstring).

    Args:
        checkpoint: the query's checkpointLocation.
        state_uri: its ``tiered()`` state_uri (the root holding ``<query id>/``).
        apply: roll back (default: only say what a repair would do).
        storage_options: object store settings for both locations.

    Returns:
        What was found, and the roll-back if one was done.

    Raises:
        ConfigError: not a checkpoint, no committed batch, no state of the query there, or no
            retained committed batch with whole state; nothing was changed.
    """
    opts = storage_options or {}
    ckpt = read_checkpoint(FileIO(Location.parse(checkpoint_uri(checkpoint), opts)))
    where = ckpt.fileio.describe("")
    if ckpt.committed is None:
        raise ConfigError(f"checkpoint {where} committed no batch: nothing to repair")
    root = FileIO(Location.parse(state_uri, opts))
    stores, query_root = query_stores(root, ckpt)
    if not stores:
        raise ConfigError(
            f"no state of query {ckpt.query_id} under {query_root.describe('')}: give the "
            "state_uri its tiered() operators use; nothing was changed"
        )
    broken: list[BatchState] = []
    for b in reversed(ckpt.commits):
        states = _states(root, ckpt, stores, b)
        bad = [s for s in states if not s.whole]
        if not bad:
            cut = None
            if apply and b != ckpt.committed:
                cut = rollback_query(checkpoint, b, storage_options=storage_options)
            return Repair(where, ckpt.query_id, ckpt.committed, b, tuple(broken), cut)
        broken += bad
    raise ConfigError(
        f"no retained committed batch of checkpoint {where} (batches "
        f"{ckpt.commits[0]}..{ckpt.committed}) has whole state under "
        f"{query_root.describe('')} ({broken[-1].describe()}): restore the state directory "
        "and the checkpoint from one backup; nothing was changed"
    )


def _states(
    root: FileIO, ckpt: SparkCheckpoint, stores: list[StoreRef], batch: int
) -> list[BatchState]:
    """Each operator's state at ``batch`` on the checkpoint's lineage, files checked."""
    try:
        count: int | None = ckpt.partitions_at(batch)
    except ConfigError:
        count = None
    planned = planning_of(ckpt, batch)
    groups: dict[str, list[StoreRef]] = {}
    for s in stores:
        groups.setdefault(s.operator, []).append(s)
    return [
        batch_state(root, members, batch, planned, count=count, files=True)
        for _, members in sorted(groups.items())
    ]
