"""Timers of a StatefulProcessor kept in its partition's store (Spark's timer service, on the
engine).

Two tables of the partition's store hold them (names reserved: a user state variable cannot
start with ``_fsstate_``):

* ``_fsstate_timers``: map state, grouping key -> {expiry ms: ()}. The truth: what
  ``listTimers`` returns, what ``registerTimer`` / ``deleteTimer`` change at once. It lists
  in Spark's order: a prefix scan of the encoded expiry (:mod:`fsstate_spark.state.map_order`;
  with ``unsaferow`` a little-endian long, so not numeric order), measured against Spark's
  handles.
* ``_fsstate_timer_index``: value state keyed by ``(deadline ms, *grouping key, expiry ms)``,
  so the timers due at a time are one key range, read in (deadline, key) order, whatever the
  state size. Due entries are removed with one range tombstone; the deadline of an entry
  added below that purge point is raised to it (as
  :class:`fsstate.operators.expiry.DeadlineIndex` does), the key keeps the real expiry.

Invariants:

* Firing costs what is due, not the number of timers: :meth:`Timers.due` reads the index
  range up to the threshold and purges it (one range tombstone) before any callback runs.
* An index entry whose timer was deleted (or fired) since is skipped; a timer registered
  twice is one timer (map key) with at most one live index entry (same index key).
* Registrations are added to the index in batches (:meth:`Timers.flush`, before timers are
  fired and before the epoch commits), not one Arrow call per registration.
* A timer registered while timers fire, at or before the threshold, is due at the next call
  of :meth:`due` (the index keeps it at its purge point, its value the real expiry), never
  lost; :meth:`due` returns timers in expiry order (keys of one expiry in index order).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from fsstate.errors import ConfigError
from fsstate.interfaces import Key
from fsstate.operators.expiry import purged_below
from fsstate.store.partition import PartitionStore
from fsstate_spark.state.map_order import UNSAFEROW, user_key_order

TIMERS = "_fsstate_timers"
TIMER_INDEX = "_fsstate_timer_index"
RESERVED_PREFIX = "_fsstate_"
_EXPIRY = pa.schema([pa.field("expiry_ms", pa.int64(), nullable=False)])
_UNIT = pa.schema([pa.field("_", pa.int8())])
_DEADLINE = "_deadline_ms"
_NONE: tuple[None] = (None,)


def check_state_name(name: str) -> None:
    """Refuse a user state variable name reserved for fsstate's own tables.

    Raises:
        ConfigError: the name starts with ``_fsstate_``.
    """
    if name.startswith(RESERVED_PREFIX):
        raise ConfigError(
            f"state variable {name!r}: names starting with {RESERVED_PREFIX!r} are fsstate's "
            "own (timers); rename the state variable"
        )


class Timers:
    """The timers of one partition store (see the module docstring).

    Args:
        store: the partition's store (at the epoch's parent version).
        key_schema: Arrow schema of the grouping key.
        encoding: Spark's state encoding (the order ``listTimers`` gives).
    """

    def __init__(
        self, store: PartitionStore, key_schema: pa.Schema, encoding: str = UNSAFEROW
    ) -> None:
        self.key_schema = key_schema
        order = user_key_order(_EXPIRY, encoding)
        self.table = store.map_table(
            TIMERS, _EXPIRY, _UNIT, key_schema=key_schema, user_key_order=order
        )
        index_key = pa.schema(
            [pa.field(_DEADLINE, pa.int64(), nullable=False), *key_schema, *_EXPIRY]
        )
        self.index = store.value_table(TIMER_INDEX, _UNIT, key_schema=index_key)
        self._pending: list[tuple[int, Key]] = []

    def register(self, key: Key, expiry_ms: int) -> None:
        """Register a timer of ``key`` at ``expiry_ms`` (again: no change)."""
        ts = (int(expiry_ms),)
        if not self.table.contains(key, ts):
            self.table.update(key, ts, _NONE)
            self._pending.append((ts[0], key))

    def delete(self, key: Key, expiry_ms: int) -> None:
        """Delete a timer of ``key`` (absent: no change)."""
        self.table.remove(key, (int(expiry_ms),))

    def listed(self, key: Key) -> Iterator[int]:
        """The timers of ``key``, in Spark's ``listTimers`` order."""
        return iter([u[0] for u in self.table.user_keys(key)])

    def flush(self) -> None:
        """Add the registrations since the last flush to the index (one batched call)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        floor = purged_below(self.index)
        expiry = [ts for ts, _ in pending]
        deadline = expiry if floor is None else [max(ts, floor) for ts in expiry]
        cols = [pa.array(deadline, pa.int64())]
        for i, f in enumerate(self.key_schema):
            cols.append(pa.array([k[i] for _, k in pending], f.type))
        cols.append(pa.array(expiry, pa.int64()))
        keys = pa.Table.from_arrays(cols, schema=self.index.spec.key_schema)
        self.index.put_many(keys, pa.table({"_": pa.nulls(len(expiry), pa.int8())}))

    def due(self, through_ms: int) -> list[tuple[Key, int]]:
        """The live timers with expiry at or before ``through_ms``, in (expiry, key) order,
        taken out of the index (each key's timer stays registered until :meth:`delete`)."""
        self.flush()
        lo = purged_below(self.index)
        # entries raised to the purge point ``lo`` may be due although ``lo > through_ms``
        hi = through_ms + 1 if lo is None else max(through_ms + 1, lo + 1)
        got = self.index.scan(None if lo is None else (lo,), (hi,))
        if lo is None or lo <= through_ms:
            self.index.delete_range(None, (through_ms + 1,))
        if not got.num_rows:
            return []
        nk = len(self.key_schema)  # columns: deadline, the grouping key's, the expiry
        expiry = got.column(1 + nk).to_pylist()
        cols = [got.column(1 + i).to_pylist() for i in range(nk)]
        out: list[tuple[Key, int]] = []
        for ts, key in zip(expiry, zip(*cols, strict=True), strict=True):
            if ts <= through_ms and self.table.contains(key, (ts,)):
                out.append((key, ts))
        out.sort(key=lambda e: e[1])  # raised entries sit at the purge point: real order
        return out
