"""The newest row of each key of value-table segments, vectorized, and its install as views.

Shared by the two bulk view builders of value tables: warm-up (:mod:`fsstate.tables.warmup`,
a small table loaded whole on its first cold miss) and catch-up (:mod:`fsstate.store.catchup`,
a cached store advanced over the versions another process committed, where the delta is often
a whole batch of the partition's keys). Per segment (rows sorted by key, then seq), numpy
marks each key's last row and Arrow takes those; keys and values become Python objects by
C-level ``zip`` over ``to_pylist`` columns, about 0.3 µs per row where op rows replayed one
key at a time cost several; only tombstone rows (few) are visited one by one.

Invariants:

* Segments come oldest first; a key's view is its newest row's: a later segment's row
  overwrites an earlier one's, and within a segment the key's last row (the highest seq) wins.
* A view equals what :func:`fsstate.format.tombstones.replay_value` gives for the key's rows
  when no range tombstone lies above them: the value tuple, a
  :class:`~fsstate.format.tombstones.Timed` pair when the row expires,
  :data:`~fsstate.format.tombstones.ABSENT` for a tombstone. Tables with range tombstones
  take the op-row paths instead.
* With ``only``, keys outside it never get their values converted (a delta the size of a
  batch of another worker's state does not pass through memory as Python objects).
* :func:`install` keeps the table's accounting: the controller's growth counter drops by one
  per view added, and a table that counts rows gets the sealed count of every view installed.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import numpy as np
import pyarrow as pa

from fsstate.format.schema import EXPIRES, OP
from fsstate.format.segment import Segment, key_tuples, same_as_next
from fsstate.format.tombstones import ABSENT, cell
from fsstate.interfaces import Key
from fsstate.tables.core import TableCore


@dataclass
class NewestValues:
    """Each key's newest view (``views``) and the keys whose newest row was a tombstone when
    read (``absent``, few; a later segment may have put a value again)."""

    views: dict[Key, Any] = field(default_factory=dict)
    absent: list[Key] = field(default_factory=list)


def newest_values(segments: Iterable[Segment], only: Container[Key] | None = None) -> NewestValues:
    """The newest view of each key of value-table ``segments`` (oldest first).

    Args:
        segments: value-table segments, oldest first, each sorted by key then seq.
        only: if given, just the keys in it (the others' values are never converted).

    Returns:
        The views by key, and the keys read as tombstones.
    """
    out = NewestValues()
    latest, absent = out.views, out.absent
    for seg in segments:
        batch = seg.batch
        if not batch.num_rows:
            continue
        last = batch.filter(pa.array(~same_as_next(batch.column("key").flatten())))
        keys = key_tuples(last.column("key").flatten())
        if only is not None:
            mask = [k in only for k in keys]
            if not any(mask):
                continue
            if not all(mask):
                last = last.filter(pa.array(mask))
                keys = list(compress(keys, mask))
        views = _views_of(last)
        ops = last.column(OP).to_numpy(zero_copy_only=False)
        for j in np.flatnonzero(ops != 0).tolist():
            views[j] = ABSENT
            absent.append(keys[j])
        latest.update(zip(keys, views))
    return out


def _views_of(rows: pa.RecordBatch | pa.Table) -> list[Any]:
    """The views of value rows (a tombstone's too; the caller marks those ABSENT)."""
    views: list[Any] = list(zip(*[c.to_pylist() for c in rows.column("value").flatten()]))
    expires = rows.column(EXPIRES)
    if expires.null_count < len(expires):  # some values expire: Timed views for those
        views = [cell(v, e) for v, e in zip(views, expires.to_pylist())]
    return views


def install(table: TableCore, newest: NewestValues, *, overwrite: bool) -> int:
    """Make ``newest``'s views the table's.

    Args:
        table: a value table.
        newest: the views to install (its dict may be consumed).
        overwrite: True for rows newer than the table's views (catch-up: they replace the
            views); False for rows the views already reflect (warm-up: views are
            authoritative, only keys without one get a view).

    Returns:
        The number of views added (keys that had none).
    """
    latest = newest.views
    views = table._views
    if views and not overwrite:
        for k in views:
            latest.pop(k, None)
    before = len(views)
    views.update(latest)
    added = len(views) - before
    if table.counting:  # C-level: every key 1, then the (few) tombstoned ones 0
        sealed = table.sealed_rows
        sealed.update(dict.fromkeys(latest, 1))
        for k in newest.absent:
            if latest.get(k) is ABSENT:
                sealed[k] = 0
    table._ctl.growth -= added
    return added
