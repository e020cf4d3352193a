"""Aggregate functions as mergeable partials over Arrow columns: count, sum, min, max, avg.

An aggregate is kept as *partial* columns that merge associatively (counts and sums add,
minima and maxima take the smaller and larger), so the state of a group is a row of partials:
a batch is pre-aggregated with one Arrow ``group_by``, merged with the stored partials of its
groups element-wise, and partials of several panes combine with another ``group_by``.

Types, results and names are Spark's (``Sum``, ``Average``, ``Min``, ``Max``, ``Count``):

=============  ===========================  ===============================================
function       input types                  result (Spark's type and name)
=============  ===========================  ===============================================
``count()``    (rows)                       bigint ``count``
``count(c)``   any                          bigint ``count(c)``: the non-null values
``sum(c)``     integers                     bigint ``sum(c)``
``sum(c)``     float, double                double
``sum(c)``     decimal(p, s)                decimal(min(38, p + 10), s), exact
``avg(c)``     integers, float, double      double ``avg(c)``
``avg(c)``     decimal(p, s)                decimal(min(38, p + 4), min(38, s + 4)): the
                                            exact quotient rounded half up (away from 0)
``min(c)``     numbers, decimal, string,    the column's type ``min(c)`` / ``max(c)``;
``max(c)``     binary, boolean, date,       false < true, NaN above every number (as
               timestamp                    Spark: ``max`` of 1.0 and NaN is NaN)
=============  ===========================  ===============================================

Partial columns of aggregate ``I``: ``_pI_n`` (int64 count: rows, non-null values, or the
values an ``avg`` summed), ``_pI_s`` (the sum: the ``sum`` result type; double for ``avg`` of
numbers, decimal(min(38, p + 10), s) for ``avg`` of decimals, Spark's sum buffer) and ``_pI_v``
(the extreme, of the column's type).

Anything else is refused by :meth:`Agg.result_type` with a ConfigError naming the operator, the
aggregate and the column, before anything runs: ``sum`` / ``avg`` over strings, booleans,
dates or timestamps (Spark refuses booleans and dates; it would cast strings and timestamps to
double, so cast the column to the number you mean), ``min`` / ``max`` over nested, interval or
time-of-day types, decimals wider than decimal128(38, s).

Invariants: nulls are skipped (a sum, min, max or avg over no non-null value is null, a count
is 0), as in Spark; merging partials in any grouping gives the same result (exact for
integers and decimals; floating-point sums up to rounding, which the runner's canonical input
order makes reproducible). A decimal sum beyond its result precision fails the epoch (Spark in
ANSI mode fails the query); an integer sum beyond bigint wraps (Spark's non-ANSI behaviour).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError, SchemaError

FUNCS = ("count", "sum", "min", "max", "avg")
MAX_PRECISION = 38  # Spark's DecimalType.MAX_PRECISION (and MAX_SCALE)

# (source column, Arrow hash function, options, output column) of one grouped aggregation
Spec = tuple[str, str, pc.FunctionOptions | None, str]


def _is_number(t: pa.DataType) -> bool:
    """Spark's NumericType as Arrow carries it (integers, float, double, decimal128 <= 38)."""
    if pa.types.is_integer(t) or t in (pa.float32(), pa.float64()):
        return True
    return bool(pa.types.is_decimal128(t))  # Arrow caps decimal128 at 38 digits, as Spark


