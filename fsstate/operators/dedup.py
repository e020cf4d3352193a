"""Deduplication within the watermark, as Spark's ``dropDuplicatesWithinWatermark``.

A row passes if no row with the same values in the key columns passed within the delay: the
first one is emitted and remembered until ``event time + delay``; later ones are dropped until
the watermark passes that expiry.

Tables: ``seen``, a value table keyed by the key columns holding the expiry (µs), and ``due``,
its :class:`fsstate.operators.expiry.DeadlineIndex`.

Per epoch (Spark's ``StreamingDeduplicateWithinWatermarkExec``): rows at or below the late
watermark are dropped; of the rest, the first row of each key in the epoch (canonical input
order) passes if the key is not in state, and is stored with ``expires = t + delay``; then
every entry with ``expires <= evict`` leaves (an entry expiring in this epoch still drops the
epoch's duplicates).

Invariants: outputs equal Spark's on the same micro-batches where Spark's choice among
duplicates of one epoch is determined (it keeps the first in its partition order; here the
first in canonical order); cleanup reads only what expires.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError
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

EXPIRES = "_expires_us"
_POS = "_pos"


class Deduplicate(Operator):
    """Drops rows whose key was seen within ``delay_ms`` (see the module docstring).

    Args:
        name: the operator's state name.
        keys: the columns that make two rows duplicates.
        time: the event-time column.
        delay_ms: the watermark delay of the input (how long a key is remembered).
    """

    def __init__(self, name: str, *, keys: Sequence[str], time: str, delay_ms: int) -> None:
        super().__init__(name)
        if not keys:
            raise ConfigError(
                f"operator {name!r}: give the key columns (Spark's dropDuplicatesWithinWatermark() "
                "without columns compares whole rows: list every column to get that)"
            )
        if not isinstance(delay_ms, int) or delay_ms < 0:
            raise ConfigError(f"operator {name!r}: delay_ms must be an int >= 0")
        self.keys, self.time, self.delay_ms = list(keys), time, delay_ms

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        require_columns(self.name, input_schema, [*self.keys, self.time])
        require_time(self.name, input_schema, self.time)
        return input_schema

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        self.output_schema(input_schema)
        key = pa.schema([input_schema.field(k).with_nullable(True) for k in self.keys])
        value = pa.schema([pa.field(EXPIRES, pa.int64())])
        self.seen = store.value_table("seen", value, key_schema=key)
        self.due = DeadlineIndex(store, "due", key)

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        return {"input": time_us(batch.column(self.time), self.name, self.time)}

    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        late_us = epoch.late_ms * 1000
        t = time_us(batch.column(self.time), self.name, self.time)
        t_np = np.asarray(pc.fill_null(t, late_us).to_numpy(zero_copy_only=False))
        rows = take_rows(batch, t_np > late_us)
        t_np = t_np[t_np > late_us]
        out = rows.slice(0, 0)
        if rows.num_rows:
            # the first row of each key in the epoch
            keyed = rows.select(self.keys).append_column(_POS, pa.array(np.arange(rows.num_rows)))
            firsts = keyed.group_by(self.keys, use_threads=False).aggregate([(_POS, "min")])
            pos = np.sort(firsts.column(f"{_POS}_min").to_numpy())
            cand = rows.take(pa.array(pos, pa.int64()))
            keys = cand.select(self.keys)
            known = self.seen.get_many(keys)
            new = ~np.asarray(known.column("_found").to_numpy(zero_copy_only=False), dtype=bool)
            out = take_rows(cand, new)
            if out.num_rows:
                expires = pa.array(t_np[pos][new] + self.delay_ms * 1000, pa.int64())
                new_keys = take_rows(keys, new)
                self.seen.put_many(new_keys, pa.table({EXPIRES: expires}))
                self.due.add(expires, new_keys)
        self._evict(epoch.evict_ms * 1000)
        return out

    def _evict(self, through_us: int) -> None:
        # Every due index row is its key's only one and matches the key's expiry: a key is
        # stored only when absent from ``seen`` and leaves it only here, with its index row,
        # so the keys can be deleted without reading ``seen`` back (an index deadline raised
        # to the purge point belongs to an expiry below it, which is due as well).
        due = self.due.due(through_us)
        if due.num_rows:
            self.seen.delete_many(due.drop_columns([DEADLINE]))
        self.due.purge(through_us)
