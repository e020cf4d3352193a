"""Versions a tool publishes on a store no query owns: ``fsstate compact``'s.

:func:`compact_store` opens a store at its newest version ``v``, merges each table's runs into
one and publishes ``v + 1`` through an epoch (:meth:`fsstate.store.epoch.EpochRun.of_store`),
as every version is published: the epoch record written the way every epoch writes it, here
``v``'s own record (compaction changes no row and nothing the record says: the watermark,
event-time maxima and combine record read from ``v + 1`` are ``v``'s), without a writer (a tool
is no query run). :func:`streaming_owner` says which stores it must not touch.

Invariants:

* Only stores no streaming writer owns are compacted here (the caller asks
  :func:`streaming_owner` first): a store whose newest version records a writer (a ``tiered()``
  task and the operator runner commit with one), or of an operator whose layout record names
  the kind that runs it (``tiered()`` and the runner record it at first use; a rescaled
  store's versions record no writer, its record does). Their versions are batch ids, so a
  version published beside them would meet the query's next batch (a
  :class:`fsstate.errors.CommitConflictError` there); they compact in their own tasks.
* Reads of ``v + 1`` return exactly what ``v`` returns: the store's clock is set to ``v``'s
  commit clock, so nothing expires by wall time, and every run is merged with the store's own
  compaction (tombstones kept as its bottom merges keep them).
* The epoch's failure rule: an error anywhere discards the store; ``v`` stays intact and
  ``v + 1`` is absent or whole. The store is closed when the call returns.
* The store is opened in its layout generation's directory (``layout``, as
  :func:`fsstate.store.layout.in_force` resolves it for its newest version).
"""

from __future__ import annotations

from dataclasses import dataclass

from fsstate.config import StoreConfig
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import Manifest, read_manifest
from fsstate.store.epoch import EpochRun
from fsstate.store.identity import WRITER_META, store_dir_for
from fsstate.store.layout import read_layouts
from fsstate.store.partition import PartitionStore
from fsstate.store.pool import StorePool
from fsstate.store.record import EpochRecord

__all__ = ["Compaction", "compact_store", "streaming_owner"]


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_store` did.

    Attributes:
        version: the version it published.
        runs_before: data runs of the store's tables before (the compacted version's).
        runs_after: data runs after (the published version's).
        bytes_written: bytes of the merged runs.
    """

    version: int
    runs_before: int
    runs_after: int
    bytes_written: int


def streaming_owner(fileio: FileIO, operator: str, newest: Manifest) -> str | None:
    """Who owns the store whose newest manifest is ``newest`` under the state root ``fileio``,
    if a streaming query or job does (see the module docstring; one read of the operator's
    layout records), else None."""
    writer = newest.meta.get(WRITER_META)
    if writer is not None:
        return f"a streaming query or operator job ({writer})"
    kind = read_layouts(fileio, operator)[0].kind
    if kind is not None:
        return f"a streaming query or operator job (a {kind} operator, as its layout records)"
    return None


def _runs(manifest: Manifest) -> int:
    return sum(len(e.runs) for e in manifest.tables.values())


def compact_store(
    fileio: FileIO,
    operator: str,
    partition: int,
    version: int,
    *,
    layout: str = "",
    config: StoreConfig | None = None,
) -> Compaction:
    """Merge each table's runs of ``version`` into one and publish ``version + 1`` (see the
    module docstring).

    Raises:
        VersionNotFoundError: ``version`` is not committed.
        CommitConflictError: ``version + 1`` was published meanwhile (by another writer).
        CommitError: storage failed; ``version`` is intact, retry is safe.
    """
    store_dir = store_dir_for(operator, partition, layout)
    before = read_manifest(fileio, store_dir, version)
    store = PartitionStore.open(fileio, operator, partition, version, config, layout=layout)
    with EpochRun.of_store(store, version + 1, pool=StorePool(max_idle=0)) as run:
        store.set_time(before.clock_ms if before.clock_ms is not None else before.created_ms)
        for name in store.table_names():
            store.table(name)
        written = store.compact(force=True)
        info = run.commit(EpochRecord.from_meta(store.meta))
    after = read_manifest(fileio, store_dir, info.version)
    return Compaction(info.version, _runs(before), _runs(after), written)
