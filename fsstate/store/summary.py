"""Version summaries: what each committed version did, recorded in its manifest.

:class:`SummaryRecorder` belongs to a :class:`fsstate.store.partition.PartitionStore` that
records summaries (``StoreConfig.record_summary``, on by default); its commit builds the
version's :class:`fsstate.stats.VersionSummary` (:meth:`SummaryRecorder.build`) after sealing
its tables and before publishing the manifest, which carries it (``summary``). The figures are
defined in :mod:`fsstate.stats`; this module states how each is measured.

* ``rows_total``: per table, its live-row count. A table starts from the count its version's
  summary recorded (0 for a new table or one without runs) and follows every change
  (:mod:`fsstate.tables.counts`: per dirty key once per seal, blind writes resolved in one
  lookup per seal, batched writes and range deletes where they happen, a batched write into a
  table without runs once the commit or a spill has sorted it). A table whose count is
  unknown (its version was written by an older fsstate, or without summaries) is counted once by
  reading it whole at the next commit (:meth:`fsstate.tables.scan.ScanTable.count_live_rows`),
  so one commit per store pays a full read and every later one is exact for free. A table
  that is not loaded keeps its count from the parent's summary.
* ``rows_updated`` / ``rows_removed`` / ``rows_expired``: the tables' row tallies since the
  store's last commit (or since it was opened, caught up or adopted a version).
* I/O: the store's :class:`fsstate.storage.runfile.IoTally` since its last commit: the commit's
  own files, spills, compactions (a background round that ends after the commit counts in the
  next version), first reads of cold data, catch-up reads. Opening reads only the manifest.
* Memory at the commit: the store's ``memory_bytes()``, of which views (sampled estimate)
  and runs held in memory.
* ``disk_bytes`` / ``files_total``: the manifest's files. ``versions_retained``: the versions
  of the branch retention keeps after the commit: the store's listing when it has one, else
  the chain of consecutive versions ending here (``chain_from``), at most ``retain_versions``;
  no listing is made for it.

Invariants:

* A commit that fails or is not published changes no tally: a retry records the same epoch.
* Recording never reads or writes storage except the one-time count of a table whose count
  is unknown; with recording off nothing is counted and no summary is written.
"""

from __future__ import annotations

import time
from typing import Protocol

from fsstate.config import StoreConfig
from fsstate.stats import TableSummary, VersionSummary
from fsstate.storage.manifest import Manifest
from fsstate.storage.runfile import IoTally
from fsstate.tables import TableBase


class SummarySource(Protocol):
    """What a summary reads of its store (:class:`fsstate.store.partition.PartitionStore`)."""

    config: StoreConfig

    def memory_bytes(self) -> int:
        """Bytes the store holds in memory."""

    def table(self, name: str) -> TableBase:
        """The table, loaded if needed."""

    def listed_versions(self) -> list[int] | None:
        """The retained versions if known without listing."""


