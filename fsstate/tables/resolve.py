"""Vectorized resolution: op rows of a table, from any runs, to its live state as Arrow.

The per-key reads of :mod:`fsstate.format.tombstones` replay a key's op rows in Python; the
batched reads (scans, prefix lookups, ``get_many`` over many keys) resolve whole batches of op
rows with Arrow and numpy instead, with the same rules:

* a row at sequence ``s`` is dead if a range tombstone with a larger sequence number covers its
  key (:meth:`fsstate.format.tombstones.RangeTombstones.floor_array`);
* map state: a clear row of the grouping key removes every row of that key written before it;
* the newest remaining row of each key (value state) or (key, user key) (map state) wins; it is
  live if it is a put that has not expired at ``now_ms`` (``_expires_at_ms > now_ms``).

Invariants: the result does not depend on how the rows are split into runs or ordered, and
equals what per-key reads return; it is sorted by key (then user key), ascending, nulls and NaN
last per field as in stored segments. :func:`null_safe` makes Arrow hash joins match null key
fields (Arrow never matches nulls, Python dicts do). Its joins run on the calling thread
(``use_threads=False``): the inputs are one epoch's keys, and in a Spark worker the other cores
run other tasks, so Acero's thread pool only adds hand-offs (and per-thread allocator caches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.format.schema import (
    EXPIRES,
    KIND_LIST,
    KIND_MAP,
    OP,
    OP_CLEAR,
    OP_PUT,
    SEQ,
    TableSpec,
)
from fsstate.format.segment import same_as_next
from fsstate.format.tombstones import RangeTombstones


def out_schema(spec: TableSpec, with_expiry: bool = False, with_seq: bool = False) -> pa.Schema:
    """Columns of a resolved table: key fields, user-key fields (map state), value fields
    (a value name already taken is prefixed ``value.``), optionally ``_expires_at_ms`` and
    ``_seq`` (the sequence number of the row that wrote the entry; a list element's is the
    one that appended it)."""
    assert spec.key_schema is not None
    fields = list(spec.key_schema)
    if spec.kind == KIND_MAP and spec.ukey_schema is not None:
        fields += list(spec.ukey_schema)
    taken = {f.name for f in fields}
    for f in spec.value_schema:
        fields.append(f.with_name(f"value.{f.name}") if f.name in taken else f)
    if with_expiry:
        fields.append(pa.field(EXPIRES, pa.int64()))
    if with_seq:
        fields.append(pa.field(SEQ, pa.int64()))
    return pa.schema([f.with_nullable(True) for f in fields])


def first_of_group(cols: Sequence[pa.Array]) -> np.ndarray[Any, Any]:
    """numpy bool: row r starts a new group of equal ``cols`` (rows sorted; nulls equal)."""
    same_next = same_as_next(list(cols))
    n = len(same_next)
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = ~same_next[:-1]
    return first


def resolve(
    spec: TableSpec,
    parts: Sequence[pa.RecordBatch],
    ranges: RangeTombstones,
    now_ms: int,
    *,
    with_expiry: bool = False,
    with_seq: bool = False,
) -> pa.Table:
    """The live state held by op rows (row layout of ``spec``) as a table of :func:`out_schema`.

    List state resolves like map state with the element's ``elem_seq`` as its user key (a
    clear removes the elements appended before it), so its rows come out per element, in
    append order within a key.

    Args:
        spec: the table's spec (key schema known).
        parts: op rows from any runs, in any order (every row of each key involved).
        ranges: the table's range tombstones.
        now_ms: the table's clock for expiry.
        with_expiry: add the ``_expires_at_ms`` column.
        with_seq: add the ``_seq`` column.
    """
    schema = out_schema(spec, with_expiry, with_seq)
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return schema.empty_table()
    # Resolution works on the narrow columns (keys, seq, op, expiry); the value column (the
    # wide one) is taken once, at the end, from the parts as they are: one copy of the
    # values, not one per step.
    batch = pa.Table.from_batches(parts)
    has_ukey = spec.kind in (KIND_MAP, KIND_LIST)
    key_all = batch.column("key").combine_chunks().flatten()
    ukey_all = batch.column("ukey").combine_chunks().flatten() if has_ukey else []
    seqs = batch.column(SEQ).to_numpy()
    ops = batch.column(OP).to_numpy()
    rows = np.arange(batch.num_rows, dtype=np.int64)  # candidate rows (of ``batch``)
    key_cols, ukey_cols = key_all, ukey_all
    if ranges:
        floors = ranges.floor_array(key_all)
        alive = seqs > floors
        if not alive.all():
            rows = np.flatnonzero(alive)
            picked = pa.array(rows)
            key_cols = [c.take(picked) for c in key_all]
            ukey_cols = [c.take(picked) for c in ukey_all]
            seqs, ops = seqs[rows], ops[rows]
    order = _newest_first(key_cols, ukey_cols, seqs)
    key_cols = [c.take(order) for c in key_cols]
    ukey_cols = [c.take(order) for c in ukey_cols]
    ops, seqs = ops[order], seqs[order]
    chosen = _newest_of_units(key_cols, ukey_cols, ops, seqs, has_ukey)
    winners = rows[order[chosen]]  # the newest row of each unit, in unit order
    live = _live(batch.column(EXPIRES).take(pa.array(winners)), ops[chosen], now_ms)
    final = pa.array(winners[live], type=pa.int64())
    cols = [c.take(final) for c in key_all]
    if spec.kind == KIND_MAP:
        cols += [c.take(final) for c in ukey_all]
    cols += batch.column("value").take(final).combine_chunks().flatten()
    if with_expiry:
        cols.append(batch.column(EXPIRES).take(final).combine_chunks())
    if with_seq:
        cols.append(batch.column(SEQ).take(final).combine_chunks())
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(cols, schema)], schema=schema)


def _newest_first(
    key_cols: Sequence[pa.Array], ukey_cols: Sequence[pa.Array], seqs: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """The order of rows by key, then user key, ascending (nulls and NaN last per field),
    then newest (largest sequence number) first."""
    names = [f"k{i}" for i in range(len(key_cols))] + [f"u{i}" for i in range(len(ukey_cols))]
    order_table = pa.Table.from_arrays([*key_cols, *ukey_cols, pa.array(seqs)], [*names, SEQ])
    order: np.ndarray[Any, Any] = pc.sort_indices(
        order_table, sort_keys=[*((n, "ascending") for n in names), (SEQ, "descending")]
    ).to_numpy()
    return order


def _newest_of_units(
    key_cols: Sequence[pa.Array],
    ukey_cols: Sequence[pa.Array],
    ops: np.ndarray[Any, Any],
    seqs: np.ndarray[Any, Any],
    has_ukey: bool,
) -> np.ndarray[Any, Any]:
    """Positions of the newest row of each unit among rows in :func:`_newest_first` order: of
    each key (value state), or of each (key, user key) written after the key's last clear,
    clear rows left out (list and map state)."""
    if not has_ukey:
        return np.flatnonzero(first_of_group(key_cols))
    first_of_key = first_of_group(key_cols)
    starts = np.flatnonzero(first_of_key)
    clear_seq = np.where(ops == OP_CLEAR, seqs, -1)
    group_max = np.maximum.reduceat(clear_seq, starts) if len(starts) else clear_seq[:0]
    group_of = np.cumsum(first_of_key) - 1
    kept = np.flatnonzero((seqs > group_max[group_of]) & (ops != OP_CLEAR))
    sub = [c.take(pa.array(kept, type=pa.int64())) for c in [*key_cols, *ukey_cols]]
    return kept[first_of_group(sub)] if len(kept) else kept


def _live(expires: pa.ChunkedArray, ops: np.ndarray[Any, Any], now_ms: int) -> np.ndarray[Any, Any]:
    """numpy bool per winning row: a put that has not expired at ``now_ms``."""
    expires = expires.combine_chunks()
    live: np.ndarray[Any, Any] = pc.fill_null(
        pc.and_kleene(
            pc.equal(pa.array(ops), OP_PUT),
            pc.or_kleene(pc.is_null(expires), pc.greater(expires, now_ms)),
        ),
        False,
    ).to_numpy(zero_copy_only=False)
    return live


def _fill_value(t: pa.DataType) -> pa.Scalar:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", type=t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.scalar(b"\0" * (t.byte_width if pa.types.is_fixed_size_binary(t) else 0), type=t)
    if pa.types.is_boolean(t):
        return pa.scalar(False)
    if pa.types.is_decimal(t):
        return pa.scalar(0).cast(t)
    if pa.types.is_temporal(t):
        return (
            pa.array([0], pa.int64()).cast(t)[0]
            if t.bit_width == 64
            else pa.array([0], pa.int32()).cast(t)[0]
        )
    return pa.scalar(0).cast(t)


def null_safe(sides: Sequence[Sequence[pa.Array]]) -> list[list[pa.Array]]:
    """Join columns for Arrow hash joins that match nulls as equal.

    Args:
        sides: for each side of a join, its key columns (same count and types on every side).

    Returns:
        Per side, the columns to join on: a column that holds nulls on any side is replaced
        by its values with nulls filled and an int8 null flag (so null matches null only).
    """
    width = len(sides[0]) if sides else 0
    out: list[list[pa.Array]] = [[] for _ in sides]
    for i in range(width):
        if not any(side[i].null_count for side in sides):
            for o, side in zip(out, sides):
                o.append(side[i])
            continue
        fill = _fill_value(sides[0][i].type)
        for o, side in zip(out, sides):
            col = side[i]
            o.append(pc.fill_null(col, fill))
            o.append(pc.is_null(col).cast(pa.int8()))
    return out


def semi_join_rows(
    rows: pa.RecordBatch, row_cols: Sequence[pa.Array], want: Sequence[pa.Array]
) -> pa.RecordBatch:
    """The rows whose ``row_cols`` equal one of the rows of ``want`` (nulls match nulls), in
    their original order."""
    if not rows.num_rows or not len(want[0]):
        return rows.slice(0, 0)
    left, right = null_safe([list(row_cols), list(want)])
    names = [f"j{i}" for i in range(len(left))]
    side = pa.Table.from_arrays([*left, pa.array(np.arange(rows.num_rows))], [*names, "_row"])
    hit = side.join(
        pa.Table.from_arrays(right, names), keys=names, join_type="left semi", use_threads=False
    )
    picked = hit.column("_row").combine_chunks()
    return rows.take(pc.take(picked, pc.sort_indices(picked)))


def lookup_back(
    found: pa.Table, wanted: Sequence[pa.Array], width: int, value_schema: pa.Schema
) -> pa.Table:
    """Values of resolved entries for requested keys, in request order, with ``_found``.

    Args:
        found: resolved entries whose first ``width`` columns are the lookup key (unique),
            followed by the value columns.
        wanted: the requested lookup-key columns (``width`` of them).
        width: columns of the lookup key.
        value_schema: the value schema (the result's columns, nullable, then ``_found``).
    """
    n = len(wanted[0]) if wanted else 0
    rows = np.full(n, -1, dtype=np.int64)
    if found.num_rows and n:
        fcols = [found.column(i).combine_chunks() for i in range(width)]
        left, right = null_safe([list(wanted), fcols])
        names = [f"j{i}" for i in range(len(left))]
        req = pa.Table.from_arrays([*left, pa.array(np.arange(n))], [*names, "_pos"])
        have = pa.Table.from_arrays([*right, pa.array(np.arange(found.num_rows))], [*names, "_at"])
        hit = req.join(have, keys=names, join_type="inner", use_threads=False)
        rows[hit.column("_pos").to_numpy()] = hit.column("_at").to_numpy()
    index = pa.array(rows, mask=rows < 0)
    out_cols = [
        found.column(width + i).combine_chunks().take(index).cast(f.type)
        if found.num_rows
        else pa.nulls(n, f.type)
        for i, f in enumerate(value_schema)
    ]
    schema = pa.schema(
        [*(f.with_nullable(True) for f in value_schema), pa.field("_found", pa.bool_())]
    )
    return pa.Table.from_arrays([*out_cols, pc.is_valid(index)], schema=schema)
