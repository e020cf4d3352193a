"""Immutable Arrow segments of op rows, with a lazily built, compact key index.

A segment is one Arrow record batch in the row layout of :mod:`fsstate.format.schema`, sorted by
(key, ukey, ``_seq``); a batched write hands over its rows unsorted and the segment sorts them
the first time anything reads them, so the write itself costs no sort. It is what the memtable
seals into, what a batched write appends and what a Parquet run decodes to.

Invariants:

* A segment never changes after construction; its ``nbytes`` is exact (Arrow buffers).
* All rows of one grouping key are contiguous; within a key, rows are ordered by ukey then seq.
* The key index maps the process-local ``hash()`` of each distinct grouping key to its row
  range. It holds two int64 arrays (16 bytes per distinct key), is built on the first point
  lookup, and is verified against the stored key on every hit, so hash collisions are harmless.
* Keys equal as Spark groups them are one key: nulls equal nulls and NaN equals NaN, in the
  sort, in :func:`same_as_next` (which resolving and compaction merge by) and in the Python
  tuples read out, whose NaN is :data:`fsstate.format.schema.NAN`.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.format.keyfilter import stable_hash, stable_hashes
from fsstate.format.keyorder import Bound, bisect_rows, range_mask
from fsstate.format.schema import (
    EXPIRES,
    OP,
    OP_PUT,
    SEQ,
    TableSpec,
    canonical,
    normalize_key_column,
    py_list,
)

# One op row as Python objects: (seq, op, ukey | None, value | None, expires_at_ms | None)
OpRow = tuple[int, int, Any, Any, Any]


def _struct(
    fields: Sequence[pa.Field], arrays: Sequence[pa.Array], mask: pa.Array | None
) -> pa.Array:
    return pa.StructArray.from_arrays(list(arrays), fields=list(fields), mask=mask)


def _transpose(rows: Sequence[Any], width: int) -> list[list[Any]]:
    """Columns of ``rows`` (tuples of ``width`` items, or None: a row of nulls): one
    ``itemgetter`` pass per column (C-level, and no object per row: ``zip(*rows)`` makes an
    iterator per row, which also wakes the cyclic garbage collector on large seals)."""
    nulls = (None,) * width
    filled = [nulls if r is None else r for r in rows] if None in rows else rows
    return [list(map(itemgetter(i), filled)) for i in range(width)]


def _increasing(arr: pa.Array) -> bool:
    """Whether ``arr`` is strictly increasing in Arrow's sort order, without nulls or NaNs
    (False if unsure): rows already in order need no sort."""
    if len(arr) < 2 or arr.null_count or pa.types.is_floating(arr.type):
        return len(arr) < 2 and not arr.null_count
    try:
        inc = pc.all(pc.less(arr.slice(0, len(arr) - 1), arr.slice(1)))
    except pa.ArrowException:  # a type without an order kernel: sort as ever
        return False
    return bool(inc.as_py())


def build_batch(
    spec: TableSpec,
    keys: Sequence[tuple[Any, ...]],
    ukeys: Sequence[Any] | None,
    values: Sequence[Any],
    seqs: Sequence[int],
    ops: Sequence[int],
    expires: Sequence[Any],
) -> pa.RecordBatch:
    """Build a sorted segment batch from column lists of Python objects.

    ``values[i]`` (and ``ukeys[i]``) may be None on tombstone rows; ``expires[i]`` may be None.
    Float key fields are stored with ``-0.0`` as ``0.0`` (a view's dict may hold either).
    Rows that come in order (a seal of keys that arrived sorted, as Spark hands them over:
    one key column, strictly increasing, no user key) are not sorted again; a batch of puts
    only (no value is None) gets no validity mask, and columns of one constant (every op a
    put, no expiry) are made without converting a list.
    """
    assert spec.key_schema is not None
    n = len(keys)
    key_cols = _transpose(keys, len(spec.key_schema))
    key_arrays = [
        normalize_key_column(pa.array(c, type=f.type)) for c, f in zip(key_cols, spec.key_schema)
    ]
    all_put = ops.count(OP_PUT) == n  # small ints: an identity test per row
    value_mask = None if all_put else pa.array([v is None for v in values], type=pa.bool_())
    value_cols = _transpose(values, len(spec.value_schema))
    value_arrays = [pa.array(c, type=f.type) for c, f in zip(value_cols, spec.value_schema)]
    ukey_schema = spec.ukey_schema
    seq_arr = pa.array(seqs, type=pa.int64())
    op_arr = (
        pa.array(np.full(n, OP_PUT, dtype=np.int8)) if all_put else pa.array(ops, type=pa.int8())
    )
    exp_arr = (
        pa.nulls(n, pa.int64()) if expires.count(None) == n else pa.array(expires, type=pa.int64())
    )
    if ukey_schema is None and len(key_arrays) == 1 and _increasing(key_arrays[0]):
        out: dict[str, pa.Array] = {"key": _struct(list(spec.key_schema), key_arrays, None)}
        out["value"] = _struct(list(spec.value_schema), value_arrays, value_mask)
        out[SEQ], out[OP], out[EXPIRES] = seq_arr, op_arr, exp_arr
        return pa.RecordBatch.from_pydict(out, schema=spec.row_schema())
    columns: dict[str, pa.Array] = {}
    flat_names: list[str] = []
    for f, a in zip(spec.key_schema, key_arrays):
        columns[f"k.{f.name}"] = a
        flat_names.append(f"k.{f.name}")
    ukey_arrays: list[pa.Array] = []
    ukey_mask = None
    if ukey_schema is not None:
        assert ukeys is not None
        ukey_mask = pa.array([u is None for u in ukeys], type=pa.bool_())
        ucols = _transpose(ukeys, len(ukey_schema))
        ukey_arrays = [
            normalize_key_column(pa.array(c, type=f.type)) for c, f in zip(ucols, ukey_schema)
        ]
        for f, a in zip(ukey_schema, ukey_arrays):
            columns[f"u.{f.name}"] = a
            flat_names.append(f"u.{f.name}")
    columns[SEQ] = seq_arr
    flat = pa.table(columns)
    order = pc.sort_indices(flat, sort_keys=[(name, "ascending") for name in [*flat_names, SEQ]])
    key_struct = _struct(list(spec.key_schema), [a.take(order) for a in key_arrays], None)
    out = {"key": key_struct}
    if ukey_schema is not None:
        assert ukey_mask is not None
        out["ukey"] = _struct(
            list(ukey_schema), [a.take(order) for a in ukey_arrays], ukey_mask.take(order)
        )
    out["value"] = _struct(
        list(spec.value_schema),
        [a.take(order) for a in value_arrays],
        None if value_mask is None else value_mask.take(order),
    )
    out[SEQ] = seq_arr.take(order)
    out[OP] = op_arr.take(order)
    out[EXPIRES] = exp_arr.take(order)
    return pa.RecordBatch.from_pydict(out, schema=spec.row_schema())


def sort_batch(spec: TableSpec, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Sort a batch in the row layout by (key, ukey, seq)."""
    names: list[str] = []
    cols: dict[str, pa.Array] = {}
    key_struct = batch.column("key")
    assert spec.key_schema is not None
    for i, f in enumerate(spec.key_schema):
        cols[f"k.{f.name}"] = key_struct.field(i)
        names.append(f"k.{f.name}")
    if spec.ukey_schema is not None:
        ukey_struct = batch.column("ukey")
        for i, f in enumerate(spec.ukey_schema):
            cols[f"u.{f.name}"] = ukey_struct.field(i)
            names.append(f"u.{f.name}")
    cols[SEQ] = batch.column(SEQ)
    order = pc.sort_indices(pa.table(cols), sort_keys=[(n, "ascending") for n in [*names, SEQ]])
    return batch.take(order)


def same_as_next(arrays: list[pa.Array]) -> Any:
    """numpy bool array: row r has the same key as row r+1 (nulls equal nulls, NaN equals NaN,
    as in the sort order and Arrow's joins, which keep each in one place); last False."""
    n = len(arrays[0]) if arrays else 0
    same = np.ones(max(0, n - 1), dtype=bool)
    for a in arrays:
        if n < 2:
            break
        cur, nxt = a.slice(0, n - 1), a.slice(1)
        eq = pc.fill_null(pc.equal(cur, nxt), False)
        both_null = pc.and_(pc.is_null(cur), pc.is_null(nxt))
        if pa.types.is_floating(a.type):
            both_nan = pc.fill_null(pc.and_(pc.is_nan(cur), pc.is_nan(nxt)), False)
            eq = pc.or_(eq, both_nan)
        same &= pc.or_(eq, both_null).to_numpy(zero_copy_only=False)
    return np.concatenate([same, np.zeros(min(n, 1), dtype=bool)])


def key_tuples(cols: Sequence[pa.Array]) -> list[tuple[Any, ...]]:
    """Grouping-key tuples of flattened key columns, in row order (built by C-level ``zip``)."""
    return list(zip(*[py_list(c) for c in cols]))


def gather_key_rows(
    seg: Segment,
    out: dict[tuple[Any, ...], list[OpRow]],
    only: Container[tuple[Any, ...]] | None = None,
) -> None:
    """Append each grouping key's op rows in ``seg`` to ``out[key]`` (segments oldest first keep
    every key's rows in seq order); with ``only``, just the keys in it (the others' values never
    become Python objects)."""
    for k, rows in seg.iter_key_rows(only):
        have = out.get(k)
        if have is None:
            out[k] = rows
        else:
            have.extend(rows)


class Segment:
    """An immutable, sorted batch of op rows of one table with a lazy key index.

    Args:
        spec: the table's spec (with a known key schema).
        batch: rows in the layout of ``spec.row_schema()``, sorted by key, ukey, seq.
    """

    __slots__ = (
        "_batch",
        "_cols",
        "_ends",
        "_hashes",
        "_key_fields",
        "_nbytes",
        "_sorted",
        "_starts",
        "spec",
    )

    def __init__(self, spec: TableSpec, batch: pa.RecordBatch, is_sorted: bool = True) -> None:
        self.spec = spec
        self._batch = batch
        self._sorted = is_sorted
        self._hashes: np.ndarray | None = None
        self._starts: np.ndarray | None = None
        self._ends: np.ndarray | None = None
        self._key_fields: list[pa.Array] | None = None
        self._cols: list[pa.Array] | None = None
        self._nbytes = -1  # Arrow's nbytes walks buffers (ms on taken batches): computed once

    @property
    def batch(self) -> pa.RecordBatch:
        """The rows, sorted by (key, ukey, seq); a batched write is sorted on first use."""
        if not self._sorted:
            self._batch = sort_batch(self.spec, self._batch)
            self._sorted = True
            self._nbytes = -1
        return self._batch

    @property
    def is_sorted(self) -> bool:
        """Whether the rows are in key order already (a batched write sorts on first use)."""
        return self._sorted

    @property
    def rows_any_order(self) -> pa.RecordBatch:
        """The rows as they are held (a batched write may not be sorted yet); for scans that
        do not need key order, so they do not pay for the sort."""
        return self._batch

    @property
    def num_rows(self) -> int:
        """Rows in the segment."""
        return int(self._batch.num_rows)

    @property
    def nbytes(self) -> int:
        """Exact bytes of the Arrow buffers plus the key index, if built."""
        index = 0 if self._hashes is None else 3 * 8 * len(self._hashes)
        if self._nbytes < 0:
            self._nbytes = int(self._batch.nbytes)
        return self._nbytes + index

    def min_max_seq(self) -> tuple[int, int]:
        """Smallest and largest sequence number in the segment."""
        mm = pc.min_max(self._batch.column(SEQ))
        return int(mm["min"].as_py()), int(mm["max"].as_py())

    # -- index ---------------------------------------------------------------------------------
    def _key_columns(self) -> list[pa.Array]:
        if self._key_fields is None:
            self._key_fields = self.batch.column("key").flatten()
        return self._key_fields

    @property
    def has_index(self) -> bool:
        """Whether the key index is built."""
        return self._hashes is not None

    def _last_rows(self) -> Any:
        """numpy int64 array: the last row of each grouping key, in key order."""
        return np.flatnonzero(~same_as_next(self._key_columns())).astype(np.int64)

    def _build_index(self) -> None:
        end_arr = self._last_rows() + 1
        start_arr = np.concatenate([np.zeros(min(len(end_arr), 1), dtype=np.int64), end_arr[:-1]])
        firsts = self.keys_at(start_arr)
        hashes = np.fromiter(map(hash, firsts), dtype=np.int64, count=len(start_arr))
        order = np.argsort(hashes, kind="stable")
        self._hashes = hashes[order]
        self._starts = start_arr[order]
        self._ends = end_arr[order]

    def key_range(self, key: tuple[Any, ...]) -> tuple[int, int] | None:
        """Row range ``[start, end)`` of the grouping key, or None if it has no rows here."""
        if self._hashes is None:
            self._build_index()
        hashes, starts, ends = self._hashes, self._starts, self._ends
        assert hashes is not None and starts is not None and ends is not None
        h = hash(key)
        i = int(hashes.searchsorted(h))
        n = len(hashes)
        key_fields = self._key_columns()
        while i < n and hashes[i] == h:
            s = int(starts[i])
            stored = tuple(canonical(col[s].as_py()) for col in key_fields)
            if stored == key:
                return s, int(ends[i])
            i += 1
        return None

    # -- row access ----------------------------------------------------------------------------
    def _row_columns(self) -> list[pa.Array]:
        if self._cols is None:
            b = self.batch
            cols = [b.column(SEQ), b.column(OP), b.column(EXPIRES)]
            cols += b.column("value").flatten()
            if self.spec.ukey_schema is not None:
                cols += b.column("ukey").flatten()
            self._cols = cols
        return self._cols

    def _lists(self, cols: list[pa.Array]) -> list[list[Any]]:
        """Python lists of row columns; the user-key columns (the last ones) with the one NaN
        object, as keys of views (values need not be)."""
        first_ukey = len(cols) - (len(self.spec.ukey_schema) if self.spec.ukey_schema else 0)
        return [py_list(c) if i >= first_ukey else c.to_pylist() for i, c in enumerate(cols)]

    def rows(self, start: int, end: int) -> list[OpRow]:
        """Rows ``[start, end)`` as Python op rows."""
        n = end - start
        return _op_rows(self.spec, self._lists([c.slice(start, n) for c in self._row_columns()]), n)

    def _rows_at(self, indices: list[int]) -> list[OpRow]:
        """The op rows at the given row indices (ascending), as Python op rows."""
        take = pa.array(indices, type=pa.int64())
        lists = self._lists([c.take(take) for c in self._row_columns()])
        return _op_rows(self.spec, lists, len(indices))

    def rows_for(self, key: tuple[Any, ...]) -> list[OpRow]:
        """All op rows of the grouping key (empty if none), ordered by ukey then seq."""
        rng = self.key_range(key)
        if rng is None:
            return []
        return self.rows(*rng)

    def iter_key_rows(
        self, only: Container[tuple[Any, ...]] | None = None
    ) -> Iterator[tuple[tuple[Any, ...], list[OpRow]]]:
        """Every grouping key with its op rows, in key order (a full scan); with ``only``, just
        the keys in it, whose rows alone are converted."""
        keys = key_tuples(self._key_columns())
        if only is not None:
            picked = [i for i, k in enumerate(keys) if k in only]
            if not picked:
                return
            keys = [keys[i] for i in picked]
            all_rows = self._rows_at(picked)
        else:
            all_rows = self.rows(0, len(keys)) if keys else []
        n = len(keys)
        i = 0
        while i < n:
            j = i + 1
            k = keys[i]
            while j < n and keys[j] == k:
                j += 1
            yield k, all_rows[i:j]
            i = j

    def key_at(self, row: int) -> tuple[Any, ...]:
        """The grouping key of one row (sorted order)."""
        return tuple(col[row].as_py() for col in self._key_columns())

    def slice_range(self, lo: Bound, hi: Bound) -> pa.RecordBatch:
        """The rows whose grouping key is in ``[lo, hi)`` (bounds may be prefixes or None), in
        key order: two binary searches, then an exact filter of the slice (see
        :mod:`fsstate.format.keyorder`); the work is proportional to the rows returned."""
        batch = self.batch
        n = batch.num_rows
        start = 0 if lo is None else bisect_rows(n, self.key_at, lo)
        end = n if hi is None else bisect_rows(n, self.key_at, hi)
        if end <= start:
            return batch.slice(0, 0)
        part = batch.slice(start, end - start)
        cols = [c.slice(start, end - start) for c in self._key_columns()]
        mask = range_mask(cols, lo, hi)
        return part if mask.all() else part.filter(pa.array(mask))

    def distinct_keys(self) -> list[tuple[Any, ...]]:
        """Distinct grouping keys, in key order (Arrow finds them; only they become tuples)."""
        return self.keys_at(self._last_rows())

    def distinct_count(self, entries: bool = False) -> int:
        """How many distinct grouping keys the rows hold (``entries``: distinct (key, user key)
        pairs of a map table), counted at the key changes of the sorted rows (sorts them once,
        if a batched write handed them over unsorted)."""
        cols = self._key_columns()
        if entries:
            cols = [*cols, *self.batch.column("ukey").flatten()]
        return int(np.count_nonzero(~same_as_next(cols)))

    def distinct_key_hashes(self) -> np.ndarray[Any, Any]:
        """``stable_hash`` of every distinct grouping key, as uint64 (numpy where the key types
        allow, :func:`fsstate.format.keyfilter.stable_hashes`; tuples one by one otherwise)."""
        rows = self._last_rows()
        take = pa.array(rows, type=pa.int64())
        got = stable_hashes([c.take(take) for c in self._key_columns()])
        if got is not None:
            return got
        keys = self.keys_at(rows)
        return np.fromiter(map(stable_hash, keys), dtype=np.uint64, count=len(keys))

    def keys_at(self, rows: Sequence[int] | Any) -> list[tuple[Any, ...]]:
        """The grouping keys of the given rows (a sequence or numpy array), as tuples."""
        if not len(rows):
            return []
        take = pa.array(rows, type=pa.int64())
        return key_tuples([c.take(take) for c in self._key_columns()])


def _op_rows(spec: TableSpec, lists: list[list[Any]], n: int) -> list[OpRow]:
    """Op rows from the Python lists of the row columns (seq, op, expires, values, ukeys)."""
    nv = len(spec.value_schema)
    seqs, ops, exps = lists[0], lists[1], lists[2]
    vals = list(zip(*lists[3 : 3 + nv]))
    if spec.ukey_schema is not None:
        ukeys: list[Any] = list(zip(*lists[3 + nv :]))
    else:
        ukeys = [()] * n
    return [
        (seqs[i], ops[i], ukeys[i], vals[i] if ops[i] == 0 else None, exps[i]) for i in range(n)
    ]
