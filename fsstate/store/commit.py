"""The commit of a partition store: sealing its tables, the new version's manifest, and the
rule for a version another attempt published first.

:meth:`fsstate.store.partition.PartitionStore.commit` seals every loaded table
(:func:`seal_table`), builds the version's manifest on the store's base (:func:`link_to_base`),
publishes it with put-if-absent (``link(2)`` locally, ``If-None-Match: *`` on object stores),
and then settles each sealed table (:func:`settle`); if another attempt published the version
first, :func:`check_adoptable` decides between adopting it and refusing.

Invariants:

* Sealing writes only what is not on storage yet: a table's pending runs (those without a
  file, once the runs a newer range tombstone hides entirely are dropped) and, when its TTL
  index changed, one index file: the changes, or the whole index when the chain of change files
  has grown too long (:func:`fsstate.tables.ttl_index.needs_snapshot`). Every new file has a
  name unique to the attempt, so attempts never clobber (or delete) each other's files.
* Until the manifest is published nothing of the version is visible; sealing never changes what
  a table has committed (its TTL index runs, dirty flags and pinned segments change in
  :func:`settle`, after publishing). If anything fails the previous version is intact and the
  commit can be retried: it writes only what is still missing.
* A manifest lists every live file of its version, inherited and new. :func:`link_to_base` gives
  it the lineage of the store's base: the parent (the base, or the base's own parent when the
  same version is committed again), the ``next_seq`` of up to
  :data:`fsstate.storage.manifest.LINEAGE_STEPS_MAX` ancestors, the parent's files it no longer
  references (``retired``) and the first version of its chain of consecutive versions
  (``chain_from``). A version number older than the base gets no lineage: nothing ever catches
  up across it.
* A version is published once and never changes. An attempt that finds it published by another
  adopts that version (its own files are left to the garbage collection after the grace time)
  only if both are attempts of the same epoch (:func:`check_adoptable`): built on the same
  parent (version and checksum) by writers that are not different ones. The writer is the epoch
  record's (``writer`` in the manifest's meta, :class:`fsstate.store.record.Writer`, written by
  :mod:`fsstate.store.epoch`):

  - neither manifest records one: two attempts through the engine API (each opened the parent
    and commits the next version: a retried task, a speculative or zombie one);
  - both record one of the same query run and operator instance: a task retry, speculative or
    zombie task of that run; or of different runs: a re-run of the batch after a restart
    (the run id is per start of a query);
  - anything else is another writer: one records a writer and the other none (a query's
    version met by a tool or engine-API commit, or the reverse);
  - writers of the same parent that both record when their batch was planned
    (``planned_ms``, Spark's batch timestamp from the checkpoint's offsets log) at different
    times are two lineages of one query (a copied, restored or rolled-back checkpoint ran the
    batch again, planned anew): :class:`fsstate.errors.LineageConflictError`, which the epoch
    answers by branching (:mod:`fsstate.store.lineage`) when its caller follows a lineage.

  Another operator instance of the same run (two operators sharing a store,
  :meth:`fsstate.store.record.Writer.is_foreign_to`) is adopted here and refused right after by
  :mod:`fsstate.store.epoch` with a :class:`fsstate.errors.ConfigError` naming the remedy (the
  epoch's store is discarded: nothing of it is applied). Another parent or another writer
  raises :class:`fsstate.errors.CommitConflictError`: nothing is published and the caller's
  writes are not dropped silently. (Telling a copied checkpoint's re-run of a batch from its
  original's is the lineage's job, not the writer's: both are runs of one query id.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsstate.config import StoreConfig
from fsstate.errors import CommitConflictError, LineageConflictError
from fsstate.format.refs import FileRef
from fsstate.format.schema import TableSpec
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import Manifest, TableEntry
from fsstate.storage.runfile import file_metadata, write_table_file
from fsstate.store.identity import WRITER_META
from fsstate.tables import TableBase
from fsstate.tables.ttl_index import encode_changes, needs_snapshot


@dataclass(frozen=True)
class SealedTable:
    """A loaded table sealed for a commit.

    Attributes:
        table: the table.
        entry: its entry in the new manifest.
        files: files written for it by the sealing (runs and TTL index).
        bytes_written: their bytes.
    """

    table: TableBase
    entry: TableEntry
    files: int
    bytes_written: int


def table_entry(t: TableBase, spec: TableSpec, ttl_refs: list[FileRef]) -> TableEntry:
    """The manifest entry of table ``t`` as ``spec``: its runs on storage, ``ttl_refs``, its
    range tombstones and its incarnation."""
    ranges = None
    if t.ranges and t.spec.key_schema is not None:
        ranges = t.ranges.to_batch(t.spec.key_schema)
    refs = [r.ref for r in t.runs if r.ref is not None]
    return TableEntry(spec, refs, ttl_refs, ranges, t.incarnation)


def seal_table(t: TableBase, fileio: FileIO, store_dir: str, config: StoreConfig) -> SealedTable:
    """Write what table ``t`` has that is not on storage yet; its entry for the new manifest.

    Raises:
        FsStateError: storage failed (the table is unchanged but for the runs written).
    """
    t.drop_dead_runs()  # before writing: a hidden pending run is never written
    pending = [r for r in t.runs if r.ref is None]
    files = written = 0
    for run in pending + t.flush():
        assert run.ref is not None
        files += 1
        written += run.ref.size_bytes
    ttl_refs, index_file = _sealed_ttl_refs(t, fileio, store_dir, config)
    if index_file is not None:
        files += 1
        written += index_file.size_bytes
    return SealedTable(t, table_entry(t, t.spec, ttl_refs), files, written)


def _sealed_ttl_refs(
    t: TableBase, fileio: FileIO, store_dir: str, config: StoreConfig
) -> tuple[list[FileRef], FileRef | None]:
    """The TTL index runs of ``t`` at the new version and the index file written for them
    (None: the index is unchanged, or its changes cancel out)."""
    ttl_refs = list(t.ttl_refs)
    if not (t.ttl_loaded and t.ttl_index().dirty):
        return ttl_refs, None
    idx = t.ttl_index()
    rows = idx.changes()
    if not rows:
        return ttl_refs, None
    delta_rows = sum(r.rows for r in ttl_refs[1:]) + len(rows)
    if needs_snapshot(len(ttl_refs) + 1, ttl_refs[0].rows if ttl_refs else 0, delta_rows):
        ttl_refs = []  # one file of the whole index replaces the chain
        rows = idx.snapshot_rows()
    if not rows:
        return ttl_refs, None
    ref = _write_index(t, rows, fileio, store_dir, config)
    return [*ttl_refs, ref], ref


def _write_index(
    t: TableBase, rows: list[Any], fileio: FileIO, store_dir: str, config: StoreConfig
) -> FileRef:
    """Write TTL index rows of ``t`` as a new file; its reference."""
    table = encode_changes(t.spec, rows).replace_schema_metadata(file_metadata(t.spec, "ttl"))
    path = t.ctx.new_path(t.file_prefix + "-ttl")
    size, crc = write_table_file(fileio, store_dir, path, table, config)
    t.ctx.tally.wrote(size)
    return FileRef(path, table.num_rows, size, crc32=crc)


def settle(sealed: SealedTable) -> None:
    """Make a sealed table committed, once its manifest is published: its TTL index runs are
    the sealed ones, its range tombstones and TTL index are clean, and its runs' in-memory
    copies may be released."""
    t = sealed.table
    t.ttl_refs = sealed.entry.ttl_runs
    t.ranges_dirty = False
    if t.ttl_loaded:
        t.ttl_index().mark_snapshotted()
    for run in t.runs:
        run.release()


def link_to_base(manifest: Manifest, base: Manifest | None) -> Manifest:
    """Give ``manifest`` its lineage on ``base`` (the store's current manifest, None if it never
    committed): parent, ``lineage_next_seqs``, ``retired`` and ``chain_from``; returns it."""
    version = manifest.version
    if base is not None and base.version < version:
        manifest.parent_version, manifest.parent_checksum = base.version, base.checksum
        manifest.lineage_next_seqs = base.child_lineage()
    elif base is not None and base.version == version:  # re-committing the base's version
        manifest.parent_version = base.parent_version
        manifest.parent_checksum = base.parent_checksum
        manifest.lineage_next_seqs = base.lineage_next_seqs
    # else never committed, or an older version number: no lineage, never caught up across
    parent_v = manifest.parent_version
    if base is not None and base.version == parent_v:
        manifest.retired = sorted(base.files() - manifest.files())
        if parent_v == version - 1:
            manifest.chain_from = parent_v if base.chain_from is None else base.chain_from
    if manifest.chain_from is None:
        manifest.chain_from = version
    return manifest


def check_adoptable(published: Manifest, ours: Manifest, where: str) -> None:
    """Whether this attempt may adopt the ``published`` manifest of the version it built as
    ``ours``: only if both are attempts of the same epoch (see the module docstring): built on
    the same parent (the same batch from the same state) by writers that are not different.

    Raises:
        CommitConflictError: the version was published on another parent, or by another
            writer.
    """
    same_parent = (published.parent_version, published.parent_checksum) == (
        ours.parent_version,
        ours.parent_checksum,
    )
    if not same_parent:
        raise CommitConflictError(
            f"version {ours.version} of store {where} was already published on top of "
            f"version {published.parent_version}, and this store built it on version "
            f"{ours.parent_version}; nothing was published. Open the store at "
            f"{ours.version} (or the version you meant to continue from) and commit a new "
            "version"
        )
    theirs, mine = published.meta.get(WRITER_META), ours.meta.get(WRITER_META)
    if (theirs is None) != (mine is None):
        raise CommitConflictError(
            f"version {ours.version} of store {where} was already published by another writer "
            f"({_who(theirs)}; this commit is by {_who(mine)}), not by an attempt of the same "
            "epoch; nothing was published and this store's changes were not applied. Open the "
            f"store at version {ours.version} to read what was published, or commit to a store "
            "of your own (another operator name or state location)"
        )
    planned_theirs, planned_mine = _planned(theirs), _planned(mine)
    if None not in (planned_theirs, planned_mine) and planned_theirs != planned_mine:
        raise LineageConflictError(
            f"version {ours.version} of store {where} was already published by another "
            f"planning of its batch (planned at {planned_theirs} ms, this one at "
            f"{planned_mine} ms): another lineage of the query, such as a copied or "
            "restored checkpoint; nothing was published",
            ours.version,
        )


def _planned(writer: Any) -> int | None:
    """The ``planned_ms`` of a writer meta value (:class:`fsstate.store.record.Writer`)."""
    value = writer.get("planned_ms") if isinstance(writer, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _who(writer: Any) -> str:
    """A writer meta value as a message says it."""
    if writer is None:
        return "no recorded writer: the engine API or a tool"
    if isinstance(writer, dict):
        return f"query run {writer.get('run')}, operator instance {writer.get('instance')}"
    return f"writer {writer!r}"