def _is_orderable(t: pa.DataType) -> bool:
    """The atomic types ``min`` / ``max`` take (their Arrow kernels exist, Spark orders them)."""
    return (
        _is_number(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or pa.types.is_date64(t)
        or pa.types.is_timestamp(t)
    )


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

    def _refuse(self, t: pa.DataType, op: str, why: str) -> ConfigError:
        return ConfigError(
            f"operator {op!r}: aggregate {self.name!r} ({self.func} over column "
            f"{self.column!r} of type {t}) is refused: {why}"
        )

    def result_type(self, schema: pa.Schema, op: str) -> pa.DataType:
        """The result type for input of ``schema`` (Spark's; see the module docstring).

        Raises:
            SchemaError: the input lacks the column.
            ConfigError: the aggregate does not take the column's type.
        """
        if self.func == "count":
            if self.column is not None:
                self._in_type(schema, op)
            return pa.int64()
        t = self._in_type(schema, op)
        if self.func in ("sum", "avg"):
            if not _is_number(t):
                raise self._refuse(
                    t,
                    op,
                    f"{self.func} takes numbers (integers, float, double, decimal128 up to "
                    f"precision {MAX_PRECISION}); Spark refuses booleans and dates and would "
                    "cast strings and timestamps to double: cast the column to the number "
                    "you mean (e.g. double, or bigint microseconds for a timestamp)",
                )
            if pa.types.is_decimal(t):
                if self.func == "sum":
                    return pa.decimal128(min(MAX_PRECISION, t.precision + 10), t.scale)
                return pa.decimal128(
                    min(MAX_PRECISION, t.precision + 4), min(MAX_PRECISION, t.scale + 4)
                )
            if self.func == "sum" and pa.types.is_integer(t):
                return pa.int64()
            return pa.float64()
        if not _is_orderable(t):
            raise self._refuse(
                t,
                op,
                f"{self.func} takes numbers, decimal128, strings, binary, booleans, dates and "
                "timestamps",
            )
        return t

    def sum_type(self, schema: pa.Schema, op: str) -> pa.DataType:
        """The type of the running sum of a ``sum`` or ``avg`` (Spark's sum buffer)."""
        t = self.result_type(schema, op)
        if self.func == "avg" and pa.types.is_decimal(t):
            s = self._in_type(schema, op)
            return pa.decimal128(min(MAX_PRECISION, s.precision + 10), s.scale)
        return t

    def partial_fields(self, i: int, schema: pa.Schema, op: str) -> list[pa.Field]:
        """The partial columns of aggregate number ``i``."""
        out_t = self.result_type(schema, op)
        if self.func == "count":
            return [pa.field(f"_p{i}_n", pa.int64())]
        if self.func == "sum":
            return [pa.field(f"_p{i}_s", out_t)]
        if self.func == "avg":
            st = self.sum_type(schema, op)
            return [pa.field(f"_p{i}_s", st), pa.field(f"_p{i}_n", pa.int64())]
        return [pa.field(f"_p{i}_v", out_t)]


def partial_schema(aggs: Sequence[Agg], schema: pa.Schema, op: str) -> pa.Schema:
    """The partial columns of all aggregates (nullable)."""
    return pa.schema(
        [f.with_nullable(True) for i, a in enumerate(aggs) for f in a.partial_fields(i, schema, op)]
    )


def _grouped(
    cols: Mapping[str, pa.Array | pa.ChunkedArray], group_cols: Sequence[str], specs: Sequence[Spec]
) -> pa.Table:
    """Group the columns by ``group_cols`` and aggregate: the group columns, then one column per
    spec named by its output. A ``max`` over floating point puts NaN above every number
    (Spark's order; Arrow's kernel skips NaN unless there is nothing else); a ``min`` already
    agrees (NaN only when the group has nothing but NaN)."""
    table_cols = dict(cols)
    arrow_specs: list[tuple[str | list[str], str, pc.FunctionOptions | None]] = []
    produced: list[tuple[str, str, str | None]] = []  # (output, Arrow's column, NaN flag column)
    for src, func, opts, out in specs:
        if func == "count_all":
            arrow_specs.append(([], "count_all", None))
            produced.append((out, "count_all", None))
            continue
        arrow_specs.append((src, func, opts))
        nan = None
        if func == "max" and pa.types.is_floating(table_cols[src].type):
            nan_src = f"{src}_nan"
            table_cols[nan_src] = pc.is_nan(table_cols[src])
            arrow_specs.append((nan_src, "any", pc.ScalarAggregateOptions(min_count=0)))
            nan = f"{nan_src}_any"
        produced.append((out, f"{src}_{func}", nan))
    table = pa.table(table_cols)
    got = table.group_by(list(group_cols), use_threads=False).aggregate(arrow_specs)
    arrays = [got.column(g) for g in group_cols]
    for _, col, nan in produced:
        arr = got.column(col)
        if nan is not None:
            flag = pc.fill_null(got.column(nan), False)
            arr = pc.if_else(flag, pa.scalar(float("nan"), arr.type), arr)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=[*group_cols, *(o for o, _, _ in produced)])


