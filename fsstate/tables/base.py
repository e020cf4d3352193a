"""TableBase: the machinery shared by value, list and map tables.

Views and their loading from the sealed tiers, the TTL index, whole-table operations (range
deletes, scans), sealing, spilling and memory accounting, and catch-up of a table to a newer
version of its lineage (:meth:`TableBase.advance`). The fields live in
:class:`fsstate.tables.core.TableCore`.

Invariants (besides those of :mod:`fsstate.interfaces`):

* Validation comes first: a call with a bad key, user key or value raises before any view,
  dirty set, sequence number or TTL index entry changes.
* Keys are validated on their first touch (when the view is loaded); later calls with the same
  key hit the view directly.
* The TTL index is one-to-one with live rows for value and map state and holds one minimum
  entry per grouping key for list state; every write, delete and cleanup keeps it so.
* ``runs`` are ordered by sequence number; any batched write seals the memtable first, so the
  order holds.
* A spill or commit writes the dirty views as one run file streamed in key order, one chunk
  of at most 1/16 of the budget in Arrow at a time; the run joins the table and the dirt goes
  only once the file is published, so a failed write changes nothing.

Batched (Arrow) reads and writes live in :mod:`fsstate.tables.batched`, the bulk load of a
table's views on its first cold miss in :mod:`fsstate.tables.warmup`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, KeysView, Sequence
from typing import Any

from fsstate import interfaces
from fsstate.format.keyfilter import stable_hash
from fsstate.format.refs import FileRef
from fsstate.format.schema import KIND_MAP, KIND_VALUE, OP_CLEAR
from fsstate.format.segment import OpRow, Segment
from fsstate.format.tombstones import ABSENT, RangeTombstones, Timed, in_range, replay_value
from fsstate.interfaces import Key
from fsstate.osmem import gc_paused
from fsstate.stats import TableStats
from fsstate.storage.depth import needs_merge
from fsstate.storage.manifest import TableEntry
from fsstate.storage.runfile import read_table_file
from fsstate.storage.runs import Run, write_run_stream
from fsstate.tables.core import TableCore
from fsstate.tables.counts import count_dirty, view_count
from fsstate.tables.memtable import deep_size, dirty_batches, estimate_view_bytes, view_rows
from fsstate.tables.newest import NewestValues, install
from fsstate.tables.ttl_index import TtlIndex, decode_rows
from fsstate.tables.warmup import warm_up

Delta = dict[Key, list[OpRow]] | NewestValues
"""What :meth:`TableBase.advance` applies: new op rows by key, or (value tables without range
tombstones) the keys' newest views (:mod:`fsstate.store.catchup` reads it)."""


