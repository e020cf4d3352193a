"""Session windows over event time, as Spark's ``session_window(t, gap)`` (append output).

Each row opens the session ``[t, t + gap)``; sessions of one key that overlap or touch
(``next.start <= current.end``) merge, their end the largest. A session is emitted once, when
the watermark reaches its end.

Tables: ``sessions``, a value table keyed by ``(*keys, _start_us)`` holding ``_end_us`` and the
aggregate partials, and ``due``, a :class:`fsstate.operators.expiry.DeadlineIndex` of the
sessions' ends (an entry whose session has since grown or merged is stale: eviction checks the
session's current end).

Per epoch (Spark's ``SessionWindowStateStoreRestoreExec`` / ``MergingSessionsIterator``):
rows with ``t + gap <= late`` are dropped, row by row before merging; the stored sessions of the
epoch's keys (one prefix lookup; with ``keys=[]``, one global group, all of them) and the
rows' sessions are merged per key, vectorized (a running maximum of ends within each key); the
merged sessions replace the stored ones of those keys; then every stored session with
``end <= evict`` is emitted and removed.

Invariants: outputs equal Spark's session-window aggregation in append mode on the same
micro-batches (Spark supports no update mode for session windows, nor does this operator);
an epoch reads the sessions of its keys and the sessions that close, not the whole state.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from fsstate.operators.expiry import DEADLINE, DeadlineIndex
from fsstate.store.partition import PartitionStore
from fsstate.tables.resolve import first_of_group

START, END, SID = "_start_us", "_end_us", "_sid"


def session_ids(
    group: np.ndarray[Any, Any], start: np.ndarray[Any, Any], end: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Session number of each interval, the rows sorted by (group, start): a row starts a new
    session when its group changes or its start is after every end before it in the group."""
    n = len(start)
    if not n:
        return np.zeros(0, dtype=np.int64)
    lo = int(start.min())
    span = int(end.max()) - lo + 1
    groups = int(group.max()) + 1
    if groups * span < 2**62:  # shift groups apart: a global running max resets per group
        shifted = group * span + (end - lo)
        running = np.maximum.accumulate(shifted)
        prev = np.concatenate([[-1], running[:-1]])
        new = (np.r_[True, group[1:] != group[:-1]]) | (group * span + (start - lo) > prev)
    else:  # pragma: no cover - astronomically wide spans: per-group loop
        new = np.zeros(n, dtype=bool)
        best = None
        for i in range(n):
            if i == 0 or group[i] != group[i - 1] or start[i] > best:
                new[i] = True
                best = end[i]
            else:
                best = max(best, end[i])
    return np.cumsum(new) - 1


