"""fsstate: a tiered local state engine for stream processors.

Hot state lives in memory (Python views over Arrow segments), cold state in Parquet runs;
tombstone deletes, per-row TTL with a min-expiry secondary index, and epoch snapshots without a
WAL (incremental files, atomic manifests, lazy restore).

Entry point: :meth:`PartitionStore.open`.

Layout, imports only going down (held by the import-linter contracts in ``pyproject.toml``)::

    store/       PartitionStore: commit, restore, catch-up, retention
    controller   one byte budget per process
    compaction   background merges
    tables/      value / list / map tables: views, batched ops, TTL index, accessors
    storage/     FileIO, run files, manifests, block cache (the only code touching files)
    format/      schemas, segments, tombstones, key filters, file references
    errors, interfaces, config, stats, osmem, codegen   (leaves)
"""

from __future__ import annotations

from fsstate.config import EngineConfig, StoreConfig, parse_bytes
from fsstate.errors import FsStateError
from fsstate.interfaces import StateKind
from fsstate.stats import CommitInfo, StoreStats, TableStats
from fsstate.store import PartitionStore
from fsstate.tables import ListTable, MapTable, ValueTable

__all__ = [
    "CommitInfo",
    "EngineConfig",
    "FsStateError",
    "ListTable",
    "MapTable",
    "PartitionStore",
    "StateKind",
    "StoreConfig",
    "StoreStats",
    "TableStats",
    "ValueTable",
    "parse_bytes",
]

__version__ = "0.1.0"
