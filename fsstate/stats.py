"""Figures a store reports: what a commit did, and per-store and per-table statistics.

Invariants:

* Plain data: built by :class:`fsstate.store.partition.PartitionStore` (``commit``,
  ``stats``), the block cache and the memory controller, read by users, the Spark layer and
  the demo; nothing here touches storage or imports another fsstate module.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CommitInfo:
    """What a commit did."""

    version: int
    files_written: int
    bytes_written: int
    duration_ms: float
    adopted: bool = False  # another attempt had published the version first (same parent)


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
