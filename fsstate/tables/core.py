"""The shared fields of a state table, and the narrow view a table has of its store and budget.

Every table kind is one class chain (:class:`TableCore` -> :class:`fsstate.tables.base.TableBase`
-> :class:`fsstate.tables.batched.BatchedTable` -> value / list / map). :class:`TableCore`
declares and initializes every field of a table, so the modules that work on a table from
the side (:mod:`fsstate.tables.cursor` generates accessors over its dicts,
:mod:`fsstate.tables.warmup` bulk-loads its views) are typed against this class and need
nothing above it.

Fields (owned by the table; the modules of this package read and write them, nothing outside
``fsstate.tables`` does):

* ``_views``: grouping key -> its complete view (see :mod:`fsstate.tables.memtable`);
* ``_dirty``: what changed since the last seal (same module);
* ``_partial``: list views holding only blind appends;
* ``runs``: sealed runs, oldest first, replaced copy-on-write under ``lock``;
* ``_ttl`` / ``ttl_refs`` / ``indexed``: the TTL index (None until loaded), its files, and
  whether writes maintain it; ``_ttl_ms`` the TTL of new writes;
* ``ranges``: range tombstones;
* ``counting`` / ``live_rows`` / ``sealed_rows`` / ``row_tally``: the live-row count and the
  epoch's row events, when the store records version summaries (:mod:`fsstate.tables.counts`);
  ``uncounted``: segments of batched writes into a table that held nothing, whose distinct
  keys are not yet added to both (:meth:`TableCore.settle_counts`).

A table sees its store through :class:`StoreHost` and the process's memory controller through
:class:`Budget` (annotation-only Protocols: no import of the concrete owners, which live above).

Invariants:

* Every field exists from construction on (no attribute is added later).
* ``now_ms`` is the store's processing time, set by the store on every table.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from fsstate.errors import KeyArityError
from fsstate.format.keyorder import check_bound
from fsstate.format.refs import FileRef
from fsstate.format.schema import (
    KIND_MAP,
    KIND_VALUE,
    Checker,
    TableSpec,
    infer_key_schema,
    make_checker,
)
from fsstate.format.segment import OpRow, Segment
from fsstate.format.tombstones import ABSENT, RangeTombstones, replay_list, replay_map, replay_value
from fsstate.interfaces import Key, StateKind
from fsstate.storage.runfile import RunContext
from fsstate.storage.runs import Run
from fsstate.tables.counts import RowTally
from fsstate.tables.ttl_index import TtlIndex

if TYPE_CHECKING:
    from fsstate.config import EngineConfig
    from fsstate.storage.fileio import FileIO
    from fsstate.storage.manifest import TableEntry


class StoreHost(Protocol):
    """What a table uses of its store (:class:`fsstate.store.partition.PartitionStore`)."""

    next_seq: int
    now_ms: int
    version: int | None
    fileio: FileIO
    store_dir: str
    ctx: RunContext

    @property
    def controller(self) -> Budget:
        """The process's memory controller."""

    @property
    def closed(self) -> bool:
        """Whether the store was closed."""

    def check_open(self) -> None:
        """Raise :class:`fsstate.errors.StoreClosedError` if the store is closed."""

    def tombstone_horizon_seq(self) -> int:
        """Tombstones with a seq at or above this must survive a bottom compaction."""

    def file_prefix(self, name: str) -> str:
        """File name prefix of a table's runs."""


class CompactionQueue(Protocol):
    """What a table uses of the compactor (:class:`fsstate.compaction.Compactor`)."""

    def request(self, table: Any) -> bool:
        """Queue a table for a background round."""

    def run_once(self, table: Any, force: bool = False) -> int:
        """A synchronous round; returns the bytes written."""


class Budget(Protocol):
    """What a table uses of the memory controller (:class:`fsstate.controller.MemoryController`)."""

    growth: int
    config: EngineConfig

    def check(self) -> None:
        """Reclaim memory if usage is above the high watermark."""

    def compactor(self) -> CompactionQueue:
        """The background compactor."""


