"""Aggregate functions as mergeable partials over Arrow columns: count, sum, min, max, avg.

An aggregate is kept as *partial* columns that merge associatively (counts and sums add,
minima and maxima take the smaller and larger), so the state of a group is a row of partials:
a batch is pre-aggregated with one Arrow ``group_by``, merged with the stored partials of its
groups element-wise, and partials of several panes combine with another ``group_by``.

=============  ==========================  ============================================
function       partial columns             result (Spark's type and name)
=============  ==========================  ============================================
``count()``    ``_pI_n`` int64 rows        bigint ``count``
``count(c)``   ``_pI_n`` int64 non-null    bigint ``count(c)``
``sum(c)``     ``_pI_s`` (result type)     bigint / double / decimal(p+10, s) ``sum(c)``
``min(c)``     ``_pI_v``                   the column's type, ``min(c)``
``max(c)``     ``_pI_v``                   the column's type, ``max(c)``
``avg(c)``     ``_pI_s`` double, ``_pI_n``  double ``avg(c)``
=============  ==========================  ============================================

Invariants: nulls are skipped (a sum, min, max or avg over no non-null value is null, a count
is 0), as in Spark; merging partials in any grouping gives the same result (floating-point
sums up to rounding, which the runner's canonical input order makes reproducible).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError, SchemaError

FUNCS = ("count", "sum", "min", "max", "avg")


@dataclass(frozen=True)
class Agg:
    """One aggregate: ``func`` over ``column`` (None: ``count()`` of rows), named ``alias`` or
    Spark's default name (``count``, ``sum(x)``...)."""

    func: str
    column: str | None = None
    alias: str | None = None

    def __post_init__(self) -> None:
        if self.func not in FUNCS:
            raise ConfigError(f"aggregate {self.func!r} is not one of {FUNCS}")
        if self.column is None and self.func != "count":
            raise ConfigError(f"aggregate {self.func}() needs a column")

    @property
    def name(self) -> str:
        """The output column name."""
        if self.alias:
            return self.alias
        return "count" if self.column is None else f"{self.func}({self.column})"

    def _in_type(self, schema: pa.Schema, op: str) -> pa.DataType:
        assert self.column is not None
        if self.column not in schema.names:
            raise SchemaError(
                f"operator {op!r}: aggregate {self.name} reads column {self.column!r}, which "
                f"the input lacks ({schema.names})"
            )
        return schema.field(self.column).type

    def result_type(self, schema: pa.Schema, op: str) -> pa.DataType:
        """The result type for input of ``schema`` (raises SchemaError naming the column)."""
        if self.func == "count":
            return pa.int64()
        t = self._in_type(schema, op)
        numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        if self.func == "sum":
            if pa.types.is_integer(t):
                return pa.int64()
            if pa.types.is_floating(t):
                return pa.float64()
            if pa.types.is_decimal(t):
                return pa.decimal128(min(38, t.precision + 10), t.scale)
        elif self.func == "avg":
            if numeric and not pa.types.is_decimal(t):
                return pa.float64()
        elif not pa.types.is_nested(t):
            return t
        raise SchemaError(
            f"operator {op!r}: {self.func}({self.column}) over type {t} is not supported"
        )

    def partial_fields(self, i: int, schema: pa.Schema, op: str) -> list[pa.Field]:
        """The partial columns of aggregate number ``i``."""
        out_t = self.result_type(schema, op)
        if self.func == "count":
            return [pa.field(f"_p{i}_n", pa.int64())]
        if self.func == "sum":
            return [pa.field(f"_p{i}_s", out_t)]
        if self.func == "avg":
            return [pa.field(f"_p{i}_s", pa.float64()), pa.field(f"_p{i}_n", pa.int64())]
        return [pa.field(f"_p{i}_v", out_t)]


def partial_schema(aggs: Sequence[Agg], schema: pa.Schema, op: str) -> pa.Schema:
    """The partial columns of all aggregates (nullable)."""
    return pa.schema(
        [f.with_nullable(True) for i, a in enumerate(aggs) for f in a.partial_fields(i, schema, op)]
    )


