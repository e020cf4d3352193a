"""fsstate: a tiered local state engine for stream processors.

Hot state lives in memory (Python views over Arrow segments), cold state in Parquet runs;
tombstone deletes, per-row TTL with a min-expiry secondary index, and epoch snapshots without a
WAL (incremental files, atomic manifests, lazy restore).

Entry points: :meth:`PartitionStore.open`; :func:`read_table` / :func:`read_changes` read any
retained version of a table as Arrow (:mod:`fsstate.inspect`); ``python -m fsstate`` is the
command line (:mod:`fsstate.cli`).

Layout, imports only going down (held by the import-linter contracts in ``pyproject.toml``)::

    cli          the command line (list, stats, show, diff, verify, compact, gc)
    operators/   whole-batch stateful operators   |   inspect/   read-only views of versions
    store/       PartitionStore: commit, restore, catch-up, retention
    controller   one byte budget per process
    compaction   background merges
    tables/      value / list / map tables: views, batched ops, TTL index, accessors
    storage/     FileIO, run files, manifests, block cache (the only code touching files)
    format/      schemas, segments, tombstones, key filters, file references
    errors, interfaces, config, stats, osmem, codegen, exports   (leaves)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsstate.config import EngineConfig, StoreConfig, parse_bytes
from fsstate.errors import FsStateError
from fsstate.exports import lazy_exports
from fsstate.interfaces import StateKind
from fsstate.stats import CommitInfo, StoreStats, TableStats
from fsstate.store import PartitionStore
from fsstate.tables import ListTable, MapTable, ValueTable

if TYPE_CHECKING:
    from fsstate.inspect import read_changes, read_table

# the inspection API on first use (:mod:`fsstate.exports`): the engine's own users (a Spark
# worker's store) never read a version as a table
__getattr__ = lazy_exports(
    __name__, {"read_changes": "fsstate.inspect", "read_table": "fsstate.inspect"}
)

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
    "read_changes",
    "read_table",
]

__version__ = "0.1.0"
