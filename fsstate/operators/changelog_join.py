"""Inner join of two change streams: rows come and go (``op`` +1 / -1), so does the join.

Input: as :mod:`fsstate.operators.interval_join` (``_side``, ``_k0..``, ``left``, ``right``) plus
``op`` (int8: +1 insert, -1 delete). Output: ``left``, ``right`` and ``op``: the changes of the
join result, one row per unit of multiplicity.

Tables: ``left`` and ``right``, value tables keyed by ``(_k0.., *row fields)`` holding the
multiplicity of each distinct row (a multiset of the side's rows, grouped by join key first so
one prefix lookup finds a key's rows).

Per epoch, the incremental join ``Δ(L ⋈ R) = ΔL ⋈ R + L' ⋈ ΔR`` (``L'`` = ``L + ΔL``):

1. the left changes are netted per distinct row and clamped so no count goes below zero (a
   delete of a row that is not there retracts nothing); they are joined with the right rows in
   state and applied to the left state;
2. the right changes likewise, joined with the left state that now holds the left changes.

Invariants: after every epoch the sum of all emitted changes equals the inner join of the two
inputs' current contents (a multiset), whatever the order of changes inside an epoch; rows
with a null join key never match (SQL equality); only the state rows of the epoch's keys are
read. There is no time bound: the state holds each side's current rows (the seed-003 query).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import SchemaError
from fsstate.operators.base import SIDE, Epoch, Operator, row_struct, take_rows
from fsstate.store.partition import PartitionStore

OP = "op"
COUNT = "_count"


class ChangelogJoin(Operator):
    """Inner join of two change streams on the ``_k`` key columns (see the module docstring).

    Args:
        name: the operator's state name.
    """

    def _sides(self, schema: pa.Schema) -> tuple[pa.StructType, pa.StructType, list[str]]:
        for col in (SIDE, "left", "right", OP):
            if col not in schema.names:
                raise SchemaError(
                    f"operator {self.name!r}: a changelog join's input has the columns {SIDE}, "
                    f"_k0.., left, right, op; {col!r} is missing"
                )
        keys = [n for n in schema.names if n.startswith("_k")]
        if not keys:
            raise SchemaError(f"operator {self.name!r}: the join input has no _k0 key column")
        return schema.field("left").type, schema.field("right").type, keys

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        lt, rt, _ = self._sides(input_schema)
        return pa.schema([("left", lt), ("right", rt), pa.field(OP, pa.int8(), nullable=False)])

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        lt, rt, keys = self._sides(input_schema)
        self.keys, self.input_schema = keys, input_schema
        kf = [input_schema.field(k).with_nullable(True) for k in keys]
        count = pa.schema([pa.field(COUNT, pa.int64())])
        self.tables: dict[str, Any] = {}
        for side, st in (("left", lt), ("right", rt)):
            fields = [f.with_name(f"{side}.{f.name}").with_nullable(True) for f in st]
            self.tables[side] = store.value_table(side, count, key_schema=pa.schema(kf + fields))

    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        side = batch.column(SIDE).to_numpy()
        out = []
        for name, s, other in (("left", 0, "right"), ("right", 1, "left")):
            changes = self._net(take_rows(batch, side == s), name)
            if changes.num_rows:
                out.append(self._join(changes, name, other))
                self._apply(changes, name)
        schema = self.output_schema(self.input_schema)
        return pa.concat_tables([o for o in out if o.num_rows] or [schema.empty_table()])

    def _net(self, rows: pa.Table, side: str) -> pa.Table:
        """A side's changes netted per distinct row and clamped at the stored count: the key
        columns of the side's table, then ``_delta`` (non-zero)."""
        table = self.tables[side]
        names = table.spec.key_schema.names
        if not rows.num_rows:
            return pa.table({n: pa.array([], f.type) for n, f in zip(names, table.spec.key_schema)})
        struct = rows.column(side).combine_chunks()
        cols = [rows.column(k).combine_chunks() for k in self.keys]
        cols += [struct.field(i) for i in range(struct.type.num_fields)]
        op = rows.column(OP).combine_chunks().cast(pa.int64())
        flat = pa.Table.from_arrays([*cols, op], names=[*names, "_d"])
        net = flat.group_by(names, use_threads=False).aggregate([("_d", "sum")])
        net = net.select([*names, "_d_sum"])
        old = table.get_many(net.select(names))
        have = pc.fill_null(old.column(COUNT), 0).to_numpy(zero_copy_only=False)
        delta = net.column("_d_sum").to_numpy()
        delta = np.maximum(delta, -have)  # a delete of a row not there retracts nothing
        net = net.drop_columns(["_d_sum"]).append_column("_delta", pa.array(delta, pa.int64()))
        net = net.append_column("_have", pa.array(have, pa.int64()))
        return take_rows(net, delta != 0)

    def _apply(self, changes: pa.Table, side: str) -> None:
        table = self.tables[side]
        names = table.spec.key_schema.names
        new = changes.column("_have").to_numpy() + changes.column("_delta").to_numpy()
        keep = new > 0
        if keep.any():
            table.put_many(
                take_rows(changes.select(names), keep), pa.table({COUNT: pa.array(new[keep])})
            )
        if (~keep).any():
            table.delete_many(take_rows(changes.select(names), ~keep))

    def _join(self, changes: pa.Table, mine: str, other: str) -> pa.Table:
        """The changes of ``mine`` joined with ``other``'s state: output rows, ``op`` signed,
        repeated by the product of the multiplicities."""
        schema = self.output_schema(self.input_schema)
        nk = len(self.keys)
        valid = np.ones(changes.num_rows, dtype=bool)
        for k in self.keys:
            valid &= np.asarray(pc.is_valid(changes.column(k)).to_numpy(zero_copy_only=False), bool)
        if not valid.any():
            return schema.empty_table()
        probe = take_rows(changes, valid)
        found = self.tables[other].scan_prefixes(probe.select(self.keys))
        if not found.num_rows:
            return schema.empty_table()
        a = probe.select(self.keys).append_column("_a", pa.array(np.arange(probe.num_rows)))
        b = found.select(list(range(nk))).rename_columns(self.keys)
        b = b.append_column("_b", pa.array(np.arange(found.num_rows)))
        hit = a.join(b, keys=self.keys, join_type="inner")
        ia, ib = hit.column("_a").to_numpy(), hit.column("_b").to_numpy()
        order = np.lexsort((ib, ia))
        ia, ib = ia[order], ib[order]
        mult = probe.column("_delta").to_numpy()[ia] * found.column(COUNT).to_numpy()[ib]
        reps = np.abs(mult)
        ia, ib = np.repeat(ia, reps), np.repeat(ib, reps)
        sign = np.repeat(np.sign(mult), reps).astype(np.int8)
        a_rows = self._struct(probe, mine, nk).take(pa.array(ia, pa.int64()))
        b_rows = self._struct(found, other, nk).take(pa.array(ib, pa.int64()))
        left, right = (a_rows, b_rows) if mine == "left" else (b_rows, a_rows)
        return pa.Table.from_arrays([left, right, pa.array(sign, pa.int8())], schema=schema)

    def _struct(self, rows: pa.Table, side: str, start: int) -> pa.StructArray:
        """The side's row struct from state-row columns ``start..`` (row fields)."""
        return row_struct(rows, self.input_schema.field(side).type, start)
