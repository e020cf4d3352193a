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
commits the batch Spark's repartition adds), recording when its batch was planned; which
lineage of the state a checkpoint runs on, and whether it is whole, is
:mod:`fsstate.inspect.lineage`'s (:func:`fsstate.inspect.lineage.check_checkpoint`).

Invariants:

* Read only (1 GET of ``metadata``, 1 LIST of ``commits/``, 1 GET per offsets entry read, 1
  HEAD for the batch after the last committed one); nothing here writes to a checkpoint.
* A file that is missing or does not parse is a :class:`fsstate.errors.ConfigError` naming
  the file: a checkpoint fsstate cannot read is never guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError, StorageNotFoundError
from fsstate.inspect.catalog import StoreRef, all_stores
from fsstate.storage.fileio import FileIO

__all__ = [
    "SHUFFLE_PARTITIONS",
    "SparkCheckpoint",
    "batch_timestamp_ms",
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


def query_stores(
    fileio: FileIO, ckpt: SparkCheckpoint, operator: str | None = None
) -> tuple[list[StoreRef], FileIO]:
    """Every store (every generation, :func:`fsstate.inspect.catalog.all_stores`) of
    ``ckpt``'s query under the state root ``fileio`` (a ``tiered()`` state_uri: its
    ``<query id>`` directory; or that directory itself), and that query root.

    Costs one recursive listing (two when the first finds nothing)."""
    stores = all_stores(fileio, prefix=ckpt.query_id, operator=operator)
    if not stores and fileio.describe("").rstrip("/").endswith("/" + ckpt.query_id):
        return all_stores(fileio, prefix="", operator=operator), fileio
    return stores, fileio.child(ckpt.query_id)
