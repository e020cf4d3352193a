"""Event-time expiry: rows carry a deadline and leave when the watermark passes it.

A :class:`DeadlineIndex` is a value table keyed by ``(deadline_us, *key)``: its runs are sorted
by deadline, so the entries due at a watermark are a key range. :meth:`DeadlineIndex.due`
reads that range and :meth:`DeadlineIndex.purge` removes it with one range tombstone; both
start at the previous purge point (the range tombstone's upper bound), so rows already purged
but not yet compacted away are never read again. The cost of a cleanup is proportional to what
expired, not to the state (Spark's aggregation, dedup and older join state formats scan the
whole store for it).

Invariants:

* ``due(t)`` returns every live entry with ``deadline_us <= t`` added since the last
  ``purge``, in deadline order, each once per add.
* An entry added with a deadline at or below the purge point would never be read (the scan
  starts there): it is stored at the purge point instead, so it is due at the next call.
* :func:`purged_below` reads the purge point of any table whose keys start with a time (the
  open-below range tombstone with a one-field bound); operators use it for their own
  time-keyed tables (window panes).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from fsstate.store.partition import PartitionStore
from fsstate.tables.value import ValueTable

DEADLINE = "_deadline_us"
_VALUE = pa.schema([pa.field("_", pa.int8())])


def purged_below(table: ValueTable) -> int | None:
    """The time below which every row written before the purge is gone (None: no purge)."""
    best: int | None = None
    for lo, hi, _seq in table.ranges.items:
        if lo is None and hi is not None and len(hi) == 1 and isinstance(hi[0], int):
            best = hi[0] if best is None else max(best, hi[0])
    return best


class DeadlineIndex:
    """The deadlines of a table's keys (see the module docstring).

    Args:
        store: the store holding the index table.
        name: the index table's name.
        key_schema: the schema of the keys it indexes.
    """

    def __init__(self, store: PartitionStore, name: str, key_schema: pa.Schema) -> None:
        fields = [pa.field(DEADLINE, pa.int64(), nullable=False), *key_schema]
        self.key_schema = key_schema
        self.table = store.value_table(name, _VALUE, key_schema=pa.schema(fields))

    def add(self, deadlines_us: pa.Array, keys: pa.Table) -> None:
        """Index ``keys`` (a table of the key columns) with their deadlines (int64 µs)."""
        if not len(deadlines_us):
            return
        floor = purged_below(self.table)
        if floor is not None:
            deadlines_us = pc.max_element_wise(deadlines_us, pa.scalar(floor, pa.int64()))
        cols = [deadlines_us.cast(pa.int64()), *keys.columns]
        table = pa.Table.from_arrays(cols, schema=self.table.spec.key_schema)
        self.table.put_many(table, pa.table({"_": pa.nulls(len(table), pa.int8())}))

    def due(self, through_us: int) -> pa.Table:
        """Entries with ``deadline_us <= through_us`` not purged yet: ``_deadline_us`` then the
        key columns, in deadline order."""
        lo = purged_below(self.table)
        got = self.table.scan(None if lo is None else (lo,), (through_us + 1,))
        return got.select([DEADLINE, *self.key_schema.names])

    def purge(self, through_us: int) -> None:
        """Remove every entry with ``deadline_us <= through_us`` (one range tombstone)."""
        lo = purged_below(self.table)
        if lo is not None and lo > through_us:
            return
        self.table.delete_range(None, (through_us + 1,))
