"""A Spark streaming checkpoint beside a ``tiered()`` query's state: reading it, and whether
fsstate's versions match its commit log.

What fsstate reads of a checkpoint directory (Spark 4.x, measured with pyspark 4.3), as plain
files through :class:`fsstate.storage.fileio.FileIO` (no Spark, so ``fsstate verify`` checks
a checkpoint wherever the command line runs; the Spark side, :mod:`fsstate_spark`, reads it
here too):

* ``metadata``: one JSON line, ``{"id": "<query id>"}`` (stable across restarts: the id
  ``tiered()`` state is kept under, ``<state_uri>/<query id>``);
* ``offsets/<batch id>``: a version line (``v1``), then the batch's metadata as JSON (its
  ``conf`` holds ``spark.sql.shuffle.partitions``, the partition count of the query's state
  for that batch: Spark restores it from here on a restart, and its offline repartition of a
  checkpoint writes a new batch with the new count; its ``batchTimestampMs`` is when the batch
  was planned, the same for every re-run of that planning: the flow driver records it with
  each version, :func:`batch_timestamp_ms`), then one line per source; written when the
  batch is planned, before its tasks run (so it is there when ``foreachBatch`` runs);
* ``commits/<batch id>``: written when the batch completed, after its tasks committed.

A ``tiered()`` task of batch ``b`` commits version ``b`` of its partition's store (a rescale
commits the batch Spark's repartition adds), so once a query stopped every partition of each
of its operators is at the checkpoint's last committed batch ``c``, or at ``c + 1`` when batch
``c + 1`` was planned (``offsets/<c + 1>``) and stopped before its commit: its restart re-runs
that batch, and each partition that committed it adopts its version (*in flight*, not damage).
:func:`check_checkpoint` reports every other partition: *behind* (newest version below ``c``:
its newest manifests deleted or lost, or a state directory restored from an older backup than
the checkpoint; the restart fails on the missing version; a partition whose trunk is behind
but a branch of which holds the batch is not behind: the checkpoint's lineage went on there,
:mod:`fsstate.store.lineage`) or *ahead* (above that: a checkpoint restored from an older
backup, copied or rolled back beside state that moved on). Ahead is a note, not damage:
``tiered()`` records in Spark's state which version and branch each partition committed, and
the restart's batch, planned anew, goes on on a branch of its own
(:mod:`fsstate_spark.tiered.lineage`); only state written by a fsstate without lineages
(no ``planned_ms`` in its versions) would be adopted.

Invariants:

* Read only (1 GET of ``metadata``, 1 LIST of ``commits/``, 1 GET per offsets entry read, 1
  HEAD for the batch after the last committed one); nothing here writes to a checkpoint.
* A file that is missing or does not parse is a :class:`fsstate.errors.ConfigError` naming
  the file: a checkpoint fsstate cannot read is never guessed at.
* Every gap names the query, the operator, the checkpoint's last committed batch, each
  partition off it with its newest version, and what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError, StorageNotFoundError
from fsstate.inspect.catalog import StoreRef, find_stores
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import list_versions
from fsstate.store.lineage import list_branches

__all__ = [
    "SHUFFLE_PARTITIONS",
    "CheckpointCheck",
    "CheckpointGap",
    "SparkCheckpoint",
    "batch_timestamp_ms",
    "check_checkpoint",
    "checkpoint_uri",
    "offsets_metadata",
    "query_stores",
    "read_checkpoint",
    "read_query_id",
]

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def checkpoint_uri(location: str) -> str:
    """A checkpointLocation as a FileIO URI (Hadoop's ``file:/path`` becomes ``/path``)."""
    if location.startswith("file:") and not location.startswith("file://"):
        return location[len("file:") :]
    return location


def _batches(fileio: FileIO, log: str) -> list[int]:
    out = []
    for entry in fileio.list(log):
        name = entry.path.rsplit("/", 1)[-1]
        if name.isdigit():
            out.append(int(name))
    return sorted(out)


@dataclass(frozen=True)
class SparkCheckpoint:
    """A streaming query's checkpoint, as read by :func:`read_checkpoint`.

    Attributes:
        fileio: the checkpoint directory.
        query_id: the query's id (``metadata``).
        commits: batch ids with a commit entry (completed), ascending.
    """

    fileio: FileIO
    query_id: str
    commits: tuple[int, ...]

    @property
    def committed(self) -> int | None:
        """The newest completed batch (None: none)."""
        return self.commits[-1] if self.commits else None

    def planned(self, batch: int) -> bool:
        """Whether ``batch`` has an offsets entry (it was planned; it may not have completed)."""
        return self.fileio.exists(f"offsets/{batch}")

    def partitions_at(self, batch: int) -> int:
        """The state partition count of ``batch`` (its offsets entry's shuffle partitions).

        Raises:
            ConfigError: the entry is missing or does not say.
        """
        meta = offsets_metadata(self.fileio, batch)
        try:
            return int(meta["conf"][SHUFFLE_PARTITIONS])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"the checkpoint's offsets entry {self.fileio.describe(f'offsets/{batch}')} "
                f"does not give {SHUFFLE_PARTITIONS}; fsstate reads offsets logs of Spark 4 (v1)"
            ) from None


