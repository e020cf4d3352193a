"""Tombstones and replay: how op rows of one grouping key resolve into its current state.

Three tombstone forms exist:

* point delete (``_op`` 1): removes one user key of a map, or one element of a list;
* clear (``_op`` 2): removes everything of the grouping key written before it (value, list or
  map);
* range (:class:`RangeTombstones`): removes every grouping key ``k`` with ``lo <= k < hi``
  written before it; kept per table in the manifest, meant for closed time windows.

Invariants:

* Order is by sequence number only, never by epoch or tier: a row survives iff no tombstone
  with a larger sequence number covers it and no newer put of the same (key, ukey) exists.
* Replay returns the same view whatever the split of rows into runs, so sealing, spilling and
  compaction never change what a read returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from fsstate.format.schema import OP_CLEAR, OP_DELETE, OP_PUT
from fsstate.format.segment import OpRow
from fsstate.interfaces import Key

# list view element: (value, expires_at_ms | None, elem_seq); the seq is the element's identity
Entry = tuple[Any, Any, int]


class _Absent:
    """Marker of a value-state key known to hold nothing (a cached negative lookup)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class Timed(tuple):  # type: ignore[type-arg]
    """A cell whose value expires: ``(value, expires_at_ms)``.

    A *cell* is how the memtable holds one live value (a value-state view, or the entry of a
    map view under a user key): the value tuple itself when it never expires (the common
    case, so a hit is one dict lookup and one exact-type test), else a ``Timed`` pair. The
    pair is a tuple subclass, so ``type(c) is tuple`` tells a plain value from it. Cells hold
    no sequence number: the dirty set has the one of the last op until the seal writes it.
    """

    __slots__ = ()


def cell(value: Any, expires: int | None) -> Any:
    """The cell of a live value: the value itself, or a :class:`Timed` pair."""
    return value if expires is None else Timed((value, expires))


def cell_value(c: Any) -> Any:
    """The value of a cell."""
    return c[0] if type(c) is Timed else c


def cell_expiry(c: Any) -> int | None:
    """The expiry of a cell (None: never expires)."""
    return c[1] if type(c) is Timed else None


def in_range(key: Key, lo: Key, hi: Key) -> bool:
    """``lo <= key < hi`` on tuples; keys that cannot be compared (nulls) are never in range."""
    try:
        return bool(lo <= key < hi)
    except TypeError:
        return False


class RangeTombstones:
    """The range tombstones of one table: ``(lo, hi, seq)`` triples."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[tuple[Key, Key, int]] = ()) -> None:
        self.items: list[tuple[Key, Key, int]] = list(items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, lo: Key, hi: Key, seq: int) -> None:
        """Record a range tombstone."""
        self.items.append((lo, hi, seq))

    def floor(self, key: Key) -> int:
        """Largest sequence number of a range tombstone covering ``key`` (-1 if none)."""
        best = -1
        for lo, hi, seq in self.items:
            if seq > best and in_range(key, lo, hi):
                best = seq
        return best

    def to_batch(self, key_schema: pa.Schema) -> pa.RecordBatch | None:
        """Encode for the manifest (lo and hi as typed key structs)."""
        if not self.items:
            return None
        key_type = pa.struct(list(key_schema))

        def col(i: int) -> pa.Array:
            keys: list[Key] = [t[i] for t in self.items]  # type: ignore[misc]
            return pa.array([dict(zip(key_schema.names, k)) for k in keys], type=key_type)

        return pa.RecordBatch.from_arrays(
            [col(0), col(1), pa.array([t[2] for t in self.items], type=pa.int64())],
            names=["lo", "hi", "seq"],
        )

    @staticmethod
    def from_batch(batch: pa.RecordBatch | None) -> RangeTombstones:
        """Inverse of :meth:`to_batch`."""
        if batch is None:
            return RangeTombstones()
        los = [tuple(d.values()) for d in batch.column("lo").to_pylist()]
        his = [tuple(d.values()) for d in batch.column("hi").to_pylist()]
        return RangeTombstones(zip(los, his, batch.column("seq").to_pylist()))


def _clear_floor(rows: list[OpRow], range_floor: int) -> int:
    floor = range_floor
    for r in rows:
        if r[1] == OP_CLEAR and r[0] > floor:
            floor = r[0]
    return floor


def replay_value(rows: list[OpRow], range_floor: int) -> Any:
    """Current value view (see :class:`Timed`) or ABSENT from the key's op rows."""
    best: OpRow | None = None
    for r in rows:
        if best is None or r[0] > best[0]:
            best = r
    if best is None or best[0] < range_floor or best[1] != OP_PUT:
        return ABSENT
    return cell(best[3], best[4])


def replay_map(rows: list[OpRow], range_floor: int) -> dict[Key, Any]:
    """Current map view ``{user key: cell}`` (see :class:`Timed`) in last-write order; rows of
    equal sequence numbers keep their order (a caught-up view's rows, see ``catchup``)."""
    floor = _clear_floor(rows, range_floor)
    latest: dict[Key, OpRow] = {}
    for r in rows:
        if r[0] <= floor or r[1] == OP_CLEAR:
            continue
        cur = latest.get(r[2])
        if cur is None or r[0] > cur[0]:
            latest[r[2]] = r
    live = sorted((r for r in latest.values() if r[1] == OP_PUT), key=lambda r: r[0])
    return {r[2]: cell(r[3], r[4]) for r in live}


def replay_list(rows: list[OpRow], range_floor: int) -> list[Entry]:
    """Current list view ``[(value, expiry, elem_seq)]`` in append order."""
    floor = _clear_floor(rows, range_floor)
    elems: dict[int, OpRow] = {}
    deleted: set[int] = set()
    for r in rows:
        if r[0] <= floor:
            continue
        if r[1] == OP_PUT:
            elems[r[2][0]] = r
        elif r[1] == OP_DELETE:
            deleted.add(r[2][0])
    live = sorted((r for e, r in elems.items() if e not in deleted), key=lambda r: r[0])
    return [(r[3], r[4], r[0]) for r in live]
