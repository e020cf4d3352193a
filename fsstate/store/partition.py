"""PartitionStore: the named state tables of one (operator, partition), with versioned commits.

Directory layout under the root URI::

    <operator>/<partition>/manifests/<version:020d>.json   the trunk's committed versions
    <operator>/<partition>/branches/<lineage>/<version>.json  a lineage's (a query run's)
    <operator>/<partition>/data/<state>~<lineage>~...parquet  data runs and TTL index runs

(``<operator>/<layout>/<partition>/...`` for a store of a later layout generation, written by a
rescale: :mod:`fsstate.store.layout`; lineages, their forks and who writes each:
:mod:`fsstate.store.lineage`; file names: :mod:`fsstate.storage.naming`.) The table
declarations are :mod:`fsstate.store.declare`'s.

Invariants:

* Opening reads one manifest and nothing else: no data file is read until a key needs it, so
  opening costs the same for any state size. :meth:`PartitionStore.open` without ``version=``
  opens the newest committed version (one listing of the store's manifests first), never an
  empty store beside committed versions; an empty store is asked for with ``version=None``.
* ``commit(v)`` writes only what is not on storage yet, then publishes the manifest of ``v``
  once (put-if-absent); until then nothing of ``v`` is visible, and a failed commit leaves the
  previous version intact and can be retried. Another attempt's ``v`` is adopted (the store
  becomes that version) only if it is the same epoch's retry (the same parent, and a writer that
  is not another one: :func:`fsstate.store.commit.check_adoptable`), else refused with a typed
  error and nothing published: the protocol and its invariants are
  :mod:`fsstate.store.commit`'s.
* After each commit the store drops the version of its lineage that leaves the retained
  window, with the files only it named that its lineage wrote, without listing storage
  (:mod:`fsstate.store.retention`); every ``orphan_scan_every_commits``-th version it asks the
  background collector (:mod:`fsstate.store.collector`) to collect its directory across
  lineages (:mod:`fsstate.store.gc`), out of the commit.
* Every file the store writes is held under the writer's lease until a manifest the store
  published names it, or the store is closed (:mod:`fsstate.storage.leases`): no collection
  deletes it meanwhile, and a commit never publishes a file whose lease lapsed
  (:class:`fsstate.errors.CommitError`). The store's lineage and version are in every file's
  name (:mod:`fsstate.storage.naming`).
* Sequence numbers are per store, strictly increasing, and persisted in the manifest.

Requests on an object store (measured by ``FileIO.stats``, asserted against the S3 server in
``tests/fsstate/storage/test_object_store.py``), none of them a listing on the per-batch path:

* ``open``: 1 GET (the manifest); without ``version=``, 1 LIST of the manifests before it.
  Reading a key later: 1 GET per small run file it needs (read whole), or its footer and row
  group for larger ones; 0 for files this process read before (the block cache holds decoded
  files and footers, which never change).
* ``refresh`` across ``k`` versions: ``k`` GETs of manifests, plus the new data files of the
  tables that hold views.
* ``commit``: 1 PUT per changed table (its run; and one per TTL index change) and 1
  conditional PUT (the manifest); unchanged: the manifest only; 1 PUT of the writer's lease
  when a lease tag first meets the root (:mod:`fsstate.storage.leases`). Past the first
  ``retain_versions`` versions add 1 DELETE (the manifest leaving the window), 1 GET of the
  next manifest unless this store knows it, and, when that manifest retired files, 1 LIST of
  the lineage's fork marks (its own files) or 1 HEAD (files named before origins were) and 1
  bulk DELETE; once per process and store, 1 LIST of the lineage's manifests.
* every ``orphan_scan_every_commits``-th version, in the background: the collection's
  requests (:mod:`fsstate.store.gc`).
* compaction: 1 GET per input run not in the block cache, 1 PUT of the merged run
  (multipart above 8 MiB); the next commit publishes it.
* once per bucket and process, the probe of conditional writes: 2 PUTs, 1 GET, 1 DELETE.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import Any, Final

from fsstate import interfaces
from fsstate.config import StoreConfig
from fsstate.controller import MemoryController, get_controller
from fsstate.errors import CommitError, ConfigError, FsStateError
from fsstate.osmem import return_memory_to_os
from fsstate.stats import CommitInfo, StoreStats, TableStats
from fsstate.storage.depth import needs_merge
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import (
    Manifest,
    TableEntry,
    descends,
    list_versions,
    publish_manifest,
    read_manifest,
)
from fsstate.storage.runfile import RunContext
from fsstate.store.catchup import apply_plan, plan_store
from fsstate.store.collector import request_collection
from fsstate.store.commit import check_adoptable, link_to_base, seal_table, settle
from fsstate.store.declare import TableDeclarations
from fsstate.store.gc import collect
from fsstate.store.identity import WRITER_META, json_copy, safe_name, store_dir_for
from fsstate.store.lineage import carried, carried_meta, check_branch, fork_version, mark_forked
from fsstate.store.retention import Retention
from fsstate.store.summary import SummaryRecorder
from fsstate.tables import TableBase

__all__ = [
    "NEWEST",
    "WRITER_META",
    "CommitInfo",
    "PartitionStore",
    "StoreStats",
    "TableStats",
    "store_dir_for",
]

log = logging.getLogger("fsstate.store")


class Newest(enum.Enum):
    """The type of :data:`NEWEST`."""

    NEWEST = "newest"


NEWEST: Final = Newest.NEWEST  # PartitionStore.open's default: the newest committed version


class PartitionStore(TableDeclarations, interfaces.KeyedStore):
    """The state of one (operator, partition): named value, list and map tables.

    Use :meth:`open`; the constructor is internal.
    """

    def __init__(
        self,
        fileio: FileIO,
        operator: str,
        partition: int,
        manifest: Manifest | None,
        config: StoreConfig,
        controller: MemoryController | None = None,
        layout: str = "",
        branch: str = "",
    ) -> None:
        self.fileio = fileio
        self.operator = operator
        self.partition = partition
        self.config = config
        self.layout = layout  # the layout generation's directory ("" for generation 0)
        self.store_dir = store_dir_for(operator, partition, layout)
        self.branch = check_branch(branch)  # "" : the trunk (fsstate.store.lineage)
        self.version: int | None = manifest.version if manifest else None
        self.next_seq: int = manifest.next_seq if manifest else 0
        self.now_ms: int = int(time.time() * 1000)
        self._manifest = manifest
        # small JSON values kept with each version (see Manifest.meta), carried forward but
        # for the writer of a version read from storage: a store writes as whoever sets it
        # (fsstate.store.epoch, or its caller; absent: none recorded)
        self.meta: dict[str, Any] = carried(manifest)
        self._entries: dict[str, TableEntry] = dict(manifest.tables) if manifest else {}
        self._tables: dict[str, TableBase] = {}
        self._dropped = False
        self._closed = False
        self._retention = Retention(fileio, self.store_dir, self.branch)
        self._commits = 0
        self._bytes_written = 0
        self.spills = 0
        self.last_used = 0
        self.controller = controller or get_controller()
        self.ctx = RunContext(fileio, self.store_dir, config, self.controller.cache)
        self._track()
        self.summaries = SummaryRecorder(manifest, self.ctx.tally, self._tables)
        self.controller.register(self)

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        uri: str | Location | FileIO,
        operator: str,
        partition: int,
        version: int | Newest | None = NEWEST,
        config: StoreConfig | None = None,
        layout: str = "",
        branch: str = "",
    ) -> PartitionStore:
        """Open the store of (operator, partition) at a committed version (of ``branch``).

        Args:
            uri: root URI or local path of the state directory, a :class:`Location` (a URI
                with object store settings) or a FileIO.
            operator: operator (or query/operator) name.
            partition: partition id.
            version: committed version to open; :data:`NEWEST` (the default) the newest one
                (one listing of the store's manifests; an empty store if it has none); None
                starts an empty store (version -1) whatever is committed, as epoch 0 does (its
                commit then meets the versions on storage: :meth:`commit`).
            config: store settings.
            layout: the directory of the layout generation holding the version (``""``:
                generation 0; see :mod:`fsstate.store.layout`, which resolves it).
            branch: the branch the version is on (``""``: the trunk; see
                :mod:`fsstate.store.lineage`); commits go on it.

        Raises:
            VersionNotFoundError: ``version`` was never committed or is no longer retained.
            ManifestCorruptError: the manifest of ``version`` is damaged.
        """
        config = config or StoreConfig()
        fileio = uri if isinstance(uri, FileIO) else FileIO(uri, fsync=config.fsync)
        store_dir = store_dir_for(operator, partition, layout)
        check_branch(branch)
        if version is NEWEST:
            versions = list_versions(fileio, store_dir, branch)
            version = versions[-1] if versions else None
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ConfigError(
                f"version={version!r} of store {fileio.describe(store_dir)}: give a committed "
                "version (an int), None for an empty store, or leave it out for the newest"
            )
        manifest = None
        if version is not None:
            manifest = read_manifest(fileio, store_dir, version, branch)
        return cls(fileio, operator, partition, manifest, config, layout=layout, branch=branch)

    def refresh(self, version: int) -> bool:
        """Bring this store to committed ``version`` in place, if that can be done incrementally.

        The store must be open and clean. If it is at that exact version (same manifest
        checksum) nothing changes. If ``version`` descends from the store's version (see
        :mod:`fsstate.store.catchup`), the changes committed since are applied and the hot
        views that are still valid are kept: the cost scales with what changed, not with the
        state.

        Returns:
            True if the store is now at ``version``; False if it cannot get there in place
            (closed, dirty, never committed, no lineage, another history): open the version
            with :meth:`open` instead.

        Raises:
            VersionNotFoundError: ``version`` was never committed or is no longer retained.
            ManifestCorruptError: its manifest is damaged.
        """
        base = self._manifest
        if self._closed or base is None or self.dirty:
            return False
        target = read_manifest(self.fileio, self.store_dir, version, self.branch)
        if target.checksum == base.checksum:
            return True
        if not descends(self.fileio, self.store_dir, base, target, self.branch):
            return False
        try:
            plans, resets = plan_store(self._tables, base, target)  # reads every file first
        except FsStateError:
            return False  # a file could not be read: nothing changed; reopening will say why
        for plan in plans:
            apply_plan(plan)
        self._reset_tables(target, resets)
        self.summaries.rebase(target)
        self._manifest = target
        self.meta = carried(target)
        self.version = target.version
        self.next_seq = max(self.next_seq, target.next_seq)
        self._dropped = False
        self._track()
        self._retention.forget_listing()  # other processes committed: listed again if needed
        self._retention.remember(target)
        self.controller.touch(self)
        self.controller.check()  # replayed views and pinned delta files count from now on
        return True

    @staticmethod
    def committed_versions(
        uri: str | Location | FileIO,
        operator: str,
        partition: int,
        layout: str = "",
        branch: str = "",
    ) -> list[int]:
        """Committed versions of a store (of layout generation directory ``layout``, on
        ``branch``), ascending."""
        fileio = uri if isinstance(uri, FileIO) else FileIO(uri)
        return list_versions(fileio, store_dir_for(operator, partition, layout), branch)

    # -- time and TTL --------------------------------------------------------------------------
    def set_time(self, now_ms: int) -> None:
        """Set the processing time used for TTL expiry and visibility."""
        self.now_ms = int(now_ms)
        for t in self._tables.values():
            t.now_ms = self.now_ms

    def expire(self) -> int:
        """Remove every row expired at the current time, in every table; returns rows removed."""
        self.check_open()
        for name, entry in list(self._entries.items()):
            if entry.ttl_runs or entry.spec.ttl_ms is not None:
                self.table(name)
        return sum(t.expire() for t in self._tables.values())

    # -- commit --------------------------------------------------------------------------------
    @property
    def committed_writer(self) -> Any:
        """The ``writer`` meta value of the version the store is at (None: none recorded, or
        no version): who committed it (:class:`fsstate.store.record.Writer`)."""
        return None if self._manifest is None else self._manifest.meta.get(WRITER_META)

    @property
    def dirty(self) -> bool:
        """Whether anything changed since the store was opened or last committed."""
        if self._dropped:
            return True
        if carried_meta(self.meta) != carried(self._manifest):
            return True  # (a writer alone changes nothing)
        return any(t.dirty or (t.ttl_loaded and t.ttl_index().dirty) for t in self._tables.values())

    def commit(self, version: int) -> CommitInfo:
        """Publish the current state as ``version`` (see the module docstring).

        A version is published once: if another attempt of the same epoch (a retried,
        speculative or zombie task, or this store earlier: the same parent version, and a writer
        that is not another one, see :func:`fsstate.store.commit.check_adoptable`) already
        published ``version``, this store adopts that version (its own changes since its parent
        are dropped, its files are left to the garbage collection) and the result says
        ``adopted``.

        Raises:
            CommitError: storage failed; the previous version is intact, retry is safe.
            CommitConflictError: ``version`` was published on another parent, or by another
                writer; nothing was published and the store is unchanged.
        """
        self.check_open()
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise CommitError(f"version {version!r} must be a non-negative integer")
        t0 = time.perf_counter()
        try:
            sealed = {
                name: seal_table(t, self.fileio, self.store_dir, self.config)
                for name, t in self._tables.items()
            }
            tables = {**self._entries, **{name: s.entry for name, s in sealed.items()}}
            meta = json_copy(self.meta, self.fileio.describe(self.store_dir))
            head = (version, self.operator, self.partition, self.next_seq, tables)
            ours = Manifest(*head, meta=meta, clock_ms=self.now_ms, lineage=self.branch)
            manifest = link_to_base(ours, self._manifest)
            ours.summary = self.summaries.build(self, ours, t0)  # None: not recorded
            self._check_leases(manifest)
            published = publish_manifest(self.fileio, self.store_dir, manifest, self.branch)
        except ConfigError:
            raise  # the store cannot be used as configured: retrying would not help
        except FsStateError as exc:
            previous = "no version" if self.version is None else f"version {self.version}"
            raise CommitError(
                f"commit of version {version} of store {self.fileio.describe(self.store_dir)} "
                f"failed ({exc}); {previous} is intact and the commit can be retried"
            ) from exc
        pending = self.ctx.pending
        if published.checksum != manifest.checksum:
            if pending is not None:
                pending.discard(manifest.files())  # never published now: the tables reset
            return self._lost_race(published, manifest, t0)
        if pending is not None:
            pending.published(manifest.files())
        for table in sealed.values():
            settle(table)
        written = sum(table.bytes_written for table in sealed.values())
        self._committed(manifest, written)
        files = sum(table.files for table in sealed.values())
        ms = (time.perf_counter() - t0) * 1000
        return CommitInfo(version, files, written, ms, summary=manifest.summary)

    @property
    def checksum(self) -> str | None:
        """The checksum of the manifest of the version the store is at (None: none)."""
        return None if self._manifest is None else self._manifest.checksum

    def fork_to(self, branch: str) -> None:
        """Move this store, with its uncommitted changes, onto a new ``branch`` that starts at
        the store's version (:func:`fsstate.store.lineage.fork_version`, O(metadata)): its
        next commit publishes there. Used when a commit meets its version published by another
        lineage (:class:`fsstate.errors.LineageConflictError`).

        Raises:
            CommitConflictError: the branch already starts elsewhere.
            VersionNotFoundError: the version (or a file of it) is gone.
            ConfigError: the branch name is invalid.
        """
        self.check_open()
        if self._manifest is None or self.version is None:  # an empty store: nothing to fork
            self.branch = check_branch(branch)
            mark_forked(self.fileio, self.store_dir)  # the directory holds a branch
            self._retention = Retention(self.fileio, self.store_dir, branch)
            self._track()
            return
        fork = fork_version(
            self.fileio, self.store_dir, self.version, source=self.branch, branch=branch
        )
        self.branch = branch
        self._manifest = fork
        self._retention = Retention(self.fileio, self.store_dir, branch)
        self._retention.remember(fork)
        self._track()

    def _committed(self, manifest: Manifest, written: int) -> None:
        """The store is now at the ``manifest`` it published: forget the dropped tables, count
        the commit, drop what leaves the retained window, and ask for the compactions due."""
        self._dropped = False
        self._manifest = manifest  # its meta stays: a writer goes on as the writer it was
        self.version = manifest.version
        self._track()
        return_memory_to_os()
        self._commits += 1
        self._bytes_written += written
        self._retention.remember(manifest)
        self.summaries.committed(manifest)
        self._retention.after_commit(manifest, self.config)
        if manifest.version % self.config.orphan_scan_every_commits == 0:
            request_collection(self)
        self.controller.touch(self)
        max_runs = self.controller.config.compaction_max_runs
        for t in self._tables.values():
            if needs_merge(t.runs, max_runs):
                self.controller.compactor().request(t)

    def _lost_race(self, published: Manifest, ours: Manifest, t0: float) -> CommitInfo:
        """Another attempt published this version first: adopt it if it was built on the same
        parent (the same batch from the same state), else refuse."""
        where = self.fileio.describe(self.store_dir)
        check_adoptable(published, ours, where)
        self._reset_tables(published, list(self._tables))
        self.summaries.rebase(published)
        self._manifest = published
        self.meta = carried(published)
        self.version = published.version
        self.next_seq = max(self.next_seq, published.next_seq)
        self._dropped = False
        self._track()
        self._retention.remember(published)
        log.info(
            "fsstate: version %s of %s was published by another attempt on the same parent; "
            "adopted it (this attempt's files are left to the garbage collection)",
            published.version,
            where,
        )
        return CommitInfo(published.version, 0, 0, (time.perf_counter() - t0) * 1000, True)

    def _reset_tables(self, manifest: Manifest, names: list[str]) -> None:
        """Make the loaded tables ``names`` exactly their entries of ``manifest`` (in place, so
        table objects users hold stay valid); a table the manifest lacks, or holds with another
        shape, is dropped from memory and declared again from the manifest when asked for."""
        for name in names:
            t = self._tables[name]
            entry = manifest.tables.get(name)
            if entry is None or not t.spec.same_shape(entry.spec):
                t.release_all()  # gone or declared anew with another shape: declared again
                del self._tables[name]
            else:
                t.reset_to(entry)
        self._entries = {n: e for n, e in manifest.tables.items() if n not in self._tables}

    def tombstone_horizon_seq(self) -> int:
        """Tombstones with a seq at or above this must survive a bottom compaction.

        A clean copy of this store's lineage may later catch up across the merge only if every
        deletion made after its version is still visible as a row (see
        :mod:`fsstate.store.catchup`); copies older than the lineage a catch-up can walk reopen
        instead. A store that never committed has no such copies: everything it holds may go.
        """
        base = self._manifest
        return self.next_seq if base is None else base.tombstone_horizon_seq()

    # -- memory ----------------------------------------------------------------------------------
    def file_prefix(self, name: str) -> str:
        """File name prefix of a table's runs (its name made path-safe)."""
        return safe_name(name)[:40] or "state"

    def memory_bytes(self) -> int:
        """Bytes this store holds in memory (see :meth:`TableBase.memory_bytes`)."""
        return sum(t.memory_bytes() for t in list(self._tables.values()))

    def release_segments(self) -> int:
        """Release pinned segments already on disk; returns the bytes freed."""
        return sum(t.release_segments() for t in list(self._tables.values()))

    def spill(self) -> tuple[int, int]:
        """Spill every table to Parquet (see :meth:`TableBase.spill`): (freed, written)."""
        freed = written = 0
        for t in list(self._tables.values()):
            f, w = t.spill()
            freed += f
            written += w
        if written:
            self.spills += 1
        self.summaries.spilled(written)
        return freed, written

    def compact(self, force: bool = False) -> int:
        """Run compaction rounds synchronously until no table needs one; returns bytes written.

        Args:
            force: merge even tables below the run-count trigger (as far as one round allows).
        """
        self.check_open()
        total = 0
        comp = self.controller.compactor()
        for t in list(self._tables.values()):
            while True:
                written = comp.run_once(t, force)
                total += written
                if not written or force:
                    break
        return total

    # -- retention -----------------------------------------------------------------------------
    def _track(self) -> None:
        """Keep what new file names record current: the lineage, and the first version that
        can name a file written now (:mod:`fsstate.storage.naming`)."""
        self.ctx.lineage = self.branch
        self.ctx.birth = (-1 if self.version is None else self.version) + 1

    def _check_leases(self, manifest: Manifest) -> None:
        """Refuse to publish ``manifest`` if a file it names that this store wrote lost its
        lease since (:mod:`fsstate.storage.leases`: a collector may have deleted it).

        Raises:
            CommitError: such a file exists; nothing is published, a retry writes anew.
        """
        pending = self.ctx.pending
        if pending is None or not len(pending):
            return
        lost = pending.uncovered(manifest.files())
        if lost:
            raise CommitError(
                f"commit of version {manifest.version} of store "
                f"{self.fileio.describe(self.store_dir)}: {len(lost)} file(s) this store wrote "
                f"(e.g. {lost[0]}) outlived the writer's lease (the process was stalled or could "
                "not renew it), so a garbage collection may have deleted them; nothing was "
                "published and the previous version is intact: retry the epoch from it"
            )

    def collect_garbage(self, grace_ms: int | None = None) -> int:
        """Collect this store's garbage now, across its lineages (:func:`fsstate.store.gc.collect`
        for this store alone); returns the data files deleted.

        Raises:
            GarbageCollectionError: a listing or manifest could not be read (nothing deleted).
        """
        grace = self.config.orphan_grace_ms if grace_ms is None else grace_ms
        done = collect(
            self.fileio,
            self.operator,
            retain=self.config.retain_versions,
            grace_ms=grace,
            stores=[(self.layout, self.partition)],
        )
        self._retention.forget_listing()
        return done.files

    def listed_versions(self) -> list[int] | None:
        """The retained versions if the store knows them without listing, else None."""
        return self._retention.listed()

    def retained_versions(self) -> list[int]:
        """Committed versions currently kept on storage, ascending."""
        return self._retention.versions()

    # -- stats and lifecycle -----------------------------------------------------------------
    def stats(self) -> StoreStats:
        """Memory and disk figures of this store (no I/O)."""
        tables = {name: t.stats() for name, t in list(self._tables.items())}
        for name, e in self._entries.items():
            dbytes = sum(r.size_bytes for r in e.runs) + sum(r.size_bytes for r in e.ttl_runs)
            rows = sum(r.rows for r in e.runs)
            tables[name] = TableStats.of_files(e.spec.kind, len(e.runs), dbytes, rows)
        return StoreStats(
            self.operator,
            self.partition,
            self.version,
            sum(t.memory_bytes for t in tables.values()),
            sum(t.disk_bytes for t in tables.values()),
            self._commits,
            self._bytes_written,
            self.spills,
            sum(t.compactions for t in self._tables.values()),
            tables,
            sum(t.dead_runs_dropped for t in self._tables.values()),
        )

    def close(self) -> None:
        """Release memory; uncommitted changes are discarded."""
        self._closed = True
        if self.ctx.pending is not None:
            self.ctx.pending.forget()  # nothing this store wrote will be published by it
        self.controller.unregister(self)
        for t in self._tables.values():
            t.release_all()
        self._tables.clear()
        self._entries.clear()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed
