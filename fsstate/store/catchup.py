"""Catch-up plans: what advancing each table of a clean store to a newer version takes.

A process that keeps a committed store for reuse (the Spark adapter keeps one per partition
in each Python worker) often finds, when the partition comes back, that other processes have
committed versions since. Reopening would lose the hot views and reload the table; instead,
when the newer version *descends* from the cached one, only what changed since is applied.

Lineage: every manifest records the version and checksum of the manifest its store was at
when it committed (format version 2); :func:`fsstate.storage.manifest.descends` proves that
the target descends from the cached version. A re-committed version (a retried or speculative
task) has another checksum, so a diverged copy is never advanced; the caller reopens instead.

This module reads (the plans); :meth:`fsstate.tables.base.TableBase.advance` applies a plan
to its table and :meth:`fsstate.store.partition.PartitionStore.refresh` keeps the store's own
bookkeeping.

Invariants:

* Nothing changes unless the whole catch-up is decided possible first (lineage proven, every
  intermediate manifest readable); then the store ends exactly as if opened at the target,
  except that it keeps views, pinned segments and the TTL index where they are still valid.
* Rows with ``seq >= base.next_seq`` are exactly the changes made after the base version (seqs
  are per store and strictly increasing along a lineage); files holding any such row are the
  only data files read, and only for a table that holds views (only the rows of viewed keys
  become Python objects; everything else is read lazily when touched). A view of a key with
  such rows is replayed over them (value: the newest row decides, taken for every key of a
  segment at once by :mod:`fsstate.tables.newest` when the table has no range tombstones;
  list and map: the view's rows plus the new rows); other views stay valid.
* A table whose identity changed (dropped and declared again: another ``incarnation``), whose
  shape or range tombstones changed, or that appeared or disappeared, is reset to the target's
  entry (no view kept). So is a table that gained a bottom compaction which may have dropped a
  tombstone newer than the base (with the rows it deleted, so the deletion left no row): one
  whose file records no tombstone horizon, or a horizon above the base's ``next_seq``, or one
  that left no file at all. Bottom merges keep the tombstones of the lineage a catch-up can
  walk (:mod:`fsstate.compaction`), so in practice they are crossed, not reset.
* Compaction outputs of this process not yet published are kept in place of the runs they
  merged when those runs are still contiguous in the target (else dropped as orphans).
* The TTL index is advanced by the new index runs if the target's runs extend the base's;
  otherwise it is dropped and reloaded lazily from the target's runs.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from fsstate.format.schema import KIND_VALUE, SEQ
from fsstate.format.segment import OpRow, Segment, gather_key_rows
from fsstate.format.tombstones import RangeTombstones
from fsstate.interfaces import Key
from fsstate.storage.manifest import Manifest, TableEntry
from fsstate.storage.runs import Run
from fsstate.tables import TableBase
from fsstate.tables.base import Delta
from fsstate.tables.newest import newest_values

PIN_BYTES_MAX = 4 * 1024 * 1024  # delta files decoding to at most this stay pinned once read


def _ranges_equal(a: RangeTombstones, b: RangeTombstones) -> bool:
    return sorted(a.items, key=lambda t: t[2]) == sorted(b.items, key=lambda t: t[2])


def same_table(t: TableBase, old: TableEntry | None, new: TableEntry) -> bool:
    """Whether table ``t`` (at ``old``) can be advanced to ``new`` (else it is reset)."""
    if old is None or new.incarnation is None:
        return False
    if not (t.incarnation == old.incarnation == new.incarnation):
        return False
    if t.spec.kind != new.spec.kind or not t.spec.same_shape(new.spec):
        return False
    return _ranges_equal(t.ranges, RangeTombstones.from_batch(new.range_tombstones))


def _delta_segments(t: TableBase, runs: list[Run], seq_min: int) -> Iterator[Segment]:
    """The segments of ``runs`` (oldest first) cut to their rows with ``seq >= seq_min``;
    files of at most :data:`PIN_BYTES_MAX` decoded bytes get pinned. A run that also holds
    older rows (a merge of old and new runs, often most of the table) is filtered by Arrow."""
    spec, ctx = t.spec, t.ctx
    for run in runs:
        ref = run.ref
        pin = ref is not None and not run.in_memory and ref.decoded_bytes <= PIN_BYTES_MAX
        segments = [run.load_pinned(spec, ctx)] if pin else run.segments(spec, ctx)
        mixed = run.min_seq < seq_min
        for seg in segments:
            if mixed:
                batch = seg.batch
                newer = batch.filter(pc.greater_equal(batch.column(SEQ), seq_min))
                if not newer.num_rows:
                    continue
                seg = Segment(spec, newer)  # still sorted: a filter keeps the order
            yield seg


def _delta(t: TableBase, runs: list[Run], seq_min: int) -> Delta:
    """What changed in ``runs`` since ``seq_min`` for the keys that have a view.

    Only views need the delta (every other key is read from the runs when touched), so a table
    without views reads nothing (a *complete* table, :attr:`fsstate.tables.base.TableBase.
    complete`, small enough to have been loaded whole, takes every key's rows: it keeps a view
    of each key), and only the rows of viewed keys become Python objects: the
    delta of a partition another worker filled is the size of that batch's state, which must
    not pass through memory at once. A value table without range tombstones gets each key's
    newest view, vectorized (:mod:`fsstate.tables.newest`); other tables their op rows by key.
    """
    views: Container[Key] | None = t.view_keys()
    if t.complete:
        views = None  # every key: the table keeps a view of each key with rows
    elif not views:
        return {}
    segments = _delta_segments(t, runs, seq_min)
    if t.kind == KIND_VALUE and not t.ranges:
        return newest_values(segments, views)
    out: dict[Key, list[OpRow]] = {}
    for seg in segments:
        gather_key_rows(seg, out, views)
    return out


@dataclass
class TablePlan:
    """What advancing one table takes, read before anything changes."""

    table: TableBase
    new: TableEntry
    runs: list[Run]
    delta: Delta
    ttl_rows: list[tuple[int, int, Any, int | None]] | None  # None: reload the index lazily
    seq_min: int  # every delta row has seq >= seq_min; the views reflect rows below it


def _adopt_local_merges(t: TableBase, runs: list[Run], old_paths: set[str]) -> list[Run]:
    """Put this process's unpublished compaction outputs in place of the runs they merged.

    Background compaction of a cached store writes its merged run after the store's commit,
    so only a later commit of *this* store would publish it. When other processes committed
    meanwhile, the merged run still stands for its input runs wherever those appear
    contiguously (and, for a bottom merge, at the bottom) in the target, so it is kept; else it
    is dropped (an orphan for the garbage collection). Its file must still exist: another
    process's orphan scan may have deleted it after the grace time.
    """
    local = [r for r in t.runs if r.replaces and r.ref is not None and r.ref.path not in old_paths]
    fileio, store_dir = t.ctx.fileio, t.ctx.store_dir
    for merged in local:
        paths = [r.ref.path if r.ref is not None else "" for r in runs]
        n = len(merged.replaces)
        assert merged.ref is not None
        starts = [0] if merged.ref.drops_tombstones else range(len(paths) - n + 1)
        for i in starts:
            if tuple(paths[i : i + n]) == merged.replaces:
                if fileio.exists(f"{store_dir}/{merged.ref.path}"):
                    runs = [*runs[:i], merged, *runs[i + n :]]
                break
    return runs


def plan_table(t: TableBase, old: TableEntry, new: TableEntry, seq_min: int) -> TablePlan | None:
    """Read what advancing ``t`` from ``old`` to ``new`` needs (no change to ``t``).

    Returns None if the table must be reset instead: a bottom compaction published since the
    base may have dropped a new tombstone together with everything it deleted, so the changes
    are no longer all visible as rows. A bottom merge records from which seq on it kept
    tombstones; if that is above the base's ``next_seq`` (or unknown), the table is reset.
    Only a bottom merge removes a table's oldest run, and it may write no file at all
    (everything it merged was deleted): then it cannot be crossed either.
    """
    old_paths = {r.path for r in old.runs}
    new_paths = {r.path for r in new.runs}
    if old.runs and old.runs[0].path not in new_paths:
        # the oldest run is gone: a bottom merge ran; its output, if it wrote one, is the
        # target's oldest run, and no output means it cannot say what it dropped
        first = new.runs[0] if new.runs else None
        if first is None or first.path in old_paths or first.tombstones_from_seq is None:
            return None
    for ref in new.runs:
        if ref.path in old_paths or not ref.drops_tombstones:
            continue
        if ref.tombstones_from_seq is None or ref.tombstones_from_seq > seq_min:
            return None  # it may have dropped a deletion made after the base
    by_path = {r.ref.path: r for r in t.runs if r.ref is not None}
    runs: list[Run] = [by_path.get(ref.path) or Run(None, ref) for ref in new.runs]
    changed = [
        r
        for r in runs
        if r.ref is not None and r.ref.path not in old_paths and r.max_seq >= seq_min
    ]
    runs = _adopt_local_merges(t, runs, old_paths)
    delta = _delta(t, changed, seq_min)
    n_old = len(old.ttl_runs)
    extends = [r.path for r in new.ttl_runs[:n_old]] == [r.path for r in old.ttl_runs]
    ttl_rows: list[tuple[int, int, Any, int | None]] | None = None
    if t.ttl_loaded and extends:
        ttl_rows = list(t.index_rows(new.ttl_runs[n_old:]))
    return TablePlan(t, new, runs, delta, ttl_rows, seq_min)


def apply_plan(plan: TablePlan) -> int:
    """Advance the table as planned; returns the number of views replayed."""
    return plan.table.advance(plan.new, plan.runs, plan.delta, plan.ttl_rows, plan.seq_min)


def plan_store(
    tables: Mapping[str, TableBase], base: Manifest, target: Manifest
) -> tuple[list[TablePlan], list[str]]:
    """Plans for the loaded ``tables`` of a store at ``base`` to reach ``target`` (which must
    descend from it), and the names of the tables to reset instead (declared again from the
    target's entry, cold). Every file a plan needs is read here; nothing changes.
    """
    seq_min = base.next_seq
    plans: list[TablePlan] = []
    resets: list[str] = []
    for name, t in tables.items():
        new = target.tables.get(name)
        plan = None
        if new is not None and same_table(t, base.tables.get(name), new):
            plan = plan_table(t, base.tables[name], new, seq_min)
        if plan is None:
            resets.append(name)
        else:
            plans.append(plan)
    return plans, resets
