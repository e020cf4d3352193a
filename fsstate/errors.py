"""The one exception root of fsstate and its typed subclasses.

Invariants:

* Every error the engine raises on purpose is a :class:`FsStateError`.
* Every message names the object concerned (state name, file path, version, setting) and
  says what to do about it.
* Errors about bad input also derive from the matching builtin (``ValueError``, ``KeyError``,
  ``TypeError``) so callers written against plain Python keep working.
* Raising an input error never leaves a partial write behind: validation happens before any
  state changes.
"""

from __future__ import annotations

DAMAGE_REMEDY = (  # what every error about a damaged state file tells the user to do
    "restore the state directory from a backup taken with its checkpoint, or go back to the "
    "newest version whose files are whole (a Spark query: fsstate-spark repair <checkpoint>)"
)


class FsStateError(Exception):
    """Root of every error raised by fsstate."""


class ConfigError(FsStateError, ValueError):
    """A setting is invalid (bad memory limit, unusable state URI, bad retention...)."""


class PartitionCountError(ConfigError):
    """State written with one partition count was reached with another: rescale it first."""


class SchemaError(FsStateError, TypeError):
    """A value, key or table does not match the schema of its state variable."""


class SchemaEvolutionError(SchemaError):
    """A state variable was declared again with a schema its stored rows cannot be read as
    (a narrowed or changed type, a new or newly non-nullable field, a changed key); nothing was
    written. A removed or renamed field is allowed (:mod:`fsstate.format.evolution`)."""


class KeyArityError(SchemaError):
    """A grouping key or user key has the wrong number of fields."""


class InvalidTtlError(FsStateError, ValueError):
    """A TTL duration is negative, zero or not an integer number of milliseconds."""


class UnknownStateError(FsStateError, KeyError):
    """A state variable that was never declared (or was dropped) was asked for."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence readable
        return str(self.args[0]) if self.args else ""


class StateKindError(FsStateError, TypeError):
    """A state variable was declared again with another kind (value / list / map)."""


class StorageError(FsStateError, OSError):
    """Storage could not be read or written (permissions, missing directory, I/O failure)."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """A file or object that was expected on storage does not exist."""


class CommitConflictError(FsStateError):
    """Another attempt published the version on another history; nothing was published."""


class LineageConflictError(CommitConflictError):
    """The version was published by another planning of the same epoch (another lineage: a
    copied, restored or rolled-back checkpoint), on the same parent; nothing was published.

    Attributes:
        version: the version both built.
    """

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


class LineageMismatchError(FsStateError):
    """The state a store holds at a version is not the version its caller's lineage committed
    (its checksum differs from the one the caller recorded): it belongs to another history."""


class VersionNotFoundError(FsStateError, LookupError):
    """A store was asked to open a version that has no manifest (never committed or deleted)."""


class CorruptFileError(FsStateError):
    """A state file exists but cannot be decoded; ``path`` names it."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class ManifestCorruptError(CorruptFileError):
    """A manifest is truncated, fails its checksum, or has an unknown format version."""


class DataFileCorruptError(CorruptFileError):
    """A Parquet data or index file is missing, truncated or fails to decode."""


class CommitError(FsStateError):
    """A commit failed; the previous version is intact and the store can retry the commit."""


class PartialStateError(FsStateError):
    """A read would return part of an operator's state: some of its partitions hold no version
    of the lineage read. Nothing was read; the message names the partitions and how to read
    the others anyway."""


class GarbageCollectionError(FsStateError):
    """A garbage collection could not read everything it decides from (a listing, a manifest,
    a layout record) or took too long to decide: nothing was deleted; run it again."""


class StoreClosedError(FsStateError):
    """A closed store (or a table of it) was used."""
