"""Stream-stream join on equal keys within an event-time range: inner and left outer.

Input: one table per epoch holding both sides (:func:`join_input_schema`): ``_side`` (0 left,
1 right), the join-key columns ``_k0 .. _kn`` (the same types on both sides), and the two sides'
rows as the struct columns ``left`` and ``right`` (null on the other side's rows). A left row
``l`` and a right row ``r`` match iff their keys are equal (nulls never match, as in SQL) and
``l.t - lower <= r.t <= l.t + upper``. Output: the struct columns ``left`` and ``right``
(``right`` null on the padded rows of a left outer join).

Tables, one pair per side (``left``, ``left_due``; ``right``, ``right_due``): the side's rows
keyed by ``(_k0.., _t_us, _id)`` (``_id`` = epoch << 32 | position, unique and the same in every
attempt) with the row and a ``_matched`` flag, and a :class:`fsstate.operators.expiry.DeadlineIndex`
on their event time.

Per epoch, Spark's order (``StreamingSymmetricHashJoinExec``), ``W`` the eviction watermark:

1. left rows at or below the late watermark are dropped; the others are matched against the
   right rows in state, matched right rows are flagged, and every left row is stored (flagged
   if it matched);
2. right rows at or below the late watermark are dropped; the others are matched against the
   left rows in state (this epoch's included, so a pair arriving together is emitted once);
   a right row is stored unless it is already evictable;
3. left rows with ``t <= W - upper - 1 ms`` leave the state; in a left outer join those never
   matched are emitted padded with nulls; right rows with ``t <= W - lower - 1 ms`` leave it.

Rows with a null key can never match; like Spark's optimizer (which infers ``isnotnull(key)``
filters and pushes them below the watermark), they are dropped before anything sees them, so
they neither enter the state nor move the watermark: on both sides of an inner join, on the
right side of a left outer join (whose null-key left rows still come out padded at eviction).

Invariants: outputs equal Spark's join with watermarks on both inputs and the same range
condition, per epoch; lookups read only the state rows of the epoch's keys (prefix lookups),
and eviction reads only what leaves (deadline indexes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError, SchemaError
from fsstate.operators.base import (
    SIDE,
    Epoch,
    Operator,
    require_time,
    row_struct,
    take_rows,
    time_us,
)
from fsstate.operators.expiry import DeadlineIndex
from fsstate.store.partition import PartitionStore

T, ID, MATCHED = "_t_us", "_id", "_matched"
HOWS = ("inner", "left_outer")


def join_key_names(n: int) -> list[str]:
    """Names of the join-key columns of the input."""
    return [f"_k{i}" for i in range(n)]


def join_input_schema(
    left: pa.Schema, right: pa.Schema, key_types: Sequence[pa.DataType]
) -> pa.Schema:
    """The input schema of a join of rows of ``left`` and ``right`` on keys of these types."""
    return pa.schema(
        [
            pa.field(SIDE, pa.int8(), nullable=False),
            *(pa.field(n, t) for n, t in zip(join_key_names(len(key_types)), key_types)),
            pa.field("left", pa.struct(list(left))),
            pa.field("right", pa.struct(list(right))),
        ]
    )


class IntervalJoin(Operator):
    """Inner or left outer stream-stream join (see the module docstring).

    Args:
        name: the operator's state name.
        left_time: the event-time field of the left rows.
        right_time: the event-time field of the right rows.
        lower_ms: how far a right row may be before its left row (``A`` in
            ``r.t >= l.t - A``).
        upper_ms: how far after (``B`` in ``r.t <= l.t + B``).
        how: ``"inner"`` or ``"left_outer"``.
    """

    def __init__(
        self,
        name: str,
        *,
        left_time: str,
        right_time: str,
        lower_ms: int,
        upper_ms: int,
        how: str = "inner",
    ) -> None:
        super().__init__(name)
        if how not in HOWS:
            raise ConfigError(f"operator {name!r}: how must be one of {HOWS}, got {how!r}")
        if not isinstance(lower_ms, int) or not isinstance(upper_ms, int) or -lower_ms > upper_ms:
            raise ConfigError(
                f"operator {name!r}: the range [t - {lower_ms} ms, t + {upper_ms} ms] is empty"
            )
        self.left_time, self.right_time = left_time, right_time
        self.lower_ms, self.upper_ms, self.how = lower_ms, upper_ms, how

    # -- schemas ----------------------------------------------------------------------------
    def _sides(self, schema: pa.Schema) -> tuple[pa.StructType, pa.StructType, list[str]]:
        for col in (SIDE, "left", "right"):
            if col not in schema.names:
                raise SchemaError(
                    f"operator {self.name!r}: a join's input has the columns {SIDE}, _k0.., "
                    f"left, right (see join_input_schema); {col!r} is missing"
                )
        keys = [n for n in schema.names if n.startswith("_k")]
        lt, rt = schema.field("left").type, schema.field("right").type
        if not keys:
            raise SchemaError(f"operator {self.name!r}: the join input has no _k0 key column")
        for side, st, tcol in (("left", lt, self.left_time), ("right", rt, self.right_time)):
            if st.get_field_index(tcol) < 0:
                raise SchemaError(
                    f"operator {self.name!r}: the {side} rows have no event-time field {tcol!r}"
                )
            require_time(self.name, pa.schema([st.field(tcol)]), tcol)
        return lt, rt, keys

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        lt, rt, _ = self._sides(input_schema)
        return pa.schema([pa.field("left", lt), pa.field("right", rt)])

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        lt, rt, keys = self._sides(input_schema)
        self.keys = keys
        self.input_schema = input_schema
        kfields = [input_schema.field(k).with_nullable(True) for k in keys]
        pk = pa.schema([*kfields, pa.field(T, pa.int64()), pa.field(ID, pa.int64())])
        self.tables: dict[str, Any] = {}
        for side, st in (("left", lt), ("right", rt)):
            value = pa.schema([*(f.with_nullable(True) for f in st), pa.field(MATCHED, pa.bool_())])
            self.tables[side] = store.value_table(side, value, key_schema=pk)
            self.tables[f"{side}_due"] = DeadlineIndex(store, f"{side}_due", pk)

    def _side_rows(self, batch: pa.Table, s: int) -> pa.Table:
        """The rows of side ``s`` that exist for the join (null keys dropped where they can
        never produce output; see the module docstring)."""
        mask = batch.column(SIDE).to_numpy() == s
        if self.how == "inner" or s == 1:
            for k in (n for n in batch.schema.names if n.startswith("_k")):
                mask &= np.asarray(pc.is_valid(batch.column(k)).to_numpy(zero_copy_only=False))
        return take_rows(batch, mask)

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        out = {}
        for name, s, tcol in (("left", 0, self.left_time), ("right", 1, self.right_time)):
            rows = self._side_rows(batch, s).column(name).combine_chunks()
            out[name] = time_us(rows.field(tcol), self.name, tcol)
        return out

    # -- one epoch ---------------------------------------------------------------------------
    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        late_us = epoch.late_ms * 1000
        out: list[pa.Table] = []
        for name, s, tcol in (("left", 0, self.left_time), ("right", 1, self.right_time)):
            rows = self._side_rows(batch, s)
            t = time_us(rows.column(name).combine_chunks().field(tcol), self.name, tcol)
            t_np = np.asarray(pc.fill_null(t, late_us).to_numpy(zero_copy_only=False))
            keep = np.asarray(pc.is_valid(t).to_numpy(zero_copy_only=False), bool) & (
                t_np > late_us
            )
            rows, t_np = take_rows(rows, keep), t_np[keep]
            ids = (epoch.epoch << 32) + np.arange(rows.num_rows, dtype=np.int64)
            mine = self._state_rows(rows, name, t_np, ids)
            if name == "left":
                pairs, matched_other, matched_mine = self._match(mine, "right", left_new=True)
                out.append(pairs)
                self._flag(self.tables["right"], matched_other)
                self._store("left", mine, matched_mine)
            else:
                pairs, matched_other, matched_mine = self._match(mine, "left", left_new=False)
                out.append(pairs)
                self._flag(self.tables["left"], matched_other)
                rwm_us = (epoch.evict_ms - self.lower_ms - 1) * 1000
                stay = mine.column(T).to_numpy() > rwm_us
                self._store("right", take_rows(mine, stay), matched_mine[stay])
        out.append(self._evict(epoch))
        schema = self.output_schema(self.input_schema)
        return pa.concat_tables(
            [o.cast(schema) for o in out if o.num_rows] or [schema.empty_table()]
        )

    def _state_rows(self, rows: pa.Table, side: str, t: np.ndarray[Any, Any], ids: Any) -> pa.Table:
        """A side's input rows as state rows: keys, time, id, the row's fields."""
        struct = rows.column(side).combine_chunks()
        cols = [rows.column(k).combine_chunks() for k in self.keys]
        cols += [pa.array(t, pa.int64()), pa.array(ids, pa.int64())]
        names = [*self.keys, T, ID]
        st = struct.type
        for i in range(st.num_fields):
            cols.append(struct.field(i))
            names.append(f"v.{st.field(i).name}")
        return pa.Table.from_arrays(cols, names=names)

    def _match(
        self, mine: pa.Table, other: str, left_new: bool
    ) -> tuple[pa.Table, pa.Table, np.ndarray[Any, Any]]:
        """Pairs of ``mine`` with the other side's state rows: (output pairs, the other side's
        matched state rows, whether each of ``mine`` matched)."""
        matched_mine = np.zeros(mine.num_rows, dtype=bool)
        schema = self.output_schema(self.input_schema)
        nk = len(self.keys)
        key_cols = [mine.column(k) for k in self.keys]
        valid = np.ones(mine.num_rows, dtype=bool)
        for c in key_cols:
            valid &= np.asarray(pc.is_valid(c).to_numpy(zero_copy_only=False), bool)
        if not valid.any():
            return schema.empty_table(), mine.slice(0, 0), matched_mine
        probe = take_rows(mine, valid).select(self.keys)
        found = self.tables[other].scan_prefixes(probe)
        if not found.num_rows:
            return schema.empty_table(), found, matched_mine
        a = mine.select(self.keys).append_column("_a", pa.array(np.arange(mine.num_rows)))
        b = found.select(list(range(nk))).rename_columns(self.keys)
        b = b.append_column("_b", pa.array(np.arange(found.num_rows)))
        hit = a.join(b, keys=self.keys, join_type="inner")  # null keys never match
        ia = hit.column("_a").to_numpy()
        ib = hit.column("_b").to_numpy()
        ta = mine.column(T).to_numpy()[ia]
        tb = found.column(T).to_numpy()[ib]
        lt, rt = (tb, ta) if not left_new else (ta, tb)
        ok = (rt >= lt - self.lower_ms * 1000) & (rt <= lt + self.upper_ms * 1000)
        ia, ib = ia[ok], ib[ok]
        order = np.lexsort((ib, ia))
        ia, ib = ia[order], ib[order]
        matched_mine[np.unique(ia)] = True
        mine_struct = self._struct(mine, "left" if left_new else "right", nk + 2)
        found_struct = self._struct(found, other, nk + 2)
        a_rows = mine_struct.take(pa.array(ia, pa.int64()))
        b_rows = found_struct.take(pa.array(ib, pa.int64()))
        left, right = (a_rows, b_rows) if left_new else (b_rows, a_rows)
        pairs = pa.Table.from_arrays([left, right], schema=schema)
        other_rows = found.take(pa.array(np.unique(ib), pa.int64()))
        return pairs, other_rows, matched_mine

    def _struct(self, rows: pa.Table, side: str, start: int) -> pa.StructArray:
        """The side's row struct from state-row columns ``start..`` (row fields)."""
        return row_struct(rows, self.input_schema.field(side).type, start)

    def _flag(self, table: Any, matched: pa.Table) -> None:
        """Set ``_matched`` on state rows (as read by a prefix lookup) not yet flagged."""
        if not matched.num_rows:
            return
        flags = matched.column(MATCHED).to_numpy(zero_copy_only=False)
        todo = take_rows(matched, ~np.asarray(flags, dtype=bool))
        if not todo.num_rows:
            return
        nk = len(self.keys) + 2
        keys = todo.select(list(range(nk)))
        values = todo.select(list(range(nk, todo.num_columns - 1)))
        values = values.append_column(MATCHED, pa.array(np.ones(todo.num_rows, dtype=bool)))
        table.put_many(keys, values)

    def _store(self, side: str, mine: pa.Table, matched: np.ndarray[Any, Any]) -> None:
        """Add a side's rows to its state and deadline index."""
        if not mine.num_rows:
            return
        nk = len(self.keys) + 2
        keys = mine.select(list(range(nk)))
        values = mine.select(list(range(nk, mine.num_columns)))
        values = values.append_column(MATCHED, pa.array(matched, pa.bool_()))
        self.tables[side].put_many(keys, values)
        self.tables[f"{side}_due"].add(mine.column(T).combine_chunks(), keys)

    def _evict(self, epoch: Epoch) -> pa.Table:
        """Remove the rows no future row can match; padded left rows for a left outer join."""
        schema = self.output_schema(self.input_schema)
        out = schema.empty_table()
        for side, bound_ms in (
            ("left", epoch.evict_ms - self.upper_ms - 1),
            ("right", epoch.evict_ms - self.lower_ms - 1),
        ):
            through = bound_ms * 1000
            index = self.tables[f"{side}_due"]
            due = index.due(through)
            if due.num_rows:
                keys = due.drop_columns(["_deadline_us"])
                table = self.tables[side]
                if side == "left" and self.how == "left_outer":
                    got = table.get_many(keys)
                    found = np.asarray(got.column("_found").to_numpy(zero_copy_only=False), bool)
                    unmatched = found & ~np.asarray(
                        pc.fill_null(got.column(MATCHED), True).to_numpy(zero_copy_only=False),
                        bool,
                    )
                    rows = take_rows(got, unmatched)
                    if rows.num_rows:
                        left = self._struct(rows, "left", 0)
                        right = pa.nulls(rows.num_rows, schema.field("right").type)
                        order = np.lexsort((keys.column(ID).to_numpy()[unmatched],))
                        out = pa.Table.from_arrays([left, right], schema=schema).take(order)
                table.delete_many(keys)
            index.purge(through)
        return out
