"""Windowed aggregation over event time: tumbling and sliding windows stored as panes.

A sliding window of ``size`` every ``slide`` is the union of *panes*, tumbling windows of width
``gcd(size, slide)``; the state holds one row of aggregate partials per (pane, grouping key),
not one per overlapping window, so a row updates one state row whatever the overlap
(tumbling windows are one pane each). Window assignment is Spark's
(``TimeWindowResolution``): windows start at ``start + k * slide``, include their start and
exclude their end.

Tables: ``panes``, a value table keyed by ``(_pane_us, *keys)`` holding the partial columns of
:mod:`fsstate.operators.aggregates`.

Per epoch (watermarks as in :mod:`fsstate.operators.base`, Spark's rules):

* a (row, window) pair is late when ``window.end <= late``; a row whose every window is late is
  dropped, the others go into their pane (a closed window is never emitted again, so a late
  pair's contribution to a pane is never seen);
* **append**: windows with ``late < end <= evict`` are emitted once, from a range scan of the
  panes below ``evict`` (starting where the last purge ended); tumbling windows are read and
  emitted in key-range pieces of about ``EMIT_CHUNK_BYTES`` stored bytes, so closing a window
  holds its output and one piece, not the window's panes several times over;
* **update**: every (window, key) that received a non-late row is emitted with its merged
  aggregate (for sliding windows its panes are read with one ``get_many``);
* then every pane whose last window ended at or below ``evict`` is removed with one range
  tombstone.

Open panes: every version's meta holds ``open_panes_us``, the ascending starts of the panes with
live rows (a pane is added when written, removed when purged; after a rescale, the union of the
old partitions' summaries: a superset, which only costs scans that find nothing; at most
``OPEN_PANES_MAX``, else null, as in state written before it existed: then the summary is not
used). An epoch in which no
open pane belongs to a window ending in ``(late, evict]`` emits nothing without scanning, and
one with no open pane below the purge cutoff writes no tombstone: a partition without input
whose windows are not due costs no read of its panes.

Combining before the shuffle: :meth:`WindowAggregate.combine` does the first step above (late
pairs dropped, rows to panes, partials per (pane, keys), plus the largest event time of each
group for the watermark) on any part of the input; the combined copy merges such rows from
every input partition (:func:`fsstate.operators.aggregates.combine_partials`) and goes on as
with its own pre-aggregation. A late row never raises the largest event time (it is below the
previous watermark), so dropping it map-side changes no watermark.

Invariants: outputs equal Spark's ``groupBy(window(t, size, slide, start), keys).agg(...)`` on
the same micro-batches and watermarks (append and update modes), and the cost of an epoch is
proportional to its input and to the panes of the windows it closes, not to the state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError
from fsstate.operators.aggregates import (
    Agg,
    batch_partials,
    combine_partials,
    finalize,
    merge_partials,
    partial_schema,
)
from fsstate.operators.base import (
    Epoch,
    Operator,
    require_columns,
    require_time,
    take_rows,
    time_us,
)
from fsstate.operators.combining import ROWS as COMBINED_ROWS
from fsstate.operators.combining import batch_stats
from fsstate.operators.expiry import purged_below
from fsstate.store.partition import PartitionStore

PANE = "_pane_us"
WSTART = "_wstart_us"
TMAX = "_tmax_us"  # combined rows: the largest event time of the group (the watermark input)
MODES = ("append", "update")
EMIT_CHUNK_BYTES = 2 * 1024 * 1024  # stored pane bytes resolved per piece of a closing scan
OPEN_PANES_META = "open_panes_us"  # version meta: starts of the panes with live rows
OPEN_PANES_MAX = 4096  # more open panes than this: the summary is dropped (scans as before)


@dataclass(frozen=True)
class Window:
    """Tumbling (``slide_ms`` None) or sliding event-time windows, Spark's ``window()``.

    Attributes:
        size_ms: window length.
        slide_ms: distance between window starts (None: tumbling, equal to the size).
        start_ms: offset of window starts from the Unix epoch (Spark's ``startTime``).
    """

    size_ms: int
    slide_ms: int | None = None
    start_ms: int = 0

    def __post_init__(self) -> None:
        slide = self.size_ms if self.slide_ms is None else self.slide_ms
        if not isinstance(self.size_ms, int) or self.size_ms <= 0:
            raise ConfigError(f"window size_ms must be a positive int, got {self.size_ms!r}")
        if not isinstance(slide, int) or not 0 < slide <= self.size_ms:
            raise ConfigError(
                f"window slide_ms must be a positive int at most the size ({self.size_ms}), "
                f"got {self.slide_ms!r}"
            )
        if not isinstance(self.start_ms, int) or not 0 <= self.start_ms < slide:
            raise ConfigError(
                f"window start_ms must be an int in [0, slide) = [0, {slide}), got "
                f"{self.start_ms!r}"
            )

    @property
    def size_us(self) -> int:
        return self.size_ms * 1000

    @property
    def slide_us(self) -> int:
        return (self.size_ms if self.slide_ms is None else self.slide_ms) * 1000

    @property
    def start_us(self) -> int:
        return self.start_ms * 1000

    @property
    def pane_us(self) -> int:
        """Pane width: gcd(size, slide)."""
        return math.gcd(self.size_us, self.slide_us)

    def floor(self, t: np.ndarray[Any, Any], step: int) -> np.ndarray[Any, Any]:
        """Start of the ``step``-aligned interval (offset by ``start``) holding each time."""
        out: np.ndarray[Any, Any] = t - np.mod(t - self.start_us, step)
        return out

    def cutoff(self, evict_us: int) -> int:
        """The first pane start still needed once windows ending at or below ``evict_us``
        are closed (the start of the first window ending after it)."""
        t = np.array([evict_us - self.size_us], dtype=np.int64)
        return int(self.floor(t, self.slide_us)[0]) + self.slide_us

    def windows_of(
        self, panes: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """(row index, window start) of every window containing each pane."""
        slide, size, g = self.slide_us, self.size_us, self.pane_us
        last = self.floor(panes, slide)
        rows, starts = [], []
        idx = np.arange(len(panes), dtype=np.int64)
        for i in range(math.ceil(size / slide)):
            s = last - i * slide
            ok = s + size >= panes + g
            rows.append(idx[ok])
            starts.append(s[ok])
        return np.concatenate(rows), np.concatenate(starts)


class WindowAggregate(Operator):
    """Aggregates per (window, grouping key) over event time (see the module docstring).

    Args:
        name: the operator's state name.
        keys: grouping columns (besides the window).
        time: event-time column (timestamp, or int64 microseconds).
        window: the windows.
        aggs: the aggregates.
        mode: ``"append"`` (each window once, when the watermark closes it) or ``"update"``
            (every changed window, every epoch).
    """

    def __init__(
        self,
        name: str,
        *,
        keys: Sequence[str],
        time: str,
        window: Window,
        aggs: Sequence[Agg],
        mode: str = "append",
    ) -> None:
        super().__init__(name)
        if mode not in MODES:
            raise ConfigError(f"operator {name!r}: mode must be one of {MODES}, got {mode!r}")
        if not aggs:
            raise ConfigError(f"operator {name!r}: give at least one aggregate")
        self.keys, self.time, self.window = list(keys), time, window
        self.aggs, self.mode = list(aggs), mode
        names = [a.name for a in self.aggs]
        if len(set(names)) != len(names) or {"window", *self.keys} & set(names):
            raise ConfigError(f"operator {name!r}: output names {names} must be distinct")

    # -- schemas ----------------------------------------------------------------------------
    def _time_type(self, schema: pa.Schema) -> pa.DataType:
        t = schema.field(self.time).type
        return t if pa.types.is_timestamp(t) else pa.timestamp("us", tz="UTC")

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        input_schema = self.schema_of(input_schema)
        require_columns(self.name, input_schema, [*self.keys, self.time])
        require_time(self.name, input_schema, self.time)
        ts = self._time_type(input_schema)
        window = pa.struct([pa.field("start", ts), pa.field("end", ts)])
        fields = [pa.field("window", window)]
        fields += [input_schema.field(k).with_nullable(True) for k in self.keys]
        fields += [pa.field(a.name, a.result_type(input_schema, self.name)) for a in self.aggs]
        return pa.schema(fields)

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        input_schema = self.schema_of(input_schema)
        self.output_schema(input_schema)
        key = pa.schema(
            [pa.field(PANE, pa.int64(), nullable=False)]
            + [input_schema.field(k).with_nullable(True) for k in self.keys]
        )
        value = partial_schema(self.aggs, input_schema, self.name)
        self.panes = store.value_table("panes", value, key_schema=key)
        self.input_schema = input_schema
        self.store = store
        if store.version is None and OPEN_PANES_META not in store.meta:
            store.meta[OPEN_PANES_META] = []  # new state: the summary starts empty

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        if self.raw_schema is not None:
            return {"input": batch.column(TMAX).combine_chunks()}
        return {"input": time_us(batch.column(self.time), self.name, self.time)}

    # -- combining before the shuffle ----------------------------------------------------------
    def can_combine(self, input_schema: pa.Schema) -> bool:
        return True

    def combined_schema(self, input_schema: pa.Schema) -> pa.Schema:
        self.output_schema(input_schema)
        fields = [pa.field(PANE, pa.int64())]
        fields += [input_schema.field(k).with_nullable(True) for k in self.keys]
        fields += list(partial_schema(self.aggs, input_schema, self.name))
        return pa.schema([*fields, pa.field(TMAX, pa.int64()), pa.field(COMBINED_ROWS, pa.int64())])

    def combine(self, batch: pa.Table, late_ms: int) -> pa.Table:
        """(pane, keys, partials, largest event time, rows folded) of the rows' non-late
        (row, window)s."""
        out = self._partials(batch, late_ms * 1000, with_tmax=True)
        return out.cast(self.combined_schema(batch.schema))

    def _partials(self, batch: pa.Table, late_us: int, with_tmax: bool = False) -> pa.Table:
        """Rows to panes (late ones dropped), pre-aggregated per (pane, keys)."""
        w = self.window
        t = time_us(batch.column(self.time), self.name, self.time)
        valid = np.asarray(pc.is_valid(t).to_numpy(zero_copy_only=False), dtype=bool)
        tv = np.asarray(pc.fill_null(t, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        last_end = w.floor(tv, w.slide_us) + w.size_us
        keep = valid & (last_end > late_us)
        rows = take_rows(batch, keep)
        panes = w.floor(tv[keep], w.pane_us)
        table = rows.select([*self.keys, *{a.column for a in self.aggs if a.column}])
        table = table.append_column(PANE, pa.array(panes, pa.int64()))
        if not with_tmax:
            return batch_partials(table, [PANE, *self.keys], self.aggs, self.name)
        table = table.append_column("_t", pa.array(tv[keep], pa.int64()))
        return batch_partials(
            table,
            [PANE, *self.keys],
            self.aggs,
            self.name,
            max_of=("_t", TMAX),
            rows_as=COMBINED_ROWS,
        )

    # -- one epoch ---------------------------------------------------------------------------
    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        late_us, evict_us = epoch.late_ms * 1000, epoch.evict_ms * 1000
        if self.raw_schema is not None:  # combined rows of every input partition: merge them
            rows = int(pc.sum(batch.column(COMBINED_ROWS)).as_py() or 0)
            partials = combine_partials(
                batch.drop_columns([TMAX, COMBINED_ROWS]), [PANE, *self.keys], self.aggs
            )
        else:
            rows = batch.num_rows
            partials = self._partials(batch, late_us)
        combined = self.raw_schema is not None
        self.last_stats = batch_stats(rows, batch.num_rows, partials.num_rows, combined)
        pnames = [f.name for f in partial_schema(self.aggs, self.input_schema, self.name)]
        merged = partials
        if partials.num_rows:
            key_table = partials.select([PANE, *self.keys])
            old = self.panes.get_many(key_table)
            merged_cols = merge_partials(old, partials, self.aggs)
            merged = pa.Table.from_arrays(
                [*key_table.columns, *merged_cols], names=[PANE, *self.keys, *pnames]
            )
            self.panes.put_many(key_table, merged.select(pnames))
            self._note_panes(partials.column(PANE))
        if self.mode == "append":
            out = self._closing(late_us, evict_us)
        else:
            out = self._updated(merged, late_us, pnames)
        self._purge(evict_us)
        return out

    # -- the open panes (store meta) ---------------------------------------------------------
    def _open_panes(self) -> list[int] | None:
        """The starts of the panes holding live rows, ascending (None: not known)."""
        got = self.store.meta.get(OPEN_PANES_META)
        return list(got) if isinstance(got, list) else None

    def _note_panes(self, panes: pa.ChunkedArray) -> None:
        """Record the panes written this epoch among the open ones."""
        have = self._open_panes()
        if have is None and self.store.version is not None:
            return  # state written before the summary existed: stays unknown
        got = np.union1d(np.asarray(have or [], dtype=np.int64), pc.unique(panes).to_numpy())
        self.store.meta[OPEN_PANES_META] = (
            [int(p) for p in got] if len(got) <= OPEN_PANES_MAX else None
        )

    def _closing(self, late_us: int, evict_us: int) -> pa.Table:
        """Windows with ``late < end <= evict``: from the live panes below ``evict``."""
        open_panes = self._open_panes()
        if open_panes is not None:
            _, starts = self.window.windows_of(np.asarray(open_panes, dtype=np.int64))
            ends = starts + self.window.size_us
            if not ((ends > late_us) & (ends <= evict_us)).any():
                return self.output_schema(self.input_schema).empty_table()
        lo = purged_below(self.panes)
        lo_key = None if lo is None else (lo,)
        w = self.window
        if w.pane_us == w.size_us == w.slide_us:  # tumbling: a pane is a window, emit per piece
            outs = [
                self._emit(piece, late_us, evict_us)
                for piece in self.panes.scan_chunks(
                    lo_key, (evict_us,), chunk_bytes=EMIT_CHUNK_BYTES
                )
            ]
            if not outs:
                return self.output_schema(self.input_schema).empty_table()
            return pa.concat_tables(outs)
        got = self.panes.scan(lo_key, (evict_us,))
        return self._emit(got, late_us, evict_us)

    def _emit(self, panes: pa.Table, late_us: int, evict_us: int | None) -> pa.Table:
        """Output rows of the windows (ending in ``(late, evict]``) that the panes make up."""
        w = self.window
        if not panes.num_rows:
            return self.output_schema(self.input_schema).empty_table()
        p = panes.column(PANE).to_numpy()
        if w.pane_us == w.size_us == w.slide_us:  # tumbling: each pane is its window
            ends = p + w.size_us
            ok = ends > late_us
            if evict_us is not None:
                ok &= ends <= evict_us
            # the scan is in (pane, keys) order: the windows come out sorted, no copy to merge
            windows = panes if ok.all() else take_rows(panes, ok)
            return self._rows(windows.rename_columns([WSTART, *windows.column_names[1:]]))
        idx, starts = w.windows_of(p)
        ends = starts + w.size_us
        ok = ends > late_us
        if evict_us is not None:
            ok &= ends <= evict_us
        idx, starts = idx[ok], starts[ok]
        expanded = panes.take(pa.array(idx, pa.int64())).drop_columns([PANE])
        expanded = expanded.append_column(WSTART, pa.array(starts, pa.int64()))
        windows = combine_partials(expanded, [WSTART, *self.keys], self.aggs)
        order = pc.sort_indices(windows, sort_keys=[(WSTART, "ascending")])
        return self._rows(windows.take(order))

    def _updated(self, merged: pa.Table, late_us: int, pnames: list[str]) -> pa.Table:
        """Every non-late window of a pane written this epoch, with its whole aggregate."""
        w = self.window
        if w.pane_us == w.size_us == w.slide_us:  # tumbling: the pane is the window
            ends = merged.column(PANE).to_numpy() + w.size_us
            windows = take_rows(merged, ends > late_us).rename_columns(
                [WSTART, *self.keys, *pnames]
            )
            return self._rows(windows)
        if not merged.num_rows:
            return self.output_schema(self.input_schema).empty_table()
        idx, starts = w.windows_of(merged.column(PANE).to_numpy())
        ok = starts + w.size_us > late_us
        touched = merged.select(self.keys).take(pa.array(idx[ok], pa.int64()))
        touched = touched.append_column(WSTART, pa.array(starts[ok], pa.int64()))
        touched = touched.group_by([WSTART, *self.keys], use_threads=False).aggregate([])
        n_panes = w.size_us // w.pane_us
        s = touched.column(WSTART).to_numpy()
        keys = touched.select(self.keys)
        pane_keys = pa.concat_tables(
            [
                keys.append_column(PANE, pa.array(s + j * w.pane_us, pa.int64())).append_column(
                    WSTART, pa.array(s, pa.int64())
                )
                for j in range(n_panes)
            ]
        )
        got = self.panes.get_many(pane_keys.select([PANE, *self.keys]))
        found = np.asarray(got.column("_found").to_numpy(zero_copy_only=False), dtype=bool)
        parts = pane_keys.select([WSTART, *self.keys])
        for name in pnames:
            parts = parts.append_column(name, got.column(name))
        windows = combine_partials(take_rows(parts, found), [WSTART, *self.keys], self.aggs)
        return self._rows(windows)

    def _rows(self, windows: pa.Table) -> pa.Table:
        """Output rows from (window start, keys, partials)."""
        schema = self.output_schema(self.input_schema)
        ts = self._time_type(self.input_schema)
        starts = windows.column(WSTART).combine_chunks().cast(pa.int64())
        ends = pc.add(starts, self.window.size_us)
        window = pa.StructArray.from_arrays(
            [starts.cast(ts), ends.cast(ts)],
            names=["start", "end"],
        )
        cols = [window, *(windows.column(k).combine_chunks() for k in self.keys)]
        cols += finalize(windows, self.aggs, self.input_schema, self.name)
        return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(cols, schema)], schema=schema)

    def _purge(self, evict_us: int) -> None:
        """Remove the panes no open window needs (one range tombstone)."""
        cutoff = self.window.cutoff(evict_us)
        open_panes = self._open_panes()
        if open_panes is not None:
            if not open_panes or open_panes[0] >= cutoff:
                return  # no live pane below the cutoff: nothing to remove
            self.store.meta[OPEN_PANES_META] = [p for p in open_panes if p >= cutoff]
        lo = purged_below(self.panes)
        if lo is None or cutoff > lo:
            self.panes.delete_range(None, (cutoff,))