def offsets_metadata(fileio: FileIO, batch: int) -> dict[str, Any]:
    """The batch metadata of ``batch``'s offsets entry (its second line, JSON): what Spark
    recorded when it planned the batch (``batchTimestampMs``, ``conf``, ...).

    Raises:
        ConfigError: the entry is missing or is not a Spark 4 (v1) offsets entry.
    """
    path = f"offsets/{batch}"
    where = fileio.describe(path)
    try:
        lines = fileio.read_bytes(path).decode().splitlines()
    except StorageNotFoundError:
        raise ConfigError(
            f"the checkpoint has no offsets entry for batch {batch} ({where})"
        ) from None
    try:
        meta = json.loads(lines[1])
    except (IndexError, ValueError):
        meta = None
    if not isinstance(meta, dict):
        raise ConfigError(
            f"the checkpoint's offsets entry {where} has no batch metadata (version line "
            f"{lines[:1]}); fsstate reads offsets logs of Spark 4 (v1)"
        )
    return meta


def batch_timestamp_ms(fileio: FileIO, batch: int) -> int:
    """When Spark planned ``batch`` (``batchTimestampMs`` of its offsets entry): the same for
    every attempt and re-run of one planning, another for a batch planned anew (a copied,
    restored or rolled-back checkpoint).

    Raises:
        ConfigError: the entry is missing or does not say.
    """
    value = offsets_metadata(fileio, batch).get("batchTimestampMs")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"the checkpoint's offsets entry {fileio.describe(f'offsets/{batch}')} gives no "
            f"batchTimestampMs ({value!r}); fsstate reads offsets logs of Spark 4 (v1)"
        )
    return value


def read_query_id(fileio: FileIO) -> str:
    """The query id a checkpoint's ``metadata`` records (1 GET).

    Raises:
        ConfigError: the directory holds no checkpoint (no ``metadata``) or it is unreadable.
    """
    where = fileio.describe("metadata")
    try:
        text = fileio.read_bytes("metadata").decode()
    except StorageNotFoundError:
        raise ConfigError(
            f"no streaming checkpoint at {fileio.describe('')} (no {where}): give the "
            "checkpointLocation of the query"
        ) from None
    try:
        return str(json.loads(text.splitlines()[0])["id"])
    except (IndexError, KeyError, TypeError, ValueError):
        raise ConfigError(
            f"the checkpoint's {where} names no query id; is it a streaming checkpoint?"
        ) from None


def read_checkpoint(fileio: FileIO) -> SparkCheckpoint:
    """Read a streaming checkpoint's id and batch logs (see the module docstring).

    Raises:
        ConfigError: the directory holds no checkpoint (no ``metadata``) or it is unreadable.
    """
    query_id = read_query_id(fileio)
    return SparkCheckpoint(fileio, query_id, tuple(_batches(fileio, "commits")))


BEHIND_REMEDY = (
    "the query's restart fails on the missing versions: restore the state directory and the "
    "checkpoint from one backup, or start the query on a new checkpoint and state_uri"
)
AHEAD_REMEDY = (
    "the checkpoint is older than the state (restored from a backup, copied or rolled back?): "
    "its restart goes on on a branch of its own from the checkpoint's batch (the later "
    "versions are another lineage's and are never read by it)"
)


@dataclass(frozen=True)
class CheckpointGap:
    """The partitions of one operator whose newest version does not match the checkpoint.

    Attributes:
        query: the query id.
        operator: the operator (store) name.
        batch: the checkpoint's last committed batch (None: it committed none).
        behind: (partition, its newest version) of each partition below ``batch``.
        ahead: (partition, its newest version) of each partition above ``batch`` (and above
            the batch in flight).
    """

    query: str
    operator: str
    batch: int | None
    behind: tuple[tuple[int, int], ...]
    ahead: tuple[tuple[int, int], ...]

    def describe(self) -> str:
        """One line naming the operator, each partition off the checkpoint, and the remedy."""
        done = "no batch" if self.batch is None else f"batch {self.batch}"
        parts = [f"partition {p} is behind at {v}" for p, v in self.behind]
        parts += [f"partition {p} is ahead at {v}" for p, v in self.ahead]
        remedy = BEHIND_REMEDY if self.behind else AHEAD_REMEDY
        return (
            f"operator {self.operator!r} of query {self.query}: the checkpoint committed "
            f"{done}; {', '.join(parts)}. {remedy[0].upper()}{remedy[1:]}"
        )

    def to_doc(self) -> dict[str, Any]:
        """The gap as a JSON document."""
        return {
            "query": self.query,
            "operator": self.operator,
            "committed_batch": self.batch,
            "behind": dict(self.behind),
            "ahead": dict(self.ahead),
        }


