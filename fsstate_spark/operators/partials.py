"""Combining before the stateful stage with Spark's own aggregation (generated code).

A stage whose operator combines (:meth:`fsstate.operators.base.Operator.combine`) takes, in an
epoch that combines, rows of :meth:`~fsstate.operators.base.Operator.combined_schema`: one per
group (keys, and pane for windows) of partial aggregates, the largest event time and the raw
rows folded. :func:`spark_partials` builds exactly those rows from the batch's DataFrame with
``groupBy(...).agg(...)``, so Spark reduces every input partition with its generated partial
aggregation before its shuffle, merges the partials after it, and the stage's own shuffle
then carries one row per group. Python never sees the raw rows.

Where the translation is not exact, :func:`spark_partials` gives None and the driver combines
in Python instead (``mapInArrow`` with the operator's Arrow combine): a window whose event time
is not a ``TIMESTAMP`` or an integer column (``TIMESTAMP_NTZ`` would need the session's time
zone), and a retraction aggregate summing decimals (Spark widens a decimal product).

Invariants (each the Arrow combine's, :mod:`fsstate.operators.windows` and
:mod:`fsstate.operators.retract`):

* Windows: rows with a null event time are dropped, and so are late rows (whose last window
  ends at or below the watermark of the previous epoch; a pane's windows are its rows', so
  the stage would drop them again as a late pane); a row's pane is
  ``t - pmod(t - start, pane)`` in microseconds; ``count()`` counts rows, ``count(c)`` valid
  values, ``sum`` / ``avg`` sum in the sum type (null when the group has no value), ``min`` /
  ``max`` in Spark's order (NaN above every number), which is Arrow combine's order.
* Retractions: every total is weighted by the row's ``op`` (``_d_sum`` the rows, ``_c``/``_n``
  the valid values, ``_s`` the values).
* The columns are exactly the combined schema's, in its order and types.
* A plan's Spark columns are built once per stage and input schema (:class:`SparkPartials`)
  and reused every batch: only the watermark literal and the DataFrame calls are per batch,
  since each PySpark column call is a round trip to the JVM (hundreds per plan otherwise,
  60-80 ms of every batch).
* Integer sums follow Spark: with ANSI mode on (Spark 4's default) an overflow fails the batch
  where the Arrow combine would wrap, as Spark's built-in ``sum`` fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from fsstate.operators.aggregates import Agg
from fsstate.operators.base import Operator
from fsstate.operators.combining import ROWS
from fsstate.operators.retract import OP, RetractAggregate
from fsstate.operators.windows import PANE, TMAX, WindowAggregate
from fsstate_spark.pyspark.arrow import from_arrow_schema


@dataclass(frozen=True)
class SparkPartials:
    """How Spark combines one stage's input of one schema (see the module docstring).

    Attributes:
        groups: the group columns (pane first for windows), the combined schema's first
            columns, followed by the partition column.
        aggregates: the combined schema's other columns, in its order and types.
        derived: columns added to the raw rows first (pane, event time), by name.
        last_end: for windows, the end of each row's last window in microseconds (a row is
            late when it is at or below the watermark); None for retractions.
    """

    groups: tuple[str, ...]
    aggregates: tuple[Column, ...]
    derived: dict[str, Column]
    last_end: Column | None

    def apply(self, df: DataFrame, late_ms: int, part: tuple[str, Column]) -> DataFrame:
        """``df`` combined: the group columns, the partition column ``part`` (name,
        expression over the raw rows), the aggregates.

        The partition column is a function of the keys as Spark groups them (Spark's ``hash``
        treats -0.0 as 0.0 and every NaN alike), so grouping by it too changes no group. It
        keeps the aggregate's exchange (hash partitioned by keys and partition) from looking
        like the stage's shuffle: Spark would otherwise drop the stage's ``repartition`` as
        redundant and let adaptive execution coalesce the aggregate's exchange, moving keys
        out of their partitions."""
        rows = df
        if self.last_end is not None:  # a null event time compares as null: dropped too
            rows = rows.where(self.last_end > F.lit(late_ms * 1000))
        rows = rows.withColumns({**self.derived, part[0]: part[1]})
        return rows.groupBy(*self.groups, part[0]).agg(*self.aggregates)


def spark_partials(op: Operator, input_schema: pa.Schema) -> SparkPartials | None:
    """How Spark combines ``op``'s input of ``input_schema`` into ``op.combined_schema``, or
    None where only the Arrow combine is exact (see the module docstring)."""
    combined = op.combined_schema(input_schema)
    if isinstance(op, WindowAggregate):
        plan = _window_partials(op, input_schema)
    elif isinstance(op, RetractAggregate):
        plan = _retract_totals(op, input_schema)
    else:
        return None
    if plan is None:
        return None
    groups, exprs, derived, last_end = plan
    rest = combined.names[len(groups) :]
    if combined.names[: len(groups)] != groups or sorted(rest) != sorted(exprs):  # pragma: no cover
        raise AssertionError(f"{op.name}: Spark partials {[*groups, *exprs]} vs {combined.names}")
    types = from_arrow_schema(combined, prefer_timestamp_ntz=False)
    return SparkPartials(
        groups=tuple(groups),
        aggregates=tuple(exprs[n].cast(types[n].dataType).alias(n) for n in rest),
        derived=derived,
        last_end=last_end,
    )


_Plan = tuple[list[str], dict[str, Column], dict[str, Column], Column | None]


def _window_partials(op: WindowAggregate, schema: pa.Schema) -> _Plan | None:
    t_type = schema.field(op.time).type
    if pa.types.is_timestamp(t_type) and t_type.tz is not None:  # Spark's TIMESTAMP
        t = F.unix_micros(F.col(op.time))
    elif pa.types.is_integer(t_type):
        t = F.col(op.time).cast("bigint")
    else:  # TIMESTAMP_NTZ: Spark would read it in the session's time zone
        return None
    w = op.window

    def floor(step: int) -> Column:
        return t - F.pmod(t - F.lit(w.start_us), F.lit(step))

    exprs: dict[str, Column] = {}
    for i, a in enumerate(op.aggs):
        exprs.update(_agg_partials(i, a, schema, op.name))
    exprs[TMAX] = F.max(F.col(TMAX))
    exprs[ROWS] = F.count(F.lit(1))
    derived = {PANE: floor(w.pane_us), TMAX: t}
    return [PANE, *op.keys], exprs, derived, floor(w.slide_us) + F.lit(w.size_us)


def _agg_partials(i: int, a: Agg, schema: pa.Schema, op: str) -> dict[str, Column]:
    """The partial columns of aggregate ``i`` (:meth:`Agg.partial_fields`)."""
    if a.func == "count":
        return {f"_p{i}_n": F.count(F.lit(1) if a.column is None else F.col(a.column))}
    assert a.column is not None
    col = F.col(a.column)
    if a.func == "sum":
        return {f"_p{i}_s": F.sum(col)}
    if a.func == "avg":
        return {f"_p{i}_s": F.sum(col), f"_p{i}_n": F.count(col)}
    a.result_type(schema, op)  # refuses what min / max do not take, as the Arrow combine
    return {f"_p{i}_v": F.min(col) if a.func == "min" else F.max(col)}


def _retract_totals(op: RetractAggregate, schema: pa.Schema) -> _Plan | None:
    weight = F.col(OP).cast("bigint")
    exprs: dict[str, Column] = {"_d_sum": F.sum(weight)}
    for i, a in enumerate(op.aggs):
        if a.func == "count":
            if a.column is not None:
                valid = F.col(a.column).isNotNull().cast("bigint")
                exprs[f"_c{i}_sum"] = F.sum(valid * weight)
        elif a.func in ("sum", "avg"):
            assert a.column is not None
            st = a.sum_type(schema, op.name)
            if pa.types.is_decimal(st):  # Spark widens a decimal product: Arrow combines
                return None
            v = F.col(a.column).cast(_spark_type(st))
            exprs[f"_s{i}_sum"] = F.sum(v * weight.cast(_spark_type(st)))
            exprs[f"_n{i}_sum"] = F.sum(v.isNotNull().cast("bigint") * weight)
    exprs[ROWS] = F.count(F.lit(1))
    return list(op.keys), exprs, {}, None


def _spark_type(t: pa.DataType) -> T.DataType:
    return from_arrow_schema(pa.schema([("x", t)]), prefer_timestamp_ntz=False).fields[0].dataType
