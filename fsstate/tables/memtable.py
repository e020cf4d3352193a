"""The memtable: hot per-key views plus the changes not yet sealed into a segment.

Each table keeps ``views``: grouping key -> its complete current state as Python objects
(value: the value tuple itself, a ``Timed((value, expiry))`` pair when it expires, or ABSENT;
map: ``{ukey: cell}`` with the same cells; list: ``[(value, expiry, elem_seq)]``). A view is
loaded from the sealed tiers on the first touch of a key and then serves every read and write
of that key at dict speed; this is the hot tier (the only way a Python caller gets microsecond
calls).

``dirty`` records what changed since the last seal: value tables map key -> seq of the last op
(the only place a value's sequence number lives until the seal writes it); list and map
tables map key -> ``[clear_seq | None, {ukey: seq of last op}]``.

Invariants:

* A view is complete: it reflects every sealed row and every change, so reads never consult
  the sealed tiers for a key in ``views``.
* Dirty keys are pinned: their views are never evicted before a seal.
* Sealing emits, per dirty key, a clear row (if cleared since the last seal) and the last op of
  every touched user key, each with its original sequence number, then forgets the dirt.
* :func:`dirty_batches` cuts a large seal into chunks of whole keys in the global key order of
  Arrow's sort (the order of every segment), so the chunks written one after the other form
  one sorted run file while only one chunk exists as Arrow at a time.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fsstate.format.schema import (
    KIND_LIST,
    KIND_MAP,
    KIND_VALUE,
    OP_CLEAR,
    OP_DELETE,
    OP_PUT,
    TableSpec,
)
from fsstate.format.segment import OpRow, build_batch
from fsstate.format.tombstones import ABSENT, Timed, cell_expiry, cell_value
from fsstate.interfaces import Key


class SealRows:
    """Column lists of op rows produced by a seal."""

    __slots__ = ("expires", "keys", "ops", "seqs", "ukeys", "values")

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.ukeys: list[Any] = []
        self.values: list[Any] = []
        self.seqs: list[int] = []
        self.ops: list[int] = []
        self.expires: list[Any] = []

    def add(self, key: Key, ukey: Any, value: Any, seq: int, op: int, exp: Any) -> None:
        """Append one op row."""
        self.keys.append(key)
        self.ukeys.append(ukey)
        self.values.append(value)
        self.seqs.append(seq)
        self.ops.append(op)
        self.expires.append(exp)

    def __len__(self) -> int:
        return len(self.keys)


def seal_rows(
    spec: TableSpec,
    views: dict[Key, Any],
    dirty: dict[Key, Any],
    states: list[Any] | None = None,
) -> SealRows:
    """The op rows that persist ``dirty`` (see the module docstring); ``states``: a value
    table's views of the dirty keys in ``dirty``'s order, if the caller has them already."""
    out = SealRows()
    if spec.kind == KIND_VALUE:
        # column lists by comprehensions: a third of the cost of one add() per row
        keys = list(dirty)
        vs = list(map(views.__getitem__, keys)) if states is None else states
        out.keys = keys
        out.ukeys = [None] * len(keys)
        out.seqs = list(dirty.values())
        out.ops = [OP_CLEAR if v is ABSENT else OP_PUT for v in vs]
        if Timed in set(map(type, vs)):  # one C-level pass, no generator frame per key
            out.values = [None if v is ABSENT else cell_value(v) for v in vs]
            out.expires = [None if v is ABSENT else cell_expiry(v) for v in vs]
        else:  # no cell expires (no TTL): a cell is its value, no call per key
            out.values = [None if v is ABSENT else v for v in vs]
            out.expires = [None] * len(vs)
        return out
    for key, (clear_seq, touched) in dirty.items():
        view = views[key]
        if clear_seq is not None:
            out.add(key, None, None, clear_seq, OP_CLEAR, None)
        if spec.kind == KIND_MAP:
            for ukey, seq in touched.items():
                c = view.get(ukey)  # present iff the last op on ukey was a put (complete view)
                if c is None:
                    out.add(key, ukey, None, seq, OP_DELETE, None)
                else:
                    out.add(key, ukey, cell_value(c), seq, OP_PUT, cell_expiry(c))
        else:
            assert spec.kind == KIND_LIST
            by_seq = {e[2]: e for e in view} if touched else {}
            for elem, seq in touched.items():
                e = by_seq.get(elem)
                if e is not None and elem == seq:
                    out.add(key, (elem,), e[0], elem, OP_PUT, e[1])
                else:
                    out.add(key, (elem,), None, seq, OP_DELETE, None)
    return out


def dirty_batches(
    spec: TableSpec,
    views: dict[Key, Any],
    dirty: dict[Key, Any],
    chunk_keys: int,
    states: list[Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The op rows of ``dirty`` as sorted batches of at most ``chunk_keys`` keys, in key order
    across batches (each key's rows in one batch); ``dirty`` is read, not changed. ``states``:
    as for :func:`seal_rows` (used when the seal is one chunk)."""
    keys = list(dirty)
    if len(keys) > chunk_keys:
        assert spec.key_schema is not None
        struct = pa.array(keys, type=pa.struct(list(spec.key_schema)))
        names = [f"k{i}" for i in range(struct.type.num_fields)]
        order = pc.sort_indices(
            pa.Table.from_arrays(struct.flatten(), names=names),
            sort_keys=[(n, "ascending") for n in names],
        )
        keys = [keys[i] for i in order.to_numpy()]
    has_ukey = spec.ukey_schema is not None
    for start in range(0, len(keys), chunk_keys):
        # one chunk seals the dirt as it is (no copy of a dict of every dirty key)
        part = (
            dirty
            if len(keys) <= chunk_keys
            else {k: dirty[k] for k in keys[start : start + chunk_keys]}
        )
        rows = seal_rows(spec, views, part, states if part is dirty else None)
        if len(rows):
            yield build_batch(
                spec,
                rows.keys,
                rows.ukeys if has_ukey else None,
                rows.values,
                rows.seqs,
                rows.ops,
                rows.expires,
            )