def batch_partials(
    table: pa.Table,
    group_cols: Sequence[str],
    aggs: Sequence[Agg],
    op: str,
    max_of: tuple[str, str] | None = None,
    rows_as: str | None = None,
) -> pa.Table:
    """Pre-aggregate ``table`` by ``group_cols``: the group columns, then the partials (and,
    with ``max_of=(column, name)``, the group's largest ``column`` named ``name``, then, with
    ``rows_as``, the group's row count named so)."""
    schema = table.schema
    cols: dict[str, pa.ChunkedArray] = {g: table.column(g) for g in group_cols}
    specs: list[Spec] = []
    valid = pc.CountOptions(mode="only_valid")
    some = pc.ScalarAggregateOptions(min_count=1)
    for i, a in enumerate(aggs):
        if a.func == "count" and a.column is None:
            specs.append(("", "count_all", None, f"_p{i}_n"))
            continue
        src = table.column(a.column)
        name = f"_in{i}"
        if a.func == "count":
            cols[name] = src
            specs.append((name, "count", valid, f"_p{i}_n"))
        elif a.func in ("sum", "avg"):
            cols[name] = src.cast(a.sum_type(schema, op))
            specs.append((name, "sum", some, f"_p{i}_s"))
            if a.func == "avg":
                specs.append((name, "count", valid, f"_p{i}_n"))
        else:
            a.result_type(schema, op)
            cols[name] = src
            specs.append((name, a.func, some, f"_p{i}_v"))
    if max_of is not None:
        cols["_max_of"] = table.column(max_of[0])
        specs.append(("_max_of", "max", some, max_of[1]))
    if rows_as is not None:
        cols["_rows_of"] = table.column(group_cols[0])
        specs.append(("_rows_of", "count", pc.CountOptions(mode="all"), rows_as))
    return _grouped(cols, group_cols, specs)


def combine_partials(table: pa.Table, group_cols: Sequence[str], aggs: Sequence[Agg]) -> pa.Table:
    """Combine rows of partials by ``group_cols`` (e.g. the panes of one window)."""
    specs: list[Spec] = []
    for i, a in enumerate(aggs):
        for col in _partial_names(i, a):
            kind = col.rsplit("_", 1)[1]
            if kind == "n":
                specs.append((col, "sum", pc.ScalarAggregateOptions(min_count=0), col))
            elif kind == "s":
                specs.append((col, "sum", pc.ScalarAggregateOptions(min_count=1), col))
            else:
                specs.append((col, a.func, pc.ScalarAggregateOptions(min_count=1), col))
    cols = {c: table.column(c) for c in [*group_cols, *(s[0] for s in specs)]}
    got = _grouped(cols, group_cols, specs)
    return pa.Table.from_arrays(
        [got.column(g) for g in group_cols]
        + [got.column(c).cast(table.schema.field(c).type) for _, _, _, c in specs],
        names=[*group_cols, *(c for _, _, _, c in specs)],
    )


def _partial_names(i: int, a: Agg) -> list[str]:
    if a.func == "count":
        return [f"_p{i}_n"]
    if a.func == "sum":
        return [f"_p{i}_s"]
    if a.func == "avg":
        return [f"_p{i}_s", f"_p{i}_n"]
    return [f"_p{i}_v"]


