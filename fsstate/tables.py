"""Typed state tables: value, list and map state over the memtable, segments and runs.

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

Batched (Arrow) reads and writes live in :mod:`fsstate.tables_batched`, the bulk load of a
table's views on its first cold miss in :mod:`fsstate.warmup`.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fsstate import interfaces
from fsstate.cursor import Getter, KeyCursor, Updater, Value, value_cursor_ops
from fsstate.keyfilter import stable_hash
from fsstate.manifest import TableEntry
from fsstate.manifest_refs import FileRef
from fsstate.memtable import deep_size, dirty_batches, estimate_view_bytes
from fsstate.run import Run, read_table_file, write_run_stream
from fsstate.schema import (
    KIND_MAP,
    KIND_VALUE,
    OP_CLEAR,
    Checker,
    TableSpec,
    infer_key_schema,
    make_checker,
)
from fsstate.segment import OpRow, Segment
from fsstate.tables_batched import BatchedOps, _values_table
from fsstate.tombstones import (
    ABSENT,
    RangeTombstones,
    Timed,
    in_range,
    replay_list,
    replay_map,
    replay_value,
)
from fsstate.ttl_index import TtlIndex, decode_rows
from fsstate.warmup import warm_up

if TYPE_CHECKING:
    from fsstate.store import PartitionStore

Key = tuple[Any, ...]


class TableBase(BatchedOps, interfaces.StateTable):
    """Machinery shared by the three kinds: views, dirt, runs, TTL index, range tombstones."""

    kind = ""
    name: str
    spec: TableSpec

    def __init__(self, store: PartitionStore, entry: TableEntry) -> None:
        self._store = store
        self.spec = entry.spec
        self.name = entry.spec.name
        self.incarnation = entry.incarnation
        self.indexed = bool(entry.ttl_runs)  # writes maintain the TTL index
        self._ttl_ms: int | None = None
        self.ttl_ms = entry.spec.ttl_ms
        self.now_ms: int = store.now_ms
        self.ctx = store.ctx
        self._ctl = store.controller
        self.lock = threading.Lock()  # guards replacing ``runs`` (seal, spill, compaction)
        self.file_prefix = store.file_prefix(entry.spec.name)
        self.compactions = 0
        self._avg_view_bytes = 0.0
        self._avg_at_n = 0
        self._size_calls = 0
        self._views: dict[Key, Any] = {}
        self._partial: set[Key] = set()  # list views holding only blind appends (see append)
        self._warmed = False  # whether the first cold miss tried to load the table whole
        self._dirty: dict[Key, Any] = {}
        self.runs: list[Run] = [Run(None, ref) for ref in entry.runs]  # copy-on-write
        self.ttl_refs: list[FileRef] = list(entry.ttl_runs)
        self._ttl: TtlIndex | None = None if entry.ttl_runs else TtlIndex()
        self.ranges = RangeTombstones.from_batch(entry.range_tombstones)
        self.ranges_dirty = False
        self._value_check = make_checker(self.name, "value", self.spec.value_schema)
        self._key_check = (
            make_checker(self.name, "grouping key", self.spec.key_schema)
            if self.spec.key_schema is not None
            else None
        )

    # -- keys and schema ---------------------------------------------------------------------
    def _set_key_schema(self, schema: pa.Schema) -> Checker:
        """Fix the grouping-key schema (declared late or inferred); returns its checker."""
        self.spec = dataclasses.replace(self.spec, key_schema=schema)
        check = self._key_check = make_checker(self.name, "grouping key", schema)
        return check

    def _check_key(self, key: Any) -> Key:
        check = self._key_check
        if check is None:
            check = self._set_key_schema(infer_key_schema(self.name, key))
        return check(key)

    @property
    def dirty(self) -> bool:
        """Whether the table changed since its last seal or commit."""
        return bool(self._dirty) or self.ranges_dirty or any(r.ref is None for r in self.runs)

    def _next_seq(self) -> int:
        st = self._store
        seq = st.next_seq
        st.next_seq = seq + 1
        return seq

    def _expiry(self) -> int | None:
        ttl = self.ttl_ms
        return None if ttl is None else self.now_ms + ttl

    # -- cold reads ----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether the owning store was closed."""
        return self._store.closed

    def tombstone_horizon_seq(self) -> int:
        """See :meth:`fsstate.store.PartitionStore.tombstone_horizon_seq`."""
        return self._store.tombstone_horizon_seq()

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

    def _replay(self, key: Key, rows: list[OpRow]) -> Any:
        floor = self.ranges.floor(key) if self.ranges else -1
        if self.kind == KIND_VALUE:
            return replay_value(rows, floor)
        if self.kind == KIND_MAP:
            return replay_map(rows, floor)
        return replay_list(rows, floor)

    def _load(self, key: Key) -> Any:
        """Load (and cache) the complete view of a validated key from the sealed tiers."""
        self._store._check_open()  # a closed store's tables hold nothing any more
        if not self.runs:
            view = self._empty()
        else:
            if not self._warmed:
                self._warmed = True
                if warm_up(self):
                    view = self._views.get(key)
                    if view is not None:
                        return view
            view = self._replay(key, self._cold_rows(key))
        self._views[key] = view
        self._ctl.growth -= 1
        return view

    def _after_growth(self) -> None:
        """A safe point (no view held by the caller): let the controller check the budget."""
        ctl = self._ctl
        if ctl.growth <= 0:
            ctl.check()

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
        self._views[key] = merged
        self._partial.discard(key)
        return merged

    def _empty(self) -> Any:
        return ABSENT if self.kind == KIND_VALUE else ({} if self.kind == KIND_MAP else [])

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

    def index_rows(self, refs: Sequence[FileRef]) -> Iterator[tuple[int, int, Any, int | None]]:
        """The (op, expiry, entry, count) rows of TTL index runs, in order."""
        st = self._store
        for ref in refs:
            yield from decode_rows(self.spec, read_table_file(st.fileio, st.store_dir, ref))

    @property
    def ttl_ms(self) -> int | None:
        """Time to live of new writes (None: no TTL)."""
        return self._ttl_ms

    @ttl_ms.setter
    def ttl_ms(self, value: int | None) -> None:
        self._ttl_ms = value
        if value is not None:
            # once a table has had a TTL its index may hold entries: keep maintaining it
            self.indexed = True

    @property
    def ttl_loaded(self) -> bool:
        """Whether the TTL index is in memory."""
        return self._ttl is not None

    # -- whole-table operations ----------------------------------------------------------------
    def delete_range(self, lo: Key, hi: Key) -> None:
        """Remove every grouping key ``k`` with ``lo <= k < hi`` (a range tombstone)."""
        lo = self._check_key(lo)
        hi = self._check_key(hi)
        idx = self.ttl_index() if self.indexed else None
        seq = self._next_seq()
        self.ranges.add(lo, hi, seq)
        self.ranges_dirty = True
        empty = self._empty
        for k in list(self._views):
            if in_range(k, lo, hi):
                self._views[k] = empty()
                self._dirty.pop(k, None)
                self._partial.discard(k)
        if idx is not None:
            if self.kind == KIND_MAP:
                doomed = idx.entries_where(lambda e: in_range(e[0], lo, hi))
            else:
                doomed = idx.entries_where(lambda e: in_range(e, lo, hi))
            for entry in doomed:
                idx.discard(entry)

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
        runs = [
            Run(Segment(self.spec, b), None)
            for b in dirty_batches(self.spec, self._views, dirty, chunk)
        ]
        with self.lock:
            self.runs = [*self.runs, *runs]
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
        parts = dirty_batches(self.spec, self._views, dirty, chunk)
        run = write_run_stream(self.spec, self.ctx, self.file_prefix, parts)
        if run is not None:
            with self.lock:
                self.runs = [*self.runs, run]
        dirty.clear()  # in place: the key-cursor accessors hold this dict
        return run

    def release_segments(self) -> int:
        """Release pinned segments of runs already on disk; returns the bytes freed."""
        return sum(run.release() for run in self.runs)

    def spill(self) -> tuple[int, int]:
        """Write pinned runs and dirty views to Parquet, release the runs and evict the views.

        Returns:
            (estimated bytes freed, bytes written to storage).
        """
        before = self.memory_bytes()
        written = self._write_pinned()
        run = self._write_dirty()
        if run is not None and run.ref is not None:
            written += run.ref.size_bytes
        self.evict_clean()  # every view is clean now (partial list views included)
        max_runs = self._ctl.config.compaction_max_runs
        if len(self.runs) > 2 * max_runs:  # the background compactor is behind: help it
            written += self._ctl.compactor().run_once(self)
        elif len(self.runs) > max_runs:
            self._ctl.compactor().request(self)
        return max(0, before - self.memory_bytes()), written

    def memory_bytes(self) -> int:
        """Bytes this table holds: views (sampled estimate), pinned runs, TTL index."""
        views = self._views
        n = len(views)
        total = sum(run.memory_bytes for run in self.runs)
        if self._ttl is not None:
            total += self._ttl.nbytes_estimate
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

    def evict_clean(self) -> int:
        """Drop every clean view (dirty ones stay pinned); returns the estimated bytes freed."""
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
        views.clear()  # in place: key-cursor accessors hold this dict (see fsstate.cursor)
        views.update(keep)
        if self._partial:
            self._partial = {k for k in self._partial if k in keep}
        return freed

    def _forget_views(self, keys: Sequence[Key]) -> None:
        views = self._views
        if views:
            partial = self._partial
            for k in keys:
                views.pop(k, None)
                partial.discard(k)

    def release_all(self) -> None:
        """Drop everything held in memory, in place (the store closes; later use raises)."""
        # in place: a key-cursor accessor or a state object kept by user code may hold the table
        self._views.clear()
        self._dirty.clear()
        self._partial = set()
        self.runs = []
        self._ttl = None

    # -- stats -----------------------------------------------------------------------------------
    def hot_keys(self) -> int:
        """Views held in memory."""
        return len(self._views)

    def hot_bytes_estimate(self) -> int:
        """Estimated bytes of the views."""
        kind = self.kind
        return sum(estimate_view_bytes(kind, v) for v in self._views.values())


