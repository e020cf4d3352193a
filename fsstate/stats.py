"""Figures a store reports: what a commit did, what each version did (its summary, kept in
the version's manifest), and per-store and per-table statistics.

:class:`VersionSummary` is the ``summary`` field of a manifest
(:mod:`fsstate.storage.manifest`), like a pyiceberg snapshot summary: written by
:meth:`fsstate.store.partition.PartitionStore.commit` (built by :mod:`fsstate.store.summary`),
read back with :func:`fsstate.storage.manifest.read_summary`. Its JSON form (snake_case,
``summary_format`` :data:`SUMMARY_FORMAT`)::

    {"summary_format": 1, "rows_total": 10, "rows_updated": 3, "rows_removed": 1,
     "rows_expired": 0, "bytes_written": 900, "files_written": 1, "bytes_read": 0,
     "files_read": 0, "memory_bytes": ..., "memory_hot_bytes": ..., "memory_sealed_bytes": ...,
     "bytes_spilled": 0, "spills": 0, "compactions": 0, "commit_ms": 1.5, "disk_bytes": 900,
     "files_total": 1, "versions_retained": 4,
     "tables": {"<name>": {"rows_total": 10, "rows_updated": 3, "rows_removed": 1,
                           "rows_expired": 0}}}

What the figures mean (an epoch is what happened between the store's previous commit and this
one; :mod:`fsstate.store.summary` states how each is measured):

* ``rows_total``: live rows of the version: a value table counts 1 per key, a list 1 per
  element, a map 1 per entry. Rows TTL expiry removed are not counted; a row past its expiry
  that no expiry run has removed yet still is (expiry runs at the epoch's clock before the
  commit, so the count is what a reader of the version sees at its ``clock_ms``). Exact; None
  (JSON null) when unknown.
* ``rows_updated``: rows the epoch wrote (put, update, append, map put), each row once per seal
  (a row written twice before one seal counts once; a spill between the two writes makes two).
* ``rows_removed``: live rows the user deleted or cleared (clear, remove, delete_many,
  delete_range, a list's ``put`` replacing its elements); ``rows_expired``: rows TTL expiry
  removed.
* ``bytes_written`` / ``files_written``: data files the epoch wrote (seals, spills, compaction,
  TTL index), the manifest excluded; ``bytes_read`` / ``files_read``: data the epoch read from
  storage (restore, catch-up, first touch of cold data; block cache hits read nothing): a whole
  file or a footer counts a file, a row group its bytes only.
* ``memory_bytes`` / ``memory_hot_bytes`` / ``memory_sealed_bytes``: the store's memory at the
  commit (all, the per-key views, the in-memory runs); ``bytes_spilled`` / ``spills`` /
  ``compactions``: the epoch's.
* ``commit_ms``: the commit up to the manifest's publish (the publish cannot be inside).
* ``disk_bytes`` / ``files_total``: the version's live data files; ``versions_retained``: the
  versions of its branch retention keeps once it is committed.
* ``tables``: the row figures per table.

Invariants:

* Plain data: built by :class:`fsstate.store.partition.PartitionStore` (``commit``,
  ``stats``), the block cache and the memory controller, read by users, the Spark layer and
  the demo; nothing here touches storage or imports another fsstate module.
* ``VersionSummary.from_json(s.to_json()) == s``; keys a newer writer added are kept (in
  ``extra``) and written back, never an error; a missing key reads as its zero (None for
  ``rows_total``); a ``summary_format`` newer than :data:`SUMMARY_FORMAT` is read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

SUMMARY_FORMAT = 1


@dataclass
class TableSummary:
    """The row figures of one table in a :class:`VersionSummary`."""

    rows_total: int | None = 0
    rows_updated: int = 0
    rows_removed: int = 0
    rows_expired: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "rows_total": self.rows_total,
            "rows_updated": self.rows_updated,
            "rows_removed": self.rows_removed,
            "rows_expired": self.rows_expired,
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> TableSummary:
        """Inverse of :meth:`to_json` (unknown keys ignored)."""
        total = obj.get("rows_total")
        return TableSummary(
            None if total is None else int(total),
            int(obj.get("rows_updated") or 0),
            int(obj.get("rows_removed") or 0),
            int(obj.get("rows_expired") or 0),
        )


@dataclass
class VersionSummary:
    """What one committed version did (see the module docstring for each figure)."""

    rows_total: int | None = 0
    rows_updated: int = 0
    rows_removed: int = 0
    rows_expired: int = 0
    bytes_written: int = 0
    files_written: int = 0
    bytes_read: int = 0
    files_read: int = 0
    memory_bytes: int = 0
    memory_hot_bytes: int = 0
    memory_sealed_bytes: int = 0
    bytes_spilled: int = 0
    spills: int = 0
    compactions: int = 0
    commit_ms: float = 0.0
    disk_bytes: int = 0
    files_total: int = 0
    versions_retained: int = 0
    tables: dict[str, TableSummary] = field(default_factory=dict)
    summary_format: int = SUMMARY_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)  # keys of a newer writer, kept

    def to_json(self) -> dict[str, Any]:
        """JSON form (the manifest's ``summary`` field)."""
        out: dict[str, Any] = dict(self.extra)
        for name in _SUMMARY_FIGURES:
            out[name] = getattr(self, name)
        out["tables"] = {name: t.to_json() for name, t in sorted(self.tables.items())}
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> VersionSummary:
        """Inverse of :meth:`to_json`; unknown keys are kept in ``extra``.

        Raises:
            ValueError, TypeError: a known field has the wrong type.
        """
        if not isinstance(obj, dict):
            raise TypeError(f"a version summary is a JSON object, got {type(obj).__name__}")
        s = VersionSummary()
        for name in _SUMMARY_FIGURES:
            if name not in obj:
                continue
            value = obj[name]
            if name == "rows_total":
                s.rows_total = None if value is None else int(value)
            elif name == "commit_ms":
                s.commit_ms = float(value)
            else:
                setattr(s, name, int(value))
        tables = obj.get("tables") or {}
        s.tables = {str(n): TableSummary.from_json(t) for n, t in tables.items()}
        s.extra = {k: v for k, v in obj.items() if k not in _SUMMARY_KNOWN}
        return s


_SUMMARY_FIGURES = tuple(
    f.name for f in fields(VersionSummary) if f.name not in ("tables", "extra")
)
"""The scalar figures of a :class:`VersionSummary`, in field order (computed once)."""
_SUMMARY_KNOWN = frozenset((*_SUMMARY_FIGURES, "tables"))


@dataclass
class CommitInfo:
    """What a commit did."""

    version: int
    files_written: int
    bytes_written: int
    duration_ms: float
    adopted: bool = False  # another attempt had published the version first (same parent)
    summary: VersionSummary | None = None  # the version's summary (None: not recorded)


@dataclass
class TableStats:
    """Per-table figures."""

    kind: str
    hot_keys: int
    hot_bytes_estimate: int
    runs: int
    runs_in_memory: int
    segment_bytes: int
    disk_bytes: int
    disk_rows: int
    ttl_entries: int | None
    memory_bytes: int = 0  # segment + hot + TTL index bytes

    @classmethod
    def of_files(cls, kind: str, runs: int, disk_bytes: int, disk_rows: int) -> TableStats:
        """Figures of a table that is not loaded: its files only."""
        return cls(kind, 0, 0, runs, 0, 0, disk_bytes, disk_rows, None)


@dataclass
class StoreStats:
    """Per-store figures for users (the Spark layer and the demo print them)."""

    operator: str
    partition: int
    version: int | None
    memory_bytes: int
    disk_bytes: int
    commits: int
    bytes_written: int
    spills: int
    compactions: int
    tables: dict[str, TableStats] = field(default_factory=dict)
    dead_runs_dropped: int = 0  # runs a range tombstone hid entirely, dropped unread


@dataclass
class CacheStats:
    """Counters of a block cache."""

    capacity_bytes: int
    used_bytes: int
    entries: int
    hits: int
    misses: int
    evictions: int


@dataclass
class ProcessStats:
    """Process-wide figures (:meth:`fsstate.controller.MemoryController.stats`)."""

    memory_limit_bytes: int
    memory_bytes: int
    disk_bytes: int
    stores: int
    spills: int
    bytes_spilled: int
    reclaims: int
    compactions: int
    compaction_bytes_written: int
    compaction_errors: int
    cache: CacheStats
    store_stats: list[StoreStats] = field(default_factory=list)