class TableCore:
    """Every field of a state table, and the small helpers the whole package shares."""

    kind: StateKind
    name: str
    spec: TableSpec

    def __init__(self, store: StoreHost, entry: TableEntry) -> None:
        self._store = store
        self.spec = entry.spec
        self.name = entry.spec.name
        self.incarnation = entry.incarnation
        self.indexed = bool(entry.ttl_runs)  # writes maintain the TTL index
        self._ttl_ms: int | None = None
        self.ttl_ms = entry.spec.ttl_ms
        self.now_ms: int = store.now_ms
        self.ctx = store.ctx
        self._ctl: Budget = store.controller
        self.lock = threading.Lock()  # guards replacing ``runs`` (seal, spill, compaction)
        self.file_prefix = store.file_prefix(entry.spec.name)
        self.compactions = 0
        self.dead_runs_dropped = 0  # runs a range tombstone hid entirely (drop_dead_runs)
        self._avg_view_bytes = 0.0
        self._avg_at_n = 0
        self._size_calls = 0
        self._views: dict[Key, Any] = {}
        self._partial: set[Key] = set()  # list views holding only blind appends (see append)
        self._warmed = False  # whether the first cold miss tried to load the table whole
        # the memory budget evicted views since that try, and the store version it was at: a
        # table may be loaded whole again once per version after an eviction (see warmup)
        self._evicted = False
        self._warmed_at: int | None = None
        # every key with rows in the runs has a view (a whole-table warm-up made it so; cleared
        # when a view goes without its rows or rows arrive without views): a miss is empty
        self._whole = False
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
        self._prefix_checks: dict[int, Checker] = {}
        self.counting: bool = store.ctx.config.record_summary
        self.live_rows: int | None = None  # set by the store (None: unknown)
        self.sealed_rows: dict[Key, int] = {}
        self.row_tally = RowTally()
        self.uncounted: list[Segment] = []  # batched writes whose count is deferred

    def settle_counts(self) -> None:
        """Add the deferred counts of batched writes (``uncounted``) to ``row_tally`` and
        ``live_rows``: each segment's distinct keys (map: entries), taken from its sorted rows.

        Such a batch went into a table that held nothing, so each of its distinct keys is one
        row updated and one live row more; the count waits for the sort that a commit or a
        spill does anyway. Called by the store's summary before it reads the counts, and by a
        spill before the segments leave memory."""
        pending, self.uncounted = self.uncounted, []
        entries = self.kind == KIND_MAP
        for segment in pending:
            n = segment.distinct_count(entries)
            self.row_tally.updated += n
            if self.live_rows is not None:
                self.live_rows += n

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

    def _check_prefix(self, prefix: Any) -> Key:
        """A key prefix (the first fields of a key, at least one) checked against the schema."""
        schema = self.spec.key_schema
        if schema is None:
            return self._check_key(prefix)
        items = tuple(prefix) if isinstance(prefix, (tuple, list)) else None
        if items is None or not 1 <= len(items) <= len(schema):
            raise KeyArityError(
                f"state {self.name!r}: a key bound must be a tuple of 1 to {len(schema)} of the "
                f"key's first fields ({', '.join(schema.names)}), got {prefix!r}"
            )
        n = len(items)
        check = self._prefix_checks.get(n)
        if check is None:
            sub = pa.schema(list(schema)[:n])
            check = self._prefix_checks[n] = make_checker(self.name, "key bound", sub)
        try:
            return check_bound(self.name, check(items))
        except ValueError as exc:
            raise KeyArityError(f"{exc} (a bound is a key or its first fields)") from None

    # -- store and budget ----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether the owning store was closed."""
        return self._store.closed

    def tombstone_horizon_seq(self) -> int:
        """See :meth:`fsstate.store.partition.PartitionStore.tombstone_horizon_seq`."""
        return self._store.tombstone_horizon_seq()

    def _next_seq(self) -> int:
        st = self._store
        seq = st.next_seq
        st.next_seq = seq + 1
        return seq

    def _after_growth(self) -> None:
        """A safe point (no view held by the caller): let the controller check the budget."""
        ctl = self._ctl
        if ctl.growth <= 0:
            ctl.check()

    # -- TTL -------------------------------------------------------------------------------------
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

    def _expiry(self) -> int | None:
        ttl = self.ttl_ms
        return None if ttl is None else self.now_ms + ttl

    # -- views -----------------------------------------------------------------------------------
    def _replay(self, key: Key, rows: list[OpRow]) -> Any:
        """The view of ``key`` from its op rows (any tiers, any order of runs)."""
        floor = self.ranges.floor(key) if self.ranges else -1
        if self.kind == KIND_VALUE:
            return replay_value(rows, floor)
        if self.kind == KIND_MAP:
            return replay_map(rows, floor)
        return replay_list(rows, floor)

    def _empty(self) -> Any:
        return ABSENT if self.kind == KIND_VALUE else ({} if self.kind == KIND_MAP else [])