def add_sums(x: pa.Array | pa.ChunkedArray, y: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``x + y`` element-wise, typed as ``x``, a null being "nothing" (null only where both are):
    exact for decimals (no zero literal of a narrower type is ever cast)."""
    x = x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x
    y = y.combine_chunks() if isinstance(y, pa.ChunkedArray) else y
    y = y.cast(x.type)
    out: pa.Array = pc.coalesce(pc.add(x, y).cast(x.type), x, y)
    return out


def _less(a: pa.Array, b: pa.Array) -> pa.Array:
    """``a < b`` in Spark's order (NaN above every number); null where either is null."""
    lt: pa.Array = pc.less(a, b)
    if pa.types.is_floating(a.type):
        lt = pc.or_(lt, pc.and_(pc.is_nan(b), pc.invert(pc.is_nan(a))))
    return lt


def extreme_of(x: pa.Array, y: pa.Array, func: str) -> pa.Array:
    """Element-wise ``min`` / ``max`` of two arrays of one type in Spark's order, nulls skipped:
    works for every type :meth:`Agg.result_type` lets through (Arrow's ``min_element_wise``
    has no kernel for booleans or zoned timestamps, and skips NaN)."""
    better = _less(y, x) if func == "min" else _less(x, y)  # y strictly beats x
    take_y = pc.or_(pc.is_null(x), pc.and_(pc.is_valid(y), pc.fill_null(better, False)))
    out: pa.Array = pc.if_else(take_y, y, x)
    return out


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
                out.append(add_sums(x, y))
            else:
                out.append(extreme_of(x, y, a.func))
    return out


def average(
    s: pa.Array | pa.ChunkedArray, n: pa.Array | pa.ChunkedArray, t: pa.DataType
) -> pa.Array:
    """``s / n`` as Spark's ``avg`` returns it in type ``t``: null where ``n`` is 0 or null;
    for decimals the exact quotient rounded half up to ``t``'s scale (Spark's
    ``DecimalDivideWithOverflowCheck``), for numbers a double division."""
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    n = n.combine_chunks() if isinstance(n, pa.ChunkedArray) else n
    if pa.types.is_decimal(t):
        values = [_decimal_quotient(v, c, t.scale) for v, c in zip(s.to_pylist(), n.to_pylist())]
        return pa.array(values, t)
    nf = pc.fill_null(n, 0).cast(pa.float64())
    nf = pc.if_else(pc.equal(nf, 0.0), pa.nulls(len(nf), pa.float64()), nf)
    out: pa.Array = pc.divide(s.cast(pa.float64()), nf)
    return out


def _decimal_quotient(total: Decimal | None, count: int | None, scale: int) -> Decimal | None:
    """``total / count`` rounded half up (away from zero) to ``scale`` digits, in exact integer
    arithmetic (no intermediate rounding)."""
    if total is None or not count:
        return None
    sign, digits, exp = total.as_tuple()
    assert isinstance(exp, int)
    unscaled = int("".join(map(str, digits)) or "0")  # |total| * 10 ** -exp
    shift = scale + exp  # |total| * 10 ** scale == unscaled * 10 ** shift
    num = unscaled * 10**shift if shift >= 0 else unscaled
    den = count if shift >= 0 else count * 10**-shift
    q, r = divmod(num, den)
    if 2 * r >= den:
        q += 1
    return Decimal((1 if sign and q else 0, tuple(map(int, str(q))), -scale))


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
            out.append(average(partials.column(f"_p{i}_s"), partials.column(f"_p{i}_n"), t))
        else:
            out.append(partials.column(f"_p{i}_v").combine_chunks().cast(t))
    return out


def nan_equal(x: pa.Array | pa.ChunkedArray, y: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Element-wise: equal, both null, or (floating point) both NaN."""
    same = pc.or_(pc.fill_null(pc.equal(x, y), False), pc.and_(pc.is_null(x), pc.is_null(y)))
    if pa.types.is_floating(x.type):
        both_nan = pc.fill_null(pc.and_(pc.is_nan(x), pc.is_nan(y)), False)
        same = pc.or_(same, both_nan)
    out: pa.Array = same.combine_chunks() if isinstance(same, pa.ChunkedArray) else same
    return out