class SessionAggregate(Operator):
    """Aggregates per (session, grouping key) (see the module docstring).

    Args:
        name: the operator's state name.
        keys: grouping columns.
        time: event-time column.
        gap_ms: the session gap.
        aggs: the aggregates.
    """

    def __init__(
        self, name: str, *, keys: Sequence[str], time: str, gap_ms: int, aggs: Sequence[Agg]
    ) -> None:
        super().__init__(name)
        if not isinstance(gap_ms, int) or gap_ms <= 0:
            raise ConfigError(f"operator {name!r}: gap_ms must be a positive int")
        if not aggs:
            raise ConfigError(f"operator {name!r}: give at least one aggregate")
        self.keys, self.time, self.gap_us, self.aggs = list(keys), time, gap_ms * 1000, list(aggs)

    def _ts(self, schema: pa.Schema) -> pa.DataType:
        t = schema.field(self.time).type
        return t if pa.types.is_timestamp(t) else pa.timestamp("us", tz="UTC")

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        require_columns(self.name, input_schema, [*self.keys, self.time])
        require_time(self.name, input_schema, self.time)
        ts = self._ts(input_schema)
        fields = [pa.field("session_window", pa.struct([("start", ts), ("end", ts)]))]
        fields += [input_schema.field(k).with_nullable(True) for k in self.keys]
        fields += [pa.field(a.name, a.result_type(input_schema, self.name)) for a in self.aggs]
        return pa.schema(fields)

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        self.output_schema(input_schema)
        self.input_schema = input_schema
        kf = [input_schema.field(k).with_nullable(True) for k in self.keys]
        key = pa.schema([*kf, pa.field(START, pa.int64(), nullable=False)])
        self.pnames = [f.name for f in partial_schema(self.aggs, input_schema, self.name)]
        value = pa.schema(
            [pa.field(END, pa.int64()), *partial_schema(self.aggs, input_schema, self.name)]
        )
        self.sessions = store.value_table("sessions", value, key_schema=key)
        self.due = DeadlineIndex(store, "due", key)

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        return {"input": time_us(batch.column(self.time), self.name, self.time)}

    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        late_us, evict_us = epoch.late_ms * 1000, epoch.evict_ms * 1000
        t = time_us(batch.column(self.time), self.name, self.time)
        t_np = np.asarray(pc.fill_null(t, late_us - self.gap_us).to_numpy(zero_copy_only=False))
        keep = t_np + self.gap_us > late_us
        rows = take_rows(batch, keep)
        if rows.num_rows:
            self._merge(rows, t_np[keep])
        return self._close(evict_us)

    def _merge(self, rows: pa.Table, t: np.ndarray[Any, Any]) -> None:
        """Merge the rows' sessions with the stored sessions of their keys; write the result."""
        table = rows.select([*self.keys, *{a.column for a in self.aggs if a.column}])
        table = table.append_column(START, pa.array(t, pa.int64()))
        new = batch_partials(table, [*self.keys, START], self.aggs, self.name)
        new = new.append_column(END, pc.add(new.column(START), self.gap_us))
        # without keys every stored session is the one group's (a prefix needs a column)
        old = (
            self.sessions.scan_prefixes(new.select(self.keys))
            if self.keys
            else self.sessions.scan()
        )
        cols = [*self.keys, START, END, *self.pnames]
        both = pa.concat_tables([old.select(cols), new.select(cols).cast(old.select(cols).schema)])
        order = pc.sort_indices(
            both, sort_keys=[*((k, "ascending") for k in self.keys), (START, "ascending")]
        )
        both = both.take(order)
        key_cols = [both.column(k).combine_chunks() for k in self.keys]
        group = (
            np.cumsum(first_of_group(key_cols)) - 1
            if key_cols
            else np.zeros(both.num_rows, np.int64)
        )
        sid = session_ids(group, both.column(START).to_numpy(), both.column(END).to_numpy())
        both = both.append_column(SID, pa.array(sid, pa.int64()))
        bounds = both.group_by([SID], use_threads=False).aggregate([(START, "min"), (END, "max")])
        merged = combine_partials(
            both.select([SID, *self.keys, *self.pnames]), [SID, *self.keys], self.aggs
        )
        merged = merged.join(bounds.select([SID, f"{START}_min", f"{END}_max"]), keys=SID)
        merged = merged.sort_by(SID)
        if old.num_rows:
            self.sessions.delete_many(old.select([*self.keys, START]))
        keys = pa.Table.from_arrays(
            [*(merged.column(k) for k in self.keys), merged.column(f"{START}_min")],
            schema=self.sessions.spec.key_schema,
        )
        values = pa.Table.from_arrays(
            [merged.column(f"{END}_max"), *(merged.column(p) for p in self.pnames)],
            names=[END, *self.pnames],
        )
        self.sessions.put_many(keys, values)
        self.due.add(merged.column(f"{END}_max").combine_chunks(), keys)

    def _close(self, evict_us: int) -> pa.Table:
        """Emit and remove the stored sessions ending at or below ``evict``."""
        schema = self.output_schema(self.input_schema)
        due = self.due.due(evict_us)
        out = schema.empty_table()
        if due.num_rows:
            keys = due.drop_columns([DEADLINE])
            got = self.sessions.get_many(keys)
            end = got.column(END)
            live = pc.and_(
                pc.fill_null(pc.equal(end, due.column(DEADLINE)), False), pc.is_valid(end)
            )
            mask = np.asarray(live.to_numpy(zero_copy_only=False), dtype=bool)
            closing_keys = take_rows(keys, mask)
            if closing_keys.num_rows:
                vals = take_rows(got, mask)
                ts = self._ts(self.input_schema)
                starts = closing_keys.column(START).combine_chunks()
                window = pa.StructArray.from_arrays(
                    [starts.cast(ts), vals.column(END).combine_chunks().cast(ts)],
                    names=["start", "end"],
                )
                cols = [window, *(closing_keys.column(k).combine_chunks() for k in self.keys)]
                cols += finalize(vals, self.aggs, self.input_schema, self.name)
                out = pa.Table.from_arrays(
                    [c.cast(f.type) for c, f in zip(cols, schema)], schema=schema
                )
                self.sessions.delete_many(closing_keys)
        self.due.purge(evict_us)
        return out