class ValueTable(TableBase, interfaces.ValueTableAPI):
    """One value per grouping key (Spark's ValueState)."""

    kind = KIND_VALUE

    def cursor_ops(
        self,
        cursor: KeyCursor,
        get_slow: Callable[..., Value | None],
        update_slow: Callable[..., None],
        method: bool = False,
    ) -> tuple[Getter, Updater]:
        """One-frame ``get()`` / ``update(value)`` at ``cursor.key``; see :mod:`fsstate.cursor`."""
        return value_cursor_ops(self, cursor, get_slow, update_slow, method)

    def get(self, key: Key) -> tuple[Any, ...] | None:
        """The live value of the key, or None."""
        try:
            e = self._views.get(key)
        except TypeError:
            key, e = self._checked_view(key)
        if e is None:
            e = self._view(key)[1]
            self._after_growth()
        if type(e) is tuple:
            return e
        if e is ABSENT:
            return None
        if type(e) is Timed:
            return None if e[1] <= self.now_ms else e[0]
        return e  # type: ignore[no-any-return]

    def exists(self, key: Key) -> bool:
        """Whether the key holds a live value."""
        return self.get(key) is not None

    def update(self, key: Key, value: tuple[Any, ...]) -> None:
        """Set the key's value; with a TTL its expiry becomes now + ttl."""
        value = self._value_check(value)
        views = self._views
        try:
            known = key in views
        except TypeError:  # an unhashable key (a list): checked below
            known = False
        if not self.indexed:
            st = self._store
            if not known:
                st._check_open()
                key = self._check_key(key)
                seq = st.next_seq
                st.next_seq = seq + 1
                views[key] = value
                self._dirty[key] = seq
                ctl = self._ctl
                ctl.growth -= 1
                if ctl.growth <= 0:
                    ctl.check()
                return
            seq = st.next_seq
            st.next_seq = seq + 1
            views[key] = value
            self._dirty[key] = seq
            return
        idx = self._ttl
        if idx is None or not known:  # first touch, or the index not loaded yet
            key, _ = self._view(key)
            idx = self.ttl_index()
        st = self._store
        seq = st.next_seq
        st.next_seq = seq + 1
        ttl = self._ttl_ms
        if ttl is None:
            views[key] = value
            self._dirty[key] = seq
            idx.discard(key)
        else:
            exp = self.now_ms + ttl
            views[key] = Timed((value, exp))
            self._dirty[key] = seq
            idx.set(key, exp)
        self._after_growth()

    def clear(self, key: Key) -> None:
        """Remove the key's value."""
        indexed = self.indexed
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            if indexed:
                key, view = self._view(key)
            else:
                key = self._check_key(key)
                view = self._views.get(key)
        if view is ABSENT:
            return
        seq = self._next_seq()
        self._views[key] = ABSENT
        self._dirty[key] = seq
        if indexed:
            self.ttl_index().discard(key)
        self._after_growth()

    def expire(self) -> int:
        """Remove values expired at the current time; returns how many were removed."""
        if not self.indexed:
            return 0
        idx = self.ttl_index()
        now = self.now_ms
        removed = 0
        for _exp, key in idx.pop_expired(now):
            idx.lookups += 1
            view = self._views.get(key)  # type: ignore[call-overload]
            if view is None:
                view = self._load(key)  # type: ignore[arg-type]
            if type(view) is not Timed:
                continue  # gone, or rewritten without an expiry since
            if view[1] <= now:
                self._views[key] = ABSENT  # type: ignore[index]
                self._dirty[key] = self._next_seq()  # type: ignore[index]
                removed += 1
            else:
                idx.set(key, view[1])
        self._after_growth()
        return removed

    def get_many(self, keys: pa.Table) -> pa.Table:
        """Values for a table of keys, in input order, with a boolean ``_found`` column."""
        key_struct, key_list = self._keys_from_table(keys)
        if self._arrow_lookup_pays(len(key_struct)):
            return self._get_many_arrow(key_struct)
        get, view_of = self.get, self._views.get
        # a live, non-expiring view (a plain tuple) answers in place; anything else takes the
        # point-get path
        vals = [e if type(e) is tuple else get(k) for k in key_list for e in (view_of(k),)]
        return _values_table(self.spec.value_schema, vals)

    def put_many(self, keys: pa.Table, values: pa.Table) -> None:
        """Set values for many keys; later rows win over earlier rows of the same key."""
        key_struct, key_list, value_struct = self._keys_and_values(keys, values)
        if not key_list:
            return
        if self.indexed:
            for k, v in zip(key_list, value_struct.to_pylist()):
                self.update(k, tuple(v.values()))
            return
        self._append_batch(key_struct, None, value_struct, key_list)


from fsstate.tables_collections import ListTable, MapTable  # noqa: E402

__all__ = ["ListTable", "MapTable", "TableBase", "ValueTable"]