@dataclass(frozen=True)
class CheckpointCheck:
    """What :func:`check_checkpoint` found.

    Attributes:
        location: the checkpoint directory (full location).
        query: its query id.
        batch: its last committed batch (None: none).
        in_flight: the planned batch after it, when some partition committed it already (the
            restart re-runs and adopts it; None: none).
        gaps: operators with partitions behind or ahead.
        state: where the query's state was looked for (full location).
        stores: stores compared (0 with a committed batch: the query's state is not there).
    """

    location: str
    query: str
    batch: int | None
    in_flight: int | None
    gaps: tuple[CheckpointGap, ...]
    state: str
    stores: int

    @property
    def no_state(self) -> bool:
        """Whether the checkpoint committed a batch and no state of its query was found."""
        return self.batch is not None and not self.stores

    @property
    def ok(self) -> bool:
        """Whether every partition can continue the checkpoint (ahead is a note: the
        checkpoint's restart branches)."""
        return not any(g.behind for g in self.gaps) and not self.no_state

    def describe(self) -> list[str]:
        """One line per thing that does not match (empty when it all does)."""
        lines = [g.describe() for g in self.gaps]
        if self.no_state:
            lines.append(
                f"query {self.query}: the checkpoint committed batch {self.batch}, but no state "
                f"of the query is under {self.state}. If that is where its tiered() state lives "
                f"(<state_uri>/<query id>), {BEHIND_REMEDY}; else give the query's state_uri"
            )
        return lines

    def to_doc(self) -> dict[str, Any]:
        """The check as a JSON document."""
        return {
            "location": self.location,
            "query": self.query,
            "committed_batch": self.batch,
            "in_flight_batch": self.in_flight,
            "state": self.state,
            "stores": self.stores,
            "gaps": [g.to_doc() for g in self.gaps],
        }


def query_stores(
    fileio: FileIO, ckpt: SparkCheckpoint, operator: str | None = None
) -> tuple[list[StoreRef], FileIO]:
    """The stores of ``ckpt``'s query under the state root ``fileio`` (a ``tiered()``
    state_uri: its ``<query id>`` directory; or that directory itself), and that query root.

    Costs one recursive listing (two when the first finds nothing)."""
    stores = find_stores(fileio, prefix=ckpt.query_id, operator=operator)
    if not stores and fileio.describe("").rstrip("/").endswith("/" + ckpt.query_id):
        return find_stores(fileio, prefix="", operator=operator), fileio
    return stores, fileio.child(ckpt.query_id)


def _on_a_branch(state: FileIO | None, store: StoreRef, batch: int) -> bool:
    """Whether a branch of ``store`` holds ``batch`` or a newer version (one LIST, and one
    per branch)."""
    if state is None:
        return False
    root = store.root(state)
    return any(
        (list_versions(root, store.store_dir, b) or [-1])[-1] >= batch
        for b in list_branches(root, store.store_dir)
    )


def check_checkpoint(
    ckpt: SparkCheckpoint,
    stores: list[StoreRef],
    state: str,
    state_io: FileIO | None = None,
) -> CheckpointCheck:
    """Compare the newest version of each store of ``ckpt``'s query with its commit log (see
    the module docstring).

    Args:
        ckpt: the query's checkpoint.
        stores: the query's stores (:func:`fsstate.inspect.catalog.find_stores` under its state
            root, ``<state_uri>/<query id>``).
        state: the full location of that state root (for messages).
        state_io: the state root the stores were found under (their branches are looked at
            for partitions whose trunk is behind; None: not looked at).

    Returns:
        The check (an operator with no store at all is not known here:
        :func:`fsstate.inspect.verify.missing_partitions` finds partitions without a version).
    """
    batch = ckpt.committed
    where = ckpt.fileio.describe("")
    ckpt_state = state_io
    base = -1 if batch is None else batch
    at_next = any(s.latest == base + 1 for s in stores)
    flight = base + 1 if at_next and ckpt.planned(base + 1) else None
    groups: dict[str, list[StoreRef]] = {}
    for s in stores:
        groups.setdefault(s.operator, []).append(s)
    out: list[CheckpointGap] = []
    for operator, members in groups.items():
        behind = tuple(
            (s.partition, s.latest)
            for s in members
            if s.latest < base and not _on_a_branch(ckpt_state, s, base)
        )
        ahead = tuple(
            (s.partition, s.latest) for s in members if s.latest > base and s.latest != flight
        )
        if behind or ahead:
            out.append(CheckpointGap(ckpt.query_id, operator, batch, behind, ahead))
    return CheckpointCheck(where, ckpt.query_id, batch, flight, tuple(out), state, len(stores))