class TableBase(TableCore, interfaces.StateTable):
    """Machinery shared by the three kinds: views, dirt, runs, TTL index, range tombstones."""

    @property
    def dirty(self) -> bool:
        """Whether the table changed since its last seal or commit."""
        return bool(self._dirty) or self.ranges_dirty or any(r.ref is None for r in self.runs)

    # -- cold reads ----------------------------------------------------------------------------
    def _cold_rows(self, key: Key) -> list[OpRow]:
        """Op rows of ``key`` from the sealed runs, newest run first, stopping when shadowed."""
        out: list[OpRow] = []
        stop_at_first = self.kind == KIND_VALUE
        spec, ctx = self.spec, self.ctx
        h = stable_hash(key)
        for run in reversed(self.runs):
            rows = run.lookup(spec, ctx, key, h)
            if not rows:
                continue
            out.extend(rows)
            if stop_at_first or any(r[1] == OP_CLEAR for r in rows):
                break
        return out

    def _load(self, key: Key) -> Any:
        """Load (and cache) the complete view of a validated key from the sealed tiers."""
        self._store.check_open()  # a closed store's tables hold nothing any more
        if not self.runs or self._whole:  # complete: a key without a view has no rows
            view = self._empty()
        else:
            version = self._store.version
            if not self._warmed or (self._evicted and self._warmed_at != version):
                self._warmed, self._evicted, self._warmed_at = True, False, version
                whole = warm_up(self)
                self._whole = whole
                view = self._views.get(key)
                if view is not None:
                    return view
                if whole:
                    return self._load(key)
            view = self._replay(key, self._cold_rows(key))
        self._views[key] = view
        if self.counting:
            self.sealed_rows[key] = view_count(self.kind, view)
        self._ctl.growth -= 1
        return view

    def _checked_view(self, key: Any) -> tuple[Key, Any]:
        """The checked key and its view or None, for a key the views dict could not hash (a
        list, which the checker turns into a tuple; anything else it refuses with a typed
        error). Hot paths call it from ``except TypeError`` only: the ``try`` costs nothing."""
        key = self._check_key(key)
        return key, self._views.get(key)

    def _view(self, key: Any) -> tuple[Key, Any]:
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            key = self._check_key(key)
            view = self._views.get(key)
            if view is None:
                view = self._load(key)
        if self._partial and key in self._partial:
            view = self._complete(key, view)
        return key, view

    def _complete(self, key: Key, partial: list[Any]) -> list[Any]:
        """Merge a partial list view (blind appends) with the key's sealed elements."""
        cold = self._replay(key, self._cold_rows(key)) if self.runs else []
        have = {e[2] for e in cold}
        merged = cold + [e for e in partial if e[2] not in have]
        if self.counting:
            self.sealed_rows[key] = len(cold)
        self._views[key] = merged
        self._partial.discard(key)
        return merged

    # -- TTL index -----------------------------------------------------------------------------
    def ttl_index(self) -> TtlIndex:
        """The table's TTL index, loaded from its index runs on first use."""
        idx = self._ttl
        if idx is None:
            idx = TtlIndex()
            for op, exp, entry, count in self.index_rows(self.ttl_refs):
                idx.apply_row(op, exp, entry, count)
            self._ttl = idx
        return idx

    def expire(self) -> int:
        """Remove what expired at the current time (:meth:`_expire_entry`); the rows removed."""
        if not self.indexed:
            return 0
        idx = self.ttl_index()
        due = idx.pop_expired(self.now_ms)
        idx.lookups += len(due)
        removed = sum(self._expire_entry(idx, entry, self.now_ms) for _exp, entry in due)
        self.row_tally.expired += removed
        self._after_growth()
        return removed

    def _expire_entry(self, idx: TtlIndex, entry: Any, now: int) -> int:
        """Per kind: remove what of TTL entry ``entry`` expired at ``now``; the rows removed."""
        raise NotImplementedError

    def index_rows(self, refs: Sequence[FileRef]) -> Iterator[tuple[int, int, Any, int | None]]:
        """The (op, expiry, entry, count) rows of TTL index runs, in order."""
        st = self._store
        for ref in refs:
            table = read_table_file(st.fileio, st.store_dir, ref)
            self.ctx.tally.read(ref.size_bytes)
            yield from decode_rows(self.spec, table)

    # -- whole-table operations ----------------------------------------------------------------
    def delete_range(self, lo: Key | None, hi: Key | None) -> None:
        """Remove every grouping key ``k`` with ``lo <= k < hi`` (a range tombstone).

        A bound may be a prefix of the key (its first fields: ``hi=(t,)`` ends the range
        before every key whose first field is ``t`` or more) or None (unbounded).
        """
        lo = None if lo is None else self._check_prefix(lo)
        hi = None if hi is None else self._check_prefix(hi)
        idx = self.ttl_index() if self.indexed else None
        seq = self._next_seq()
        self.ranges.add(lo, hi, seq)
        self.ranges_dirty = True
        empty = self._empty
        sealed = self.sealed_rows if self.counting else None
        for k in list(self._views):
            if in_range(k, lo, hi):
                self._views[k] = empty()
                self._dirty.pop(k, None)
                self._partial.discard(k)
                if sealed is not None:
                    sealed[k] = 0
        if idx is not None:
            if self.kind == KIND_MAP:
                doomed = idx.entries_where(lambda e: in_range(e[0], lo, hi))
            else:
                doomed = idx.entries_where(lambda e: in_range(e, lo, hi))
            for entry in doomed:
                idx.discard(entry)

    def drop_dead_runs(self) -> int:
        """Forget the runs a range tombstone hides entirely; returns how many.

        A run goes when its rows' first key fields span an interval that one newer
        single-field range tombstone covers (:meth:`RangeTombstones.hides_span`), known from
        memory alone (:meth:`Run.lead_span`: no read). It answers no read, so reads do not
        change; its file leaves with the versions that reference it, as a compacted run's
        does. Windowed state, deleted a closed window at a time, drops its old runs this way
        instead of compacting them.
        """
        ranges = self.ranges
        if not ranges or not self.runs:
            return 0
        with self.lock:
            runs = self.runs
            keep = []
            for run in runs:
                span = run.lead_span()
                if span is None or not ranges.hides_span(span[0], span[1], run.max_seq):
                    keep.append(run)
            dropped = len(runs) - len(keep)
            if dropped:
                self.runs = keep
                self.dead_runs_dropped += dropped
        return dropped

    def all_keys(self) -> list[Key]:
        """Every grouping key with rows in any tier (live or not), in no particular order."""
        seen: dict[Key, None] = dict.fromkeys(self._views)
        for run in self.runs:
            for seg in run.segments(self.spec, self.ctx):
                for k in seg.distinct_keys():
                    seen[k] = None
        return list(seen)

    def _view_nocache(self, key: Key) -> Any:
        view = self._views.get(key)
        if view is not None:
            if self._partial and key in self._partial:
                return self._complete(key, view)
            return view
        return self._replay(key, self._cold_rows(key)) if self.runs else self._empty()

    def keys(self) -> Iterator[Key]:
        """Every grouping key with live state (a full scan, not a hot path)."""
        out = []
        for k in self.all_keys():
            if self._live(self._view_nocache(k)):
                out.append(k)
        return iter(out)

    def _live(self, view: Any) -> bool:
        now = self.now_ms
        if self.kind == KIND_VALUE:
            return view is not ABSENT and (type(view) is not Timed or view[1] > now)
        if self.kind == KIND_MAP:
            return any(type(c) is not Timed or c[1] > now for c in view.values())
        return any(e[1] is None or e[1] > now for e in view)

    def exists(self, key: Key) -> bool:
        """Whether the key holds live state in this table."""
        return self._live(self._view(key)[1])

    # -- sealing ---------------------------------------------------------------------------------
    def _chunk_keys(self, n: int) -> int:
        """Keys per sealed chunk of ``n`` dirty keys, so one chunk never builds more than
        ~1/16 of the budget in Arrow (small seals are one chunk without sampling)."""
        if n <= 256:
            return max(1, n)
        self.memory_bytes()  # refreshes the sampled view size
        budget = self._ctl.config.memory_limit_bytes // 16
        return max(256, int(budget / max(self._avg_view_bytes, 64.0)))

    def seal(self) -> list[Run]:
        """Turn the pending changes into immutable in-memory runs (none if nothing changed).

        Large change sets are cut into several runs by grouping key; every key's rows stay in
        one run, so per key, runs remain ordered by sequence number.
        """
        dirty = self._dirty
        if not dirty:
            return []
        chunk = self._chunk_keys(len(dirty))
        states = self._dirty_states(chunk)
        counted = self._count_seal(states) if self.counting else None
        runs = [
            Run(Segment(self.spec, b), None)
            for b in dirty_batches(self.spec, self._views, dirty, chunk, states)
        ]
        with self.lock:
            self.runs = [*self.runs, *runs]
        if counted is not None:
            self._apply_count(*counted)
        dirty.clear()  # in place: the key-cursor accessors hold this dict
        return runs

    def flush(self) -> list[Run]:
        """Write every change to Parquet (for a commit): pinned runs, then the dirty views as
        one run (:meth:`_write_dirty`); returns the runs written from dirty views."""
        self._write_pinned()
        run = self._write_dirty()
        return [] if run is None else [run]

    def _write_pinned(self) -> int:
        """Write the in-memory runs not yet on storage and release them; returns bytes written."""
        written = 0
        for run in self.runs:
            if run.ref is None:
                written += run.write(self.spec, self.ctx, self.file_prefix).size_bytes
            run.release()
        return written

    def _write_dirty(self) -> Run | None:
        """Stream the dirty views into one run file, chunk by chunk in key order (at most one
        chunk in Arrow at a time); only once it is published does the run join the table and
        the dirt go, so a failed write changes nothing. None if nothing was dirty."""
        dirty = self._dirty
        if not dirty:
            return None
        chunk = self._chunk_keys(len(dirty))
        states = self._dirty_states(chunk)
        counted = self._count_seal(states) if self.counting else None
        parts = dirty_batches(self.spec, self._views, dirty, chunk, states)
        with gc_paused():  # column lists of every dirty key: nothing cyclic to collect
            run = write_run_stream(self.spec, self.ctx, self.file_prefix, parts)
        if run is not None:
            with self.lock:
                self.runs = [*self.runs, run]
        if counted is not None:
            self._apply_count(*counted)
        dirty.clear()  # in place: the key-cursor accessors hold this dict
        return run

    def _dirty_states(self, chunk: int) -> list[Any] | None:
        """A value table's views of its dirty keys in the dirty dict's order: one pass that
        the count and a seal of one chunk (``chunk`` keys or more) share, a lookup per key,
        each a few cache misses; None for lists and maps, and where only one would use it."""
        if self.kind != KIND_VALUE or (not self.counting and len(self._dirty) > chunk):
            return None
        return list(map(self._views.__getitem__, self._dirty))

    def _count_seal(self, states: list[Any] | None) -> tuple[int, int, dict[Key, int]]:
        """What sealing the dirty views changes in the live-row count (read before the runs
        change): (delta, rows written, new sealed counts); see :mod:`fsstate.tables.counts`.
        ``states``: :meth:`_dirty_states`."""
        delta, written, after, blind = count_dirty(
            self.kind, self._views, self._dirty, self._partial, self.sealed_rows, states
        )
        if blind:
            delta -= self._runs_rows(blind)
        return delta, written, after

    def _apply_count(self, delta: int, written: int, after: dict[Key, int]) -> None:
        """Account a seal that succeeded (see :meth:`_count_seal`)."""
        if self.live_rows is not None:
            self.live_rows += delta
        self.row_tally.updated += written
        self.sealed_rows.update(after)

    def _runs_rows(self, keys: Sequence[Key]) -> int:
        """Live rows of ``keys`` in the runs (the sealed state), one point read per key;
        :class:`fsstate.tables.batched.BatchedTable` batches many keys."""
        if not self.runs:
            return 0
        kind = self.kind
        return sum(view_count(kind, self._replay(k, self._cold_rows(k))) for k in keys)

    def release_segments(self) -> int:
        """Release pinned segments of runs already on disk; returns the bytes freed."""
        return sum(run.release() for run in self.runs)

    def spill(self) -> tuple[int, int]:
        """Write pinned runs and dirty views to Parquet, release the runs and evict the views.

        Returns:
            (estimated bytes freed, bytes written to storage).
        """
        before = self.memory_bytes()
        self.settle_counts()  # the deferred counts sort the segments the write needs sorted
        written = self._write_pinned()
        run = self._write_dirty()
        if run is not None and run.ref is not None:
            written += run.ref.size_bytes
        self.evict_clean()  # every view is clean now (partial list views included)
        max_runs = self._ctl.config.compaction_max_runs
        if needs_merge(self.runs, 2 * max_runs):  # the background compactor is behind: help it
            written += self._ctl.compactor().run_once(self)
        elif needs_merge(self.runs, max_runs):
            self._ctl.compactor().request(self)
        return max(0, before - self.memory_bytes()), written

    def memory_bytes(self) -> int:
        """Bytes this table holds: views (sampled estimate), pinned runs, TTL index."""
        views = self._views
        n = len(views)
        total = sum(run.memory_bytes for run in self.runs)
        if self._ttl is not None:
            total += self._ttl.nbytes_estimate
        total += 72 * len(self.sealed_rows)  # the per-key counts of a counting table
        if n:
            self._size_calls += 1
            last_n = self._avg_at_n
            if self._size_calls % 16 == 0 or not (0.8 * last_n <= n <= 1.25 * last_n):
                sample = list(itertools.islice(views.items(), 4))
                sample += list(itertools.islice(reversed(views.items()), 4))
                self._avg_view_bytes = (
                    sum(deep_size(k) + deep_size(v) for k, v in sample) / len(sample) + 100
                )  # + dict slot and hash table overhead
                self._avg_at_n = n
            total += int(n * self._avg_view_bytes)
        return total

    def hot_memory_bytes(self) -> int:
        """The views' share of :meth:`memory_bytes` (its sampled estimate; no sampling here)."""
        return int(len(self._views) * self._avg_view_bytes)

    def evict_clean(self) -> int:
        """Drop every clean view (dirty ones stay pinned); returns the estimated bytes freed.
        A table that lost views may be loaded whole again on its first cold miss at a later
        store version (:mod:`fsstate.tables.warmup`): else every key it touches after a
        reclaim is a point lookup in the runs; not within the version that evicted them, where
        a tight budget would evict and load it over and over."""
        freed = 0
        kind = self.kind
        dirty = self._dirty
        views = self._views
        keep = {}
        for k, v in views.items():
            if k in dirty:
                keep[k] = v
            else:
                freed += estimate_view_bytes(kind, v)
        views.clear()  # in place: key-cursor accessors hold this dict (see fsstate.tables.cursor)
        views.update(keep)
        self._whole = False
        if freed:  # views went: a cold miss of a later version may load the table whole again
            self._evicted = True
        if self.sealed_rows:
            sealed = self.sealed_rows
            self.sealed_rows = {k: sealed[k] for k in keep if k in sealed}
        if self._partial:
            self._partial = {k for k in self._partial if k in keep}
        return freed

    @property
    def complete(self) -> bool:
        """Whether every key with rows in the runs has a view (the table was loaded whole and
        nothing dropped a view since): a key without a view is empty, with no lookup."""
        return self._whole

    def _forget_views(self, keys: Sequence[Key]) -> None:
        self._whole = False  # the keys' rows are in the runs (a batched write), not views
        views = self._views
        if views:
            partial = self._partial
            sealed = self.sealed_rows
            for k in keys:
                views.pop(k, None)
                partial.discard(k)
                sealed.pop(k, None)

    def release_all(self) -> None:
        """Drop everything held in memory, in place (the store closes; later use raises)."""
        # in place: a key-cursor accessor or a state object kept by user code may hold the table
        self._views.clear()
        self._dirty.clear()
        self._partial = set()
        self._whole = False
        self.sealed_rows = {}
        self.runs = []
        self._ttl = None

    # -- catch-up ------------------------------------------------------------------------------
    def view_keys(self) -> KeysView[Key]:
        """The grouping keys that have a view in memory (a live view of the dict's keys)."""
        return self._views.keys()

    def _replay_delta(self, delta: dict[Key, list[OpRow]], seq_min: int) -> int:
        """Replay the new op rows of :meth:`advance` into the views; the number replayed."""
        views = self._views
        partial = self._partial
        replayed = 0
        kind = self.kind
        ranges = self.ranges
        complete = self._whole  # then the delta holds every key's new rows (plan_table)
        added = 0
        for k, rows in delta.items():
            view = views.get(k)
            if view is None:
                if not complete:
                    continue
                view = self._empty()
                added += 1  # no rows before the delta (complete): its view is the delta's
            if k in partial:  # blind appends only: the next read merges them with the runs
                del views[k]
                partial.discard(k)
                self._whole = False
                continue
            floor = ranges.floor(k) if ranges else -1
            if kind == KIND_VALUE:
                views[k] = replay_value(rows, floor)  # every new row is newer than the view
            else:
                views[k] = self._replay(k, view_rows(kind, view, seq_min - 1) + rows)
            if self.counting:
                self.sealed_rows[k] = view_count(kind, views[k])
            replayed += 1
        self._ctl.growth -= added
        return replayed

    def advance(
        self,
        new: TableEntry,
        runs: list[Run],
        delta: Delta,
        ttl_rows: list[tuple[int, int, Any, int | None]] | None,
        seq_min: int,
    ) -> int:
        """Advance this clean table to ``new``, as :func:`fsstate.store.catchup.plan_table` planned.

        Args:
            new: the target version's entry of the table.
            runs: the target's runs (objects of this table reused where the file is the same).
            delta: rows with ``seq >= seq_min`` of the keys that have a view, by key, or
                (a value table without range tombstones) those keys' newest views.
            ttl_rows: index rows to apply to the loaded TTL index, or None to reload it lazily.
            seq_min: the ``next_seq`` of the version the views reflect.

        Returns:
            The number of views replayed.
        """
        if isinstance(delta, NewestValues):
            replayed = len(delta.views)
            install(self, delta, overwrite=True)  # viewed keys only, unless complete
        else:
            replayed = self._replay_delta(delta, seq_min)
        with self.lock:
            self.runs = runs
        idx = self._ttl
        if idx is not None and ttl_rows is not None:
            for op, exp, entry, count in ttl_rows:
                idx.apply_row(op, exp, entry, count)
        else:
            self._ttl = None if new.ttl_runs else TtlIndex()
        self.ttl_refs = list(new.ttl_runs)
        if new.ttl_runs:
            self.indexed = True
        if new.spec.key_schema is not None and self.spec.key_schema is None:
            self._set_key_schema(new.spec.key_schema)
        return replayed

    def reset_to(self, entry: TableEntry) -> None:
        """Make this table exactly a committed entry, in place (the object, its accessors and
        the state objects holding it stay valid): views, dirt and runs are replaced, the TTL
        index is reloaded lazily. Used when a store adopts or catches up to a version it cannot
        replay into its views."""
        with self.lock:
            self.runs = [Run(None, ref) for ref in entry.runs]
        self._views.clear()  # in place: key-cursor accessors hold these dicts
        self._dirty.clear()
        self._partial = set()
        self.sealed_rows = {}
        self._warmed = False
        self._whole = False
        self.incarnation = entry.incarnation
        self.ttl_refs = list(entry.ttl_runs)
        self._ttl = None if entry.ttl_runs else TtlIndex()
        self.indexed = bool(entry.ttl_runs) or self.ttl_ms is not None
        self.ranges = RangeTombstones.from_batch(entry.range_tombstones)
        self.ranges_dirty = False
        if entry.spec.key_schema is not None and self.spec.key_schema is None:
            self._set_key_schema(entry.spec.key_schema)

    # -- stats -----------------------------------------------------------------------------------
    def hot_keys(self) -> int:
        """Views held in memory."""
        return len(self._views)

    def hot_bytes_estimate(self) -> int:
        """Estimated bytes of the views."""
        kind = self.kind
        return sum(estimate_view_bytes(kind, v) for v in self._views.values())

    def stats(self) -> TableStats:
        """This table's figures (no I/O); ``memory_bytes`` counts runs, views and TTL index."""
        ttl = self._ttl if self.ttl_loaded else None
        hot = self.hot_bytes_estimate()
        seg = sum(r.memory_bytes for r in self.runs)
        disk = sum(r.ref.size_bytes for r in self.runs if r.ref is not None)
        return TableStats(
            self.kind,
            self.hot_keys(),
            hot,
            len(self.runs),
            sum(1 for r in self.runs if r.in_memory),
            seg,
            disk + sum(r.size_bytes for r in self.ttl_refs),
            sum(r.rows for r in self.runs),
            len(ttl) if ttl is not None else None,
            seg + hot + (ttl.nbytes_estimate if ttl is not None else 0),
        )
