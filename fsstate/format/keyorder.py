"""Key order: how grouping keys compare, in Python and over Arrow columns.

Keys are tuples compared field by field (Python's tuple order); a *bound* is a key or a prefix
of one (its first fields), so ``k < (t,)`` means "the first field of ``k`` is below ``t``".
Stored segments are sorted by Arrow's sort, each field ascending with NaN and then nulls last;
:func:`sort_key` is the same order in Python, for binary searches over sorted rows.

Invariants:

* :func:`range_mask` agrees with :func:`fsstate.format.tombstones.in_range` on every row:
  ``lo <= key < hi`` on tuples, a missing bound unbounded, and a key whose compared field is
  null or NaN (where Python's comparison raises or is false) never in the range.
* For rows sorted by Arrow's order, :func:`bisect_rows` returns the first row not below a
  bound in :func:`sort_key` order, so ``[bisect(lo), bisect(hi))`` holds every row in the
  range (callers filter the slice with :func:`range_mask` for the null/NaN rows it may also
  hold).
* Bounds hold no nulls (:func:`check_bound` rejects them), so a bound always compares.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Bound = tuple[Any, ...] | None


def check_bound(state: str, bound: tuple[Any, ...]) -> tuple[Any, ...]:
    """A bound's fields must compare: no nulls, no NaN.

    Raises:
        ValueError: a field is None or NaN (callers wrap it in their typed error).
    """
    for v in bound:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            raise ValueError(f"state {state!r}: a key bound holds {v!r}; bounds must compare")
    return bound


def _field_order(v: Any) -> tuple[int, Any]:
    if v is None:
        return (2, 0)
    if isinstance(v, float) and math.isnan(v):
        return (1, 0)
    return (0, v)


def sort_key(key: Sequence[Any]) -> tuple[tuple[int, Any], ...]:
    """The key's position in Arrow's sort order (per field: values, then NaN, then nulls)."""
    return tuple(_field_order(v) for v in key)


def bisect_rows(
    n: int, key_at: Callable[[int], tuple[Any, ...]], bound: Sequence[Any], right: bool = False
) -> int:
    """First row of ``n`` sorted rows whose key is not below ``bound`` (with ``right``: above
    it), in :func:`sort_key` order.

    Args:
        n: number of rows.
        key_at: the key of a row.
        bound: a key or a prefix of one (may hold nulls here: they sort last).
        right: skip the rows equal to the bound (a key with the bound as prefix is above it).
    """
    target = sort_key(bound)
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        here = sort_key(key_at(mid))
        if here < target or (right and here[: len(target)] == target):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _np(a: Any) -> np.ndarray[Any, Any]:
    return np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), dtype=bool)


def _compare(
    cols: Sequence[pa.Array], bound: tuple[Any, ...]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Per row: (key below bound, key not below bound, incomparable) as numpy bool arrays."""
    n = len(cols[0]) if cols else 0
    undecided = np.ones(n, dtype=bool)
    below = np.zeros(n, dtype=bool)
    above = np.zeros(n, dtype=bool)
    bad = np.zeros(n, dtype=bool)
    for col, b in zip(cols, bound):
        if not undecided.any():
            break
        scalar = pa.scalar(b, type=col.type)
        lt, gt, eq = (
            _np(pc.less(col, scalar)),
            _np(pc.greater(col, scalar)),
            _np(pc.equal(col, scalar)),
        )
        below |= undecided & lt
        above |= undecided & gt
        bad |= undecided & ~(lt | gt | eq)  # null or NaN: Python's comparison fails
        undecided &= eq
    # equal on every field of the bound: the key is the bound or extends it, so not below
    return below, above | undecided, bad


def range_mask(cols: Sequence[pa.Array], lo: Bound, hi: Bound) -> np.ndarray[Any, Any]:
    """numpy bool array: whether each row's key (flattened key columns) is in ``[lo, hi)``."""
    n = len(cols[0]) if cols else 0
    mask = np.ones(n, dtype=bool)
    if lo is not None:
        _below, not_below, bad = _compare(cols, lo)
        mask &= not_below & ~bad
    if hi is not None:
        below, _not_below, bad = _compare(cols, hi)
        mask &= below & ~bad
    return mask
