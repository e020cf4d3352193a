"""fsstate: a tiered local state engine for stream processors.

Hot state lives in memory (Python views over Arrow segments), cold state in Parquet runs;
tombstone deletes, per-row TTL with a min-expiry secondary index, and epoch snapshots without a
WAL (incremental files, atomic manifests, lazy restore).

Entry point: :meth:`PartitionStore.open`.
"""

from __future__ import annotations

from fsstate.config import StoreConfig, parse_bytes
from fsstate.errors import FsStateError
from fsstate.store import CommitInfo, PartitionStore, StoreStats, TableStats
from fsstate.tables import ListTable, MapTable, ValueTable

__all__ = [
    "CommitInfo",
    "FsStateError",
    "ListTable",
    "MapTable",
    "PartitionStore",
    "StoreConfig",
    "StoreStats",
    "TableStats",
    "ValueTable",
    "parse_bytes",
]

__version__ = "0.1.0"