class SummaryRecorder:
    """The summary state of one store: its base version's summary and the epoch's marks."""

    def __init__(
        self, manifest: Manifest | None, tally: IoTally, tables: dict[str, TableBase]
    ) -> None:
        self._tally = tally
        self._tables = tables  # the store's loaded tables (its dict, kept up to date by it)
        self.base = manifest.summary if manifest is not None else None
        self.spills = 0
        self.bytes_spilled = 0
        self.at_compactions = 0  # the store's compactions when the epoch began
        self._io = (0, 0, 0, 0)
        self.last: VersionSummary | None = None  # the summary of the store's last commit
        self.mark(0)

    def mark(self, compactions: int) -> None:
        """Start a new epoch: the I/O, spill and compaction counts from now on."""
        t = self._tally
        self._io = (t.files_written, t.bytes_written, t.files_read, t.bytes_read)
        self.spills = self.bytes_spilled = 0
        self.at_compactions = compactions

    def spilled(self, written: int) -> None:
        """The store spilled ``written`` bytes."""
        if written:
            self.spills += 1
            self.bytes_spilled += written

    def start_table(self, t: TableBase, entry_runs: int) -> None:
        """A table was loaded: its count from the base summary (0 if it has no runs)."""
        if not t.counting:
            return
        known = self.base.tables.get(t.name) if self.base is not None else None
        t.uncounted.clear()  # counted afresh from the base, as the tally is reset
        t.live_rows = 0 if not entry_runs else (known.rows_total if known else None)

    def compactions(self) -> int:
        """Compactions of the store's loaded tables so far."""
        return sum(t.compactions for t in self._tables.values())

    def rebase(self, manifest: Manifest) -> None:
        """The store is now at ``manifest`` (caught up or adopted): counts and tallies from it."""
        self.base = manifest.summary
        for name, t in self._tables.items():
            entry = manifest.tables.get(name)
            self.start_table(t, len(entry.runs) if entry is not None else 0)
            t.row_tally.reset()
        self.mark(self.compactions())

    def build(self, store: SummarySource, manifest: Manifest, t0: float) -> VersionSummary | None:
        """The summary of ``manifest``, the version ``store`` is about to publish (its tables
        sealed); ``t0`` is when the commit started (``time.perf_counter``). None when the
        store records no summaries."""
        if not store.config.record_summary:
            return None
        s = VersionSummary()
        base_tables = self.base.tables if self.base is not None else {}
        tables: dict[str, TableSummary] = {}
        for name in manifest.tables:
            t = self._tables.get(name)
            known = base_tables.get(name)
            if t is None and (known is None or known.rows_total is None):
                t = store.table(name)  # unknown: loaded to be counted once (below)
            if t is None:
                tables[name] = TableSummary(known.rows_total if known else None)
                continue
            t.settle_counts()
            if t.live_rows is None:
                t.live_rows = int(t.count_live_rows())  # type: ignore[attr-defined]
            r = t.row_tally
            tables[name] = TableSummary(t.live_rows, r.updated, r.removed, r.expired)
        s.tables = tables
        totals = [ts.rows_total for ts in tables.values()]
        s.rows_total = None if None in totals else sum(x for x in totals if x is not None)
        s.rows_updated = sum(ts.rows_updated for ts in tables.values())
        s.rows_removed = sum(ts.rows_removed for ts in tables.values())
        s.rows_expired = sum(ts.rows_expired for ts in tables.values())
        io = self._tally
        s.files_written = io.files_written - self._io[0]
        s.bytes_written = io.bytes_written - self._io[1]
        s.files_read = io.files_read - self._io[2]
        s.bytes_read = io.bytes_read - self._io[3]
        s.memory_bytes = store.memory_bytes()
        loaded = [t for name in manifest.tables if (t := self._tables.get(name)) is not None]
        s.memory_sealed_bytes = sum(sum(r.memory_bytes for r in t.runs) for t in loaded)
        s.memory_hot_bytes = sum(t.hot_memory_bytes() for t in loaded)
        s.spills, s.bytes_spilled = self.spills, self.bytes_spilled
        s.compactions = max(0, self.compactions() - self.at_compactions)
        refs = [r for e in manifest.tables.values() for r in (*e.runs, *e.ttl_runs)]
        sizes = {r.path: r.size_bytes for r in refs}
        s.disk_bytes, s.files_total = sum(sizes.values()), len(sizes)
        s.versions_retained = _retained(store, manifest)
        s.commit_ms = (time.perf_counter() - t0) * 1000
        return s

    def committed(self, manifest: Manifest) -> None:
        """``manifest`` (built with a summary) was published: it is the base from now on."""
        self.base = self.last = manifest.summary
        for t in self._tables.values():
            t.row_tally.reset()
        self.mark(self.compactions())


def _retained(store: SummarySource, manifest: Manifest) -> int:
    """Versions of the branch kept once ``manifest`` is committed (no listing is made)."""
    keep = store.config.retain_versions
    v = manifest.version
    listed = store.listed_versions()
    if listed is not None:
        return len({x for x in listed if x > v - keep and x < v} | {v})
    chain_from = manifest.chain_from if manifest.chain_from is not None else v
    return min(keep, v - chain_from + 1)
