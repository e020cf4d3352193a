"""Batched operations of the state tables: Arrow tables of keys and values in and out.

``put_many``, ``append_many`` and ``get_many`` take pyarrow tables. The helpers here validate
them into struct arrays cast to the table's schemas, append a batched write as one run after
the sealed memtable with no per-row Python, and look up many value-state keys at once with
Arrow joins. :class:`BatchedTable` adds them to :class:`fsstate.tables.base.TableBase`; the
value, list and map tables derive from it.

Invariants:

* Validation comes first: a bad key, user key or value table raises
  :class:`fsstate.errors.SchemaError` before any view, run or sequence number changes (only an
  undeclared key schema may already be fixed from the key table's schema).
* Columns are matched by position and cast safely to the schema's types; a null in a
  non-nullable column is rejected.
* A batched write seals the memtable first and numbers its rows with consecutive sequence
  numbers from ``next_seq``, so runs stay ordered by sequence number; views of the written
  keys are dropped, so the next read replays them from the runs.
* Key tuples of a batch are built only if someone iterates them (:class:`_LazyKeys`).
* A counting table counts a batch at the write, or (value and map tables that held no run)
  when the batch's segment is sorted anyway: the store's summary and a spill call
  :meth:`fsstate.tables.core.TableCore.settle_counts` before reading the counts or releasing
  the segment; the figures are the same either way.
* The vectorized lookup runs only when no view is dirty (clean views mirror the runs), there
  is no range tombstone and every run is in memory; it returns what per-key ``get`` would:
  the newest row of each key, with deleted and expired values not found.
* A ``get_many`` result is in input order: the value columns (nullable) and ``_found``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import SchemaError
from fsstate.format.schema import (
    EXPIRES,
    KIND_LIST,
    KIND_MAP,
    KIND_VALUE,
    OP,
    OP_PUT,
    SEQ,
    normalize_key_column,
)
from fsstate.format.segment import Segment, key_tuples
from fsstate.interfaces import Key
from fsstate.storage.runs import Run
from fsstate.tables.resolve import null_safe
from fsstate.tables.scan import ScanTable


class BatchedTable(ScanTable):
    """Batched reads and writes of a table (the value, list and map tables derive from it)."""

    def _keys_from_table(self, keys: pa.Table) -> tuple[pa.StructArray, Sequence[Key]]:
        """Validate a table of keys against the key schema; returns the struct and tuples."""
        if not isinstance(keys, (pa.Table, pa.RecordBatch)):
            raise SchemaError(
                f"state {self.name!r}: keys must be a pyarrow Table, got {type(keys)}"
            )
        schema = self.spec.key_schema
        if schema is None:
            schema = pa.schema([f.with_nullable(True) for f in keys.schema])
            self._set_key_schema(schema)
        struct = struct_of(self.name, "grouping key", keys, schema)
        return struct, _LazyKeys(struct)

    def _keys_and_values(
        self, keys: pa.Table, values: pa.Table
    ) -> tuple[pa.StructArray, Sequence[Key], pa.StructArray]:
        """Validate the two tables of a batched write (same length, matching schemas)."""
        key_struct, key_list = self._keys_from_table(keys)
        value_struct = struct_of(self.name, "value", values, self.spec.value_schema)
        if len(key_list) != len(value_struct):
            raise SchemaError(
                f"state {self.name!r}: {len(key_list)} keys but {len(value_struct)} values"
            )
        return key_struct, key_list, value_struct

    def _append_batch(
        self,
        key_struct: pa.StructArray,
        ukey_struct: pa.StructArray | None,
        value_struct: pa.StructArray | None,
        key_list: Sequence[Key],
        op: int = OP_PUT,
    ) -> None:
        """Append the rows as one run of put rows built from Arrow arrays (no per-row Python).

        The run is held unsorted: its segment sorts it, and builds its key index, on the first
        read or commit that needs key order (:attr:`fsstate.format.segment.Segment.batch`), so
        that work is deferred, not avoided. So is the count of a batch into a table that holds
        nothing (no run): its distinct keys, which the sort finds (:meth:`settle_counts`)."""
        self.seal()
        n = len(key_list)
        defer = self.counting and self.kind != KIND_LIST and not self.runs
        if self.counting and not defer:
            self._count_batch(key_struct, ukey_struct, op, n)
        st = self._store
        start = st.next_seq
        st.next_seq = start + n
        cols: dict[str, Any] = {"key": key_struct}
        if ukey_struct is not None:
            cols["ukey"] = ukey_struct
        value_type = pa.struct(list(self.spec.value_schema))
        cols["value"] = pa.nulls(n, value_type) if value_struct is None else value_struct
        cols[SEQ] = pa.array(np.arange(start, start + n, dtype=np.int64))  # no Python ints
        cols[OP] = pa.nulls(n, pa.int8()).fill_null(op)
        cols[EXPIRES] = pa.nulls(n, pa.int64())
        batch = pa.RecordBatch.from_pydict(cols, schema=self.spec.row_schema())
        segment = Segment(self.spec, batch, is_sorted=False)
        if defer and op == OP_PUT:  # a delete of nothing removes nothing: no count
            self.uncounted.append(segment)
        run = Run(segment, None)
        with self.lock:
            self.runs = [*self.runs, run]
        self._forget_views(key_list)
        ctl = self._ctl
        ctl.growth -= max(1, run.memory_bytes // 4096)
        self._after_growth()

    def _count_batch(
        self, key_struct: pa.StructArray, ukey_struct: pa.StructArray | None, op: int, n: int
    ) -> None:
        """Account a batched write of ``n`` rows (after the seal: the runs answer alone).

        List appends are new elements. Value and map rows count once per distinct key (or
        entry); whether each existed is one batched lookup (:meth:`_existing`). Not called
        for a value or map table that holds nothing yet (its count is deferred)."""
        tally = self.row_tally
        if self.kind == KIND_LIST:
            tally.updated += n
            if self.live_rows is not None:
                self.live_rows += n
            return
        cols = list(key_struct.flatten())
        if ukey_struct is not None:
            cols += ukey_struct.flatten()
        names = [f"c{i}" for i in range(len(cols))]
        if len(cols) == 1:  # one column: a hash of it alone (a fifth of a group_by's cost)
            distinct = pa.Table.from_arrays([pc.unique(cols[0])], names=names)
        else:
            distinct = pa.Table.from_arrays(cols, names=names).group_by(names).aggregate([])
        existing = self._existing(distinct, len(key_struct.type))
        if op == OP_PUT:
            tally.updated += distinct.num_rows
            delta = distinct.num_rows - existing
        else:
            tally.removed += existing
            delta = -existing
        if self.live_rows is not None:
            self.live_rows += delta

    def _existing(self, distinct: pa.Table, width: int) -> int:
        """How many of the distinct keys (the first ``width`` columns; map: then the user key)
        hold a row now: one ``get_many`` (a join over the runs, or point reads; the views
        these load go with the batch's keys)."""
        keys = distinct.select(list(range(width)))
        if self.kind == KIND_VALUE and self._arrow_lookup_pays(keys.num_rows):
            assert self.spec.key_schema is not None
            fields = list(self.spec.key_schema)
            struct = pa.StructArray.from_arrays(
                [c.combine_chunks() for c in keys.columns], fields=fields
            )
            return self._found_rows(struct)
        get_many: Any = getattr(self, "get_many")  # noqa: B009 (the kinds define it)
        if self.kind == KIND_MAP:
            ukeys = distinct.select(list(range(width, distinct.num_columns)))
            found = get_many(keys, ukeys).column("_found")
        else:
            found = get_many(keys).column("_found")
        return int(pc.sum(found).as_py() or 0)

    def _runs_rows(self, keys: Sequence[Key]) -> int:
        """Live rows of ``keys`` in the runs: many value keys in one vectorized lookup."""
        if self.kind != KIND_VALUE or len(keys) < 64 or not self.runs:
            return super()._runs_rows(keys)
        assert self.spec.key_schema is not None
        struct = pa.array(keys, type=pa.struct(list(self.spec.key_schema)))
        return self._found_rows(struct)

    def _found_rows(self, distinct: pa.StructArray) -> int:
        """How many of the ``distinct`` keys (no key twice) hold a live value in the runs."""
        found = self._get_many_arrow(distinct, distinct=True).column("_found")
        return int(pc.sum(found).as_py() or 0)

    def _arrow_lookup_pays(self, n: int) -> bool:
        """Whether ``n`` keys are best looked up by joins over the runs (no per-key Python).

        The runs must answer alone: no dirty view (clean views mirror the runs, so either
        side gives the same answer). The joins probe every row of every run, so they must
        cost less than ``n`` point reads: with views in memory (each a dict hit) ``n`` must
        be at least a quarter of the run rows, with runs on disk (each read a Bloom probe
        and a row group, but the join reads whole files) at least 1/64 of them.
        """
        if not self.runs or self._dirty or not n:
            return False
        rows = sum(r.rows for r in self.runs)
        if self._views and 4 * n < rows:
            return False
        return self._runs_in_memory() or 64 * n >= rows

    def _runs_in_memory(self) -> bool:
        """Whether every run holds its segments in memory (a lookup reads no file)."""
        return all(r.in_memory for r in self.runs)

    def _get_many_arrow(self, key_struct: pa.StructArray, distinct: bool = False) -> pa.Table:
        """Vectorized lookup when the runs answer alone (:meth:`_arrow_lookup_pays`; e.g. after
        put_many). Per run, newest first: a hash join that builds on the keys still unresolved
        (the small side) and probes every row of the run in any order (an unsorted batched
        write is not sorted for it), then the highest sequence number per requested key
        (``np.maximum.at``: no sort). A row under a range tombstone of its key is dead, and
        so is every older row of that key. Only the row groups whose key bounds overlap the
        requested keys' span are read (:func:`key_span`): a file's other row groups cannot
        hold a requested key, and decoding them was most of the lookup's memory traffic. The
        joins run on the calling thread, as in :mod:`fsstate.tables.resolve` (the matrix running
        aggregate's epoch of 25,000 rows, in process, four alternating runs on 2 cores: median
        about 80 ms with Acero's threads, 66 ms without). Keys known to be ``distinct`` (the
        live-row count's lookups) of one hashable column skip the join: one ``index_in`` per
        segment (:func:`_index_hits`), about a fifth of its cost."""
        n = len(key_struct)
        key_cols = key_struct.flatten()
        floors = self.ranges.floor_array(key_cols) if self.ranges else None
        remaining = pa.Table.from_arrays(
            [*key_cols, pa.array(np.arange(n, dtype=np.int64))],
            names=[*(f"k{i}" for i in range(len(key_cols))), "_pos"],
        )
        pos_parts: list[np.ndarray[Any, Any]] = []
        value_parts: list[pa.Array] = []
        first, last = key_span(key_cols)
        runs = self.runs
        for i in range(len(runs) - 1, -1, -1):
            if remaining.num_rows == 0:
                break
            segments = runs[i].cached_segments(self.spec, self.ctx, first, last=last)
            hit = _run_hits(segments, remaining, self.now_ms, distinct)
            if hit is None:
                continue
            pos, seq, live, values = hit
            if floors is not None:
                live = live & (seq > floors[pos])
            # a key may have several rows in a run: the highest sequence number wins
            best = np.full(n, -1, dtype=np.int64)
            np.maximum.at(best, pos, seq)
            newest = seq == best[pos]
            found = newest & live
            pos_parts.append(pos[found])
            value_parts.append(values.filter(pa.array(found)))
            if i:  # resolved here (found, deleted or expired): older runs cannot change it
                left = best[remaining.column("_pos").to_numpy()] < 0  # no row in this run
                remaining = remaining.filter(pa.array(left))
        schema = self.spec.value_schema
        rows = np.full(n, -1, dtype=np.int64)
        if pos_parts:
            hit_pos = np.concatenate(pos_parts)
            rows[hit_pos] = np.arange(len(hit_pos))
        index = pa.array(rows, mask=rows < 0)
        if value_parts and sum(len(v) for v in value_parts):
            values = pa.concat_arrays(value_parts).take(index)
            out_cols = [values.field(i).cast(f.type) for i, f in enumerate(schema)]
        else:
            out_cols = [pa.nulls(n, f.type) for f in schema]
        return pa.Table.from_arrays([*out_cols, pc.is_valid(index)], schema=result_schema(schema))


def key_span(key_cols: Sequence[pa.Array]) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    """The smallest and largest key of a batch in stored order (Arrow's sort: each field
    ascending, NaN and then nulls last, :func:`fsstate.format.keyorder.sort_key`), or
    ``(None, None)`` for no keys or keys Arrow cannot sort (then nothing is skipped). Every
    key of the batch lies in ``[first, last]``."""
    if not key_cols or not len(key_cols[0]):
        return None, None
    if len(key_cols) == 1 and _hashable(key_cols[0].type):
        span = _column_span(key_cols[0])
        if span is not None:
            return span
    names = [f"k{i}" for i in range(len(key_cols))]
    try:
        order = pc.sort_indices(
            pa.Table.from_arrays(list(key_cols), names=names),
            sort_keys=[(n, "ascending") for n in names],  # NaN, then nulls last by default
        )
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None, None
    lo, hi = order[0].as_py(), order[len(order) - 1].as_py()
    return tuple(c[lo].as_py() for c in key_cols), tuple(c[hi].as_py() for c in key_cols)


def _column_span(col: pa.Array) -> tuple[tuple[Any], tuple[Any]] | None:
    """:func:`key_span` of one column without a sort: its minimum and maximum, nulls last
    (None when Arrow has no min_max for the type)."""
    nulls = col.null_count
    if nulls == len(col):
        return (None,), (None,)
    try:
        lo_hi = pc.min_max(col)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return (lo_hi["min"].as_py(),), (None if nulls else lo_hi["max"].as_py(),)


def _run_hits(
    segments: Iterable[Segment], remaining: pa.Table, now_ms: int, distinct: bool = False
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], pa.Array] | None:
    """Rows of one run whose key is in ``remaining`` (key columns, then ``_pos``): requested
    positions, sequence numbers, liveness and values (None: no row). Each segment is joined
    in any row order; null key fields match nulls (:func:`fsstate.tables.resolve.null_safe`);
    ``distinct`` keys of one hashable column are matched by :func:`_index_hits` instead."""
    width = remaining.num_columns - 1
    wanted = [remaining.column(i).combine_chunks() for i in range(width)]
    fast = distinct and width == 1 and _hashable(wanted[0].type)
    pos: list[np.ndarray[Any, Any]] = []
    seq: list[np.ndarray[Any, Any]] = []
    live: list[np.ndarray[Any, Any]] = []
    values: list[pa.Array] = []
    for s in segments:
        batch = s.rows_any_order
        if not batch.num_rows:
            continue
        key_cols = batch.column("key").flatten()
        if fast and key_cols[0].type.equals(wanted[0].type):
            matched = _index_hits(key_cols[0], wanted[0], remaining.column("_pos"))
        else:
            matched = _join_hits(key_cols, wanted, remaining.column("_pos"))
        if matched is None:
            continue
        rows, hit_pos = matched
        pos.append(hit_pos)
        seq.append(batch.column(SEQ).take(rows).to_numpy())
        ok = _live(batch.column(OP).take(rows), batch.column(EXPIRES).take(rows), now_ms)
        live.append(ok.to_numpy(zero_copy_only=False))
        values.append(batch.column("value").take(rows))
    if not pos:
        return None
    return np.concatenate(pos), np.concatenate(seq), np.concatenate(live), pa.concat_arrays(values)


