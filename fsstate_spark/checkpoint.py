"""What fsstate reads of a Spark streaming checkpoint: the query id and the batch logs.

A checkpoint directory holds (Spark 4.x, measured with pyspark 4.3):

* ``metadata``: one JSON line, ``{"id": "<query id>"}`` (stable across restarts: the id
  ``tiered()`` state is kept under);
* ``offsets/<batch id>``: a version line (``v1``), then the batch's metadata as JSON (its
  ``conf`` holds ``spark.sql.shuffle.partitions``, the partition count of the query's state
  for that batch: Spark restores it from here on a restart, and its offline repartition of a
  checkpoint writes a new batch with the new count), then one line per source;
* ``commits/<batch id>``: written when the batch completed.

Invariants:

* Read only, through :class:`fsstate.storage.fileio.FileIO` (1 GET of ``metadata``, 1 LIST
  of ``commits/``, 1 GET per offsets entry read); nothing here writes to a checkpoint.
* A file that is missing or does not parse is a :class:`fsstate.errors.ConfigError` naming
  the file: a checkpoint fsstate cannot read is never guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from fsstate.errors import ConfigError, StorageNotFoundError
from fsstate.storage.fileio import FileIO

__all__ = ["SHUFFLE_PARTITIONS", "SparkCheckpoint", "read_checkpoint"]

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


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

    def partitions_at(self, batch: int) -> int:
        """The state partition count of ``batch`` (its offsets entry's shuffle partitions).

        Raises:
            ConfigError: the entry is missing or does not say.
        """
        path = f"offsets/{batch}"
        where = self.fileio.describe(path)
        try:
            lines = self.fileio.read_bytes(path).decode().splitlines()
        except StorageNotFoundError:
            raise ConfigError(
                f"the checkpoint has no offsets entry for batch {batch} ({where})"
            ) from None
        try:
            conf = json.loads(lines[1])["conf"]
            return int(conf[SHUFFLE_PARTITIONS])
        except (IndexError, KeyError, TypeError, ValueError):
            raise ConfigError(
                f"the checkpoint's offsets entry {where} does not give "
                f"{SHUFFLE_PARTITIONS} (version line {lines[:1]}); fsstate reads offsets logs "
                "of Spark 4 (v1)"
            ) from None


def read_checkpoint(fileio: FileIO) -> SparkCheckpoint:
    """Read a streaming checkpoint's id and batch logs (see the module docstring).

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
        query_id = str(json.loads(text.splitlines()[0])["id"])
    except (IndexError, KeyError, TypeError, ValueError):
        raise ConfigError(
            f"the checkpoint's {where} names no query id; is it a streaming checkpoint?"
        ) from None
    return SparkCheckpoint(fileio, query_id, tuple(_batches(fileio, "commits")))
