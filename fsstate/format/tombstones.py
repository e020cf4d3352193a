"""Tombstones and replay: how op rows of one grouping key resolve into its current state.

Three tombstone forms exist:

* point delete (``_op`` 1): removes one user key of a map, or one element of a list;
* clear (``_op`` 2): removes everything of the grouping key written before it (value, list or
  map);
* range (:class:`RangeTombstones`): removes every grouping key ``k`` with ``lo <= k < hi``
  written before it; kept per table in the manifest, meant for closed time windows and
  event-time deadlines. A bound may be a *prefix* of the key (fewer fields: tuples compare
  field by field, so ``k < (t,)`` is "the first field is below ``t``") or absent (unbounded).
  A new range that covers an older one replaces it (everything the older one deleted is older
  than the new one too), so a table closing windows one after the other keeps one range.

Invariants:

* Order is by sequence number only, never by epoch or tier: a row survives iff no tombstone
  with a larger sequence number covers it and no newer put of the same (key, ukey) exists.
* Replay returns the same view whatever the split of rows into runs, so sealing, spilling and
  compaction never change what a read returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from fsstate.format.keyorder import Bound, range_mask
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


def in_range(key: Key, lo: Key | None, hi: Key | None) -> bool:
    """``lo <= key < hi`` on tuples (a missing bound is unbounded; a bound may be a prefix);
    keys that cannot be compared (nulls) are never in range."""
    try:
        return (lo is None or lo <= key) and (hi is None or key < hi)
    except TypeError:
        return False


def covers(outer: tuple[Key | None, Key | None], inner: tuple[Key | None, Key | None]) -> bool:
    """Whether the range ``outer`` contains every key of ``inner`` (bounds as in_range)."""
    (olo, ohi), (ilo, ihi) = outer, inner
    try:
        lo_ok = olo is None or (ilo is not None and olo <= ilo)
        hi_ok = ohi is None or (ihi is not None and ihi <= ohi)
    except TypeError:
        return False
    return lo_ok and hi_ok


class RangeTombstones:
    """The range tombstones of one table: ``(lo, hi, seq)`` triples."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[tuple[Bound, Bound, int]] = ()) -> None:
        self.items: list[tuple[Bound, Bound, int]] = list(items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, lo: Bound, hi: Bound, seq: int) -> None:
        """Record a range tombstone; older ones it covers are dropped (``seq`` is the newest)."""
        self.items = [t for t in self.items if not covers((lo, hi), (t[0], t[1]))]
        self.items.append((lo, hi, seq))

    def floor(self, key: Key) -> int:
        """Largest sequence number of a range tombstone covering ``key`` (-1 if none)."""
        best = -1
        for lo, hi, seq in self.items:
            if seq > best and in_range(key, lo, hi):
                best = seq
        return best

    def hides_span(self, lead_lo: Any, lead_hi: Any, max_seq: int) -> bool:
        """Whether one range tombstone newer than ``max_seq`` covers every key whose first
        field lies in ``[lead_lo, lead_hi]`` (both values: no null, no NaN).

        Only tombstones whose bounds are single fields (or unbounded) are considered: for
        them :func:`in_range` decides on the first field alone, so the keys between two keys
        in range are in range too, whatever their later fields hold (a longer bound compared
        with a null or NaN field is not, see :func:`in_range`). A run whose rows all fall in
        such a span, all older than the tombstone, answers no read: every row of it, and
        every older row of its keys, is under the tombstone.
        """
        first, last = (lead_lo,), (lead_hi,)
        return any(
            seq > max_seq
            and (lo is None or len(lo) == 1)
            and (hi is None or len(hi) == 1)
            and in_range(first, lo, hi)
            and in_range(last, lo, hi)
            for lo, hi, seq in self.items
        )

    def floor_array(self, key_cols: Sequence[pa.Array]) -> np.ndarray[Any, Any]:
        """:meth:`floor` of every row of flattened key columns, vectorized (int64, -1: none)."""
        n = len(key_cols[0]) if key_cols else 0
        out = np.full(n, -1, dtype=np.int64)
        for lo, hi, seq in self.items:
            mask = range_mask(key_cols, lo, hi)
            np.maximum(out, np.where(mask, seq, -1), out=out)
        return out

    def to_batch(self, key_schema: pa.Schema) -> pa.RecordBatch | None:
        """Encode for the manifest: ``lo`` and ``hi`` as typed key structs (fields beyond a
        prefix null), ``lo_len`` / ``hi_len`` their lengths (-1: unbounded), ``seq``."""
        if not self.items:
            return None
        key_type = pa.struct([f.with_nullable(True) for f in key_schema])
        names = key_schema.names

        def col(i: int) -> pa.Array:
            bounds: list[Bound] = [t[i] for t in self.items]  # type: ignore[misc]
            return pa.array(
                [None if b is None else dict(zip(names, b)) for b in bounds], type=key_type
            )

        def lengths(i: int) -> pa.Array:
            bounds: list[Bound] = [t[i] for t in self.items]  # type: ignore[misc]
            return pa.array([-1 if b is None else len(b) for b in bounds], type=pa.int8())

        return pa.RecordBatch.from_arrays(
            [
                col(0),
                col(1),
                pa.array([t[2] for t in self.items], type=pa.int64()),
                lengths(0),
                lengths(1),
            ],
            names=["lo", "hi", "seq", "lo_len", "hi_len"],
        )

    @staticmethod
    def from_batch(batch: pa.RecordBatch | None) -> RangeTombstones:
        """Inverse of :meth:`to_batch` (batches without lengths hold whole keys)."""
        if batch is None:
            return RangeTombstones()
        n = batch.num_rows
        names = batch.schema.names

        def bounds(col: str, len_col: str) -> list[Bound]:
            values = batch.column(col).to_pylist()
            lens = batch.column(len_col).to_pylist() if len_col in names else [None] * n
            out: list[Bound] = []
            for d, length in zip(values, lens):
                if length == -1 or d is None:
                    out.append(None)
                else:
                    key = tuple(d.values())
                    out.append(key if length is None else key[:length])
            return out

        los, his = bounds("lo", "lo_len"), bounds("hi", "hi_len")
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