def _hashable(t: pa.DataType) -> bool:
    """Whether ``index_in`` matches keys of type ``t`` exactly as the join does (no floats:
    NaN; no nested types)."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
    )


def _index_hits(
    col: pa.Array, wanted: pa.Array, wanted_pos: pa.ChunkedArray
) -> tuple[pa.Array, np.ndarray[Any, Any]] | None:
    """The segment rows whose key is one of ``wanted`` (distinct; null matches null) and the
    requested positions they match (``wanted_pos``), by one ``index_in`` over the segment."""
    idx = pc.index_in(col, value_set=wanted, skip_nulls=False)
    if idx.null_count == len(idx):
        return None
    valid = idx.is_valid()
    rows = pc.indices_nonzero(valid)
    return rows, wanted_pos.take(idx.filter(valid)).to_numpy()


def _join_hits(
    key_cols: Sequence[pa.Array], wanted: Sequence[pa.Array], wanted_pos: pa.ChunkedArray
) -> tuple[pa.Array, np.ndarray[Any, Any]] | None:
    """The segment rows whose key equals a ``wanted`` key (null matches null) and the
    requested positions they match (``wanted_pos``), by one hash join."""
    left, right = null_safe([key_cols, wanted])
    names = [f"j{i}" for i in range(len(left))]
    n = len(key_cols[0])
    side = pa.Table.from_arrays(
        [*left, pa.array(np.arange(n, dtype=np.int64))], names=[*names, "_row"]
    )
    probe = pa.Table.from_arrays([*right, wanted_pos], names=[*names, "_pos"])
    hit = side.join(probe, keys=names, join_type="inner", use_threads=False)
    if not hit.num_rows:
        return None
    return hit.column("_row").combine_chunks(), hit.column("_pos").to_numpy()


def _live(ops: pa.Array, expires: pa.Array, now_ms: int) -> pa.Array:
    """Whether each op row holds a value visible at ``now_ms`` (a put, unexpired)."""
    unexpired = pc.or_kleene(pc.is_null(expires), pc.greater(expires, now_ms))
    return pc.fill_null(pc.and_kleene(pc.equal(ops, OP_PUT), unexpired), False)


class _LazyKeys(Sequence[Key]):
    """Grouping keys of a struct array, converted to tuples only if someone iterates them."""

    def __init__(self, struct: pa.StructArray) -> None:
        self._struct = struct
        self._keys: list[Key] | None = None

    def _materialize(self) -> list[Key]:
        if self._keys is None:
            self._keys = key_tuples(self._struct.flatten())
        return self._keys

    def __len__(self) -> int:
        return len(self._struct)

    def __getitem__(self, i: Any) -> Any:
        return self._materialize()[i]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._materialize())


def struct_of(state: str, what: str, table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> Any:
    """Cast a table to ``schema`` (by position) and return it as one struct array."""
    if not isinstance(table, (pa.Table, pa.RecordBatch)):
        raise SchemaError(f"state {state!r}: {what}s must be a pyarrow Table, got {type(table)}")
    if table.num_columns != len(schema):
        raise SchemaError(
            f"state {state!r}: the {what} table has {table.num_columns} column(s) "
            f"{table.schema.names}, the schema has {len(schema)} ({schema.names})"
        )
    arrays = []
    for col, field in zip(table.columns, schema):
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if not arr.type.equals(field.type):
            try:
                arr = arr.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaError(
                    f"state {state!r}: {what} column {field.name!r} has type {arr.type}, "
                    f"expected {field.type} ({exc})"
                ) from None
        if not field.nullable and arr.null_count:
            raise SchemaError(f"state {state!r}: {what} column {field.name!r} holds nulls")
        if what != "value":
            arr = normalize_key_column(arr)
        arrays.append(arr)
    return pa.StructArray.from_arrays(arrays, fields=list(schema))


def values_table(schema: pa.Schema, vals: list[Any]) -> pa.Table:
    """The result of a ``get_many``: value columns (None: not found) and ``_found``."""
    struct = pa.array(vals, type=pa.struct(list(schema)))  # one C-level conversion
    return pa.Table.from_arrays(
        [*struct.flatten(), struct.is_valid()], schema=result_schema(schema)
    )


def result_schema(schema: pa.Schema) -> pa.Schema:
    """A ``get_many`` result: the value columns, nullable, then ``_found``."""
    return pa.schema([*(f.with_nullable(True) for f in schema), pa.field("_found", pa.bool_())])