def batch_partials(
    table: pa.Table, group_cols: Sequence[str], aggs: Sequence[Agg], op: str
) -> pa.Table:
    """Pre-aggregate ``table`` by ``group_cols``: the group columns, then the partials."""
    schema = table.schema
    cols: dict[str, pa.ChunkedArray] = {g: table.column(g) for g in group_cols}
    specs: dict[str, tuple[str | list[str], str, pc.FunctionOptions | None]] = {}
    outputs: list[tuple[str, str]] = []  # (partial column, aggregate output name)

    def add(src: str | list[str], func: str, opts: pc.FunctionOptions | None, out: str) -> None:
        produced = "count_all" if func == "count_all" else f"{src}_{func}"
        specs[produced] = (src, func, opts)
        outputs.append((out, produced))

    valid = pc.CountOptions(mode="only_valid")
    for i, a in enumerate(aggs):
        if a.func == "count" and a.column is None:
            add([], "count_all", None, f"_p{i}_n")
            continue
        t = a.result_type(schema, op)
        src = table.column(a.column)
        name = f"_in{i}"
        if a.func == "count":
            cols[name] = src
            add(name, "count", valid, f"_p{i}_n")
        elif a.func in ("sum", "avg"):
            cols[name] = src.cast(t)
            add(name, "sum", pc.ScalarAggregateOptions(min_count=1), f"_p{i}_s")
            if a.func == "avg":
                add(name, "count", valid, f"_p{i}_n")
        else:
            cols[name] = src
            add(name, a.func, pc.ScalarAggregateOptions(min_count=1), f"_p{i}_v")
    grouped = (
        pa.table(cols).group_by(list(group_cols), use_threads=False).aggregate(list(specs.values()))
    )
    ordered = [grouped.column(g) for g in group_cols] + [grouped.column(p) for _, p in outputs]
    return pa.Table.from_arrays(ordered, names=[*group_cols, *(o for o, _ in outputs)])


def combine_partials(table: pa.Table, group_cols: Sequence[str], aggs: Sequence[Agg]) -> pa.Table:
    """Combine rows of partials by ``group_cols`` (e.g. the panes of one window)."""
    specs: list[tuple[str, str, pc.FunctionOptions | None]] = []
    produced: list[tuple[str, str]] = []
    for i, a in enumerate(aggs):
        for col in _partial_names(i, a):
            kind = col.rsplit("_", 1)[1]
            if kind == "n":
                func, opts = "sum", pc.ScalarAggregateOptions(min_count=0)
            elif kind == "s":
                func, opts = "sum", pc.ScalarAggregateOptions(min_count=1)
            else:
                func, opts = a.func, pc.ScalarAggregateOptions(min_count=1)
            specs.append((col, func, opts))
            produced.append((col, f"{col}_{func}"))
    grouped = table.group_by(list(group_cols), use_threads=False).aggregate(specs)
    ordered = [grouped.column(g) for g in group_cols] + [
        grouped.column(p).cast(table.schema.field(c).type) for c, p in produced
    ]
    return pa.Table.from_arrays(ordered, names=[*group_cols, *(c for c, _ in produced)])


def _partial_names(i: int, a: Agg) -> list[str]:
    if a.func == "count":
        return [f"_p{i}_n"]
    if a.func == "sum":
        return [f"_p{i}_s"]
    if a.func == "avg":
        return [f"_p{i}_s", f"_p{i}_n"]
    return [f"_p{i}_v"]


def merge_partials(old: pa.Table, new: pa.Table, aggs: Sequence[Agg]) -> list[pa.Array]:
    """Element-wise merge of two aligned tables of partials (a null partial is "nothing")."""
    out: list[pa.Array] = []
    for i, a in enumerate(aggs):
        for col in _partial_names(i, a):
            x = old.column(col).combine_chunks()
            y = new.column(col).combine_chunks().cast(x.type)
            kind = col.rsplit("_", 1)[1]
            if kind == "n":
                out.append(pc.add(pc.fill_null(x, 0), pc.fill_null(y, 0)))
            elif kind == "s":
                zero = pa.scalar(0).cast(x.type)
                both = pc.add(pc.fill_null(x, zero), pc.fill_null(y, zero)).cast(x.type)
                either = pc.or_(pc.is_valid(x), pc.is_valid(y))
                out.append(pc.if_else(either, both, pa.nulls(len(x), x.type)))
            elif a.func == "min":
                out.append(pc.min_element_wise(x, y, skip_nulls=True))
            else:
                out.append(pc.max_element_wise(x, y, skip_nulls=True))
    return out


def finalize(partials: pa.Table, aggs: Sequence[Agg], schema: pa.Schema, op: str) -> list[pa.Array]:
    """The result column of each aggregate from its partials."""
    out: list[pa.Array] = []
    for i, a in enumerate(aggs):
        t = a.result_type(schema, op)
        if a.func == "count":
            out.append(pc.fill_null(partials.column(f"_p{i}_n"), 0).combine_chunks())
        elif a.func == "sum":
            out.append(partials.column(f"_p{i}_s").combine_chunks().cast(t))
        elif a.func == "avg":
            s = partials.column(f"_p{i}_s").combine_chunks()
            n = partials.column(f"_p{i}_n").combine_chunks().cast(pa.float64())
            n = pc.if_else(pc.equal(n, 0.0), pa.nulls(len(n), pa.float64()), n)
            out.append(pc.divide(s, n))
        else:
            out.append(partials.column(f"_p{i}_v").combine_chunks().cast(t))
    return out