def estimate_view_bytes(kind: str, view: Any) -> int:
    """Rough Python-object size of a view, for memory accounting."""
    if kind == KIND_VALUE:
        return 120 if view is ABSENT else 260
    return 120 + 200 * len(view)


def deep_size(obj: Any, depth: int = 0) -> int:
    """Approximate bytes of a view or key: containers measured from a sample of 8 items."""
    size = sys.getsizeof(obj)
    if depth > 3:
        return size
    if isinstance(obj, dict):
        items = list(itertools.islice(obj.items(), 8))
        if items:
            per = sum(deep_size(k, depth + 1) + deep_size(v, depth + 1) for k, v in items)
            size += per * len(obj) // len(items)
    elif isinstance(obj, (list, tuple)):
        sample = list(itertools.islice(obj, 8))
        if sample:
            size += sum(deep_size(i, depth + 1) for i in sample) * len(obj) // len(sample)
    return size


def view_rows(kind: str, view: Any, seq: int) -> list[OpRow]:
    """A list or map view as the put rows it stands for (inverse of replay for live rows).

    Map cells hold no sequence number: their rows all get ``seq``, which must be newer than
    every range tombstone and older than every row the view is replayed with (the last seq
    of the version the view reflects); equal seqs keep the view's order in the replay.
    """
    if kind == KIND_MAP:
        return [(seq, OP_PUT, uk, cell_value(c), cell_expiry(c)) for uk, c in view.items()]
    assert kind == KIND_LIST
    return [(e[2], OP_PUT, (e[2],), e[0], e[1]) for e in view]


def touch(dirty: dict[Key, Any], key: Key) -> dict[Any, int]:
    """The ``{user key: seq}`` change record of ``key`` in a list or map table's dirt."""
    d = dirty.get(key)
    if d is None:
        d = dirty[key] = [None, {}]
    touched: dict[Any, int] = d[1]
    return touched
