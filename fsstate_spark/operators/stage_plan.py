"""One micro-batch's plan of a flow's stages as Spark DataFrames: each stage's shuffle by
state partition and its ``mapInArrow`` task (:class:`StagePlanner`, the
:class:`~fsstate_spark.operators.flows.StageRunner` the flow driver walks the flow with).

Invariants:

* Every row carries its state partition as Spark's hash partitioning computes it
  (``pmod(hash(keys), partitions)``, :func:`fsstate_spark.state.keys.partition_column`) and
  the task checks it; a stage without keys uses a literal Spark hashes to partition 0.
* With as many tasks as partitions the shuffle is Spark's own on the keys; with fewer, a
  partition's rows go to the one task that owns it (the driver's routing).
* A stage that combines is preceded by Spark's aggregate into the operator's partials where
  that is exact, else by a ``mapInArrow`` combining each input partition in Python.
* With ``schemas_only`` nothing runs: each stage gives an empty DataFrame of its output schema.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from fsstate.errors import ConfigError
from fsstate.operators.base import Operator
from fsstate.operators.planning import EpochPlan
from fsstate.store.record import Writer
from fsstate_spark.operators.flows import StageSpec, arrow_schema_of
from fsstate_spark.operators.partials import SparkPartials
from fsstate_spark.operators.settings import FlowSettings
from fsstate_spark.operators.tasks import PARTITION_COL, StageSettings, combine_task, stage_task
from fsstate_spark.pyspark.arrow import from_arrow_schema
from fsstate_spark.settings import keeping_active_session
from fsstate_spark.state.keys import partition_column

__all__ = ["PlanningDriver", "StagePlanner"]


class PlanningDriver(Protocol):
    """What a plan needs of the flow driver (:class:`fsstate_spark.operators.driver.Driver`)."""

    config: FlowSettings
    partitions: int
    batch_writer: Writer
    receipts: Any
    layouts: dict[str, str]

    def zero_key(self, df: DataFrame) -> int: ...

    def owned(self, df: DataFrame) -> tuple[tuple[int, ...], ...] | None: ...

    def route(self, df: DataFrame) -> Column: ...

    def combined_op(self, spec: StageSpec, input_schema: pa.Schema) -> Operator: ...

    def spark_partials(self, spec: StageSpec, input_schema: pa.Schema) -> SparkPartials | None: ...


class StagePlanner:
    """Turns a flow's stages into one epoch's DataFrames (a
    :class:`~fsstate_spark.operators.flows.StageRunner`): each stage's input and output
    schemas, then, unless ``schemas_only`` (the flow driver's ``check``: the schemas of the
    first batch's plan, nothing runs), its shuffle and ``mapInArrow``."""

    def __init__(
        self, driver: PlanningDriver, plan: EpochPlan, now_ms: int | None, schemas_only: bool
    ) -> None:
        self.driver, self.plan, self.now_ms, self.schemas_only = driver, plan, now_ms, schemas_only

    @property
    def epoch(self) -> int:
        """The epoch planned."""
        return self.plan.epoch

    def run_stage(self, spec: StageSpec, df: DataFrame) -> DataFrame:
        """The stage's output DataFrame from its input ``df``."""
        d = self.driver
        missing = [k for k in spec.keys if k not in df.columns]
        if missing:
            raise ConfigError(
                f"operator {spec.op.name!r}: its input has no column(s) {missing} to partition "
                f"by ({df.columns})"
            )
        arrow_in = arrow_schema_of(df)
        arrow_out = spec.op.output_schema(arrow_in)
        can_combine = d.config.combine and bool(spec.keys) and spec.op.can_combine(arrow_in)
        if self.schemas_only:
            if can_combine:
                spec.op.combined_schema(arrow_in)
            out_type = from_arrow_schema(arrow_out, prefer_timestamp_ntz=False)
            with keeping_active_session():
                return df.sparkSession.createDataFrame([], out_type)
        combine, skip_until = self.plan.combine(spec.op.name) if can_combine else (False, 0)
        return self._shuffled(spec, df, arrow_in, arrow_out, combine, skip_until)

    def _shuffled(
        self,
        spec: StageSpec,
        df: DataFrame,
        arrow_in: pa.Schema,
        arrow_out: pa.Schema,
        combine: bool,
        skip_until: int,
    ) -> DataFrame:
        """The stage's shuffle by partition and its ``mapInArrow`` (combined first if so)."""
        d, late = self.driver, self.plan.late_ms
        keys = [F.col(k) for k in spec.keys] or [F.lit(d.zero_key(df)).cast("bigint")]
        # each row's partition as Spark's hash partitioning computes it: the tasks check it
        where = partition_column(keys, d.partitions)
        op, by_spark = spec.op, None
        if combine:  # by Spark's aggregation where it is exact, else by the operator in Python
            combined = op.combined_schema(arrow_in)
            partials = d.spark_partials(spec, arrow_in)
            if partials is not None:
                by_spark = partials.apply(df, late, (PARTITION_COL, where))
            else:
                combiner = combine_task(op, arrow_in, combined, late)
                spark_combined = from_arrow_schema(combined, prefer_timestamp_ntz=False)
                df = df.mapInArrow(combiner, spark_combined)
            op = d.combined_op(spec, arrow_in)
            arrow_in = combined
        owned = d.owned(df)
        settings = StageSettings(
            op,
            d.config,
            arrow_in,
            arrow_out,
            d.batch_writer,
            d.receipts,
            owned=owned,
            layout=d.layouts[spec.op.name],
            combine_skip_until=skip_until,
        )
        task = stage_task(settings, self.epoch, late, self.plan.evict_ms, self.now_ms)
        spark_out = from_arrow_schema(arrow_out, prefer_timestamp_ntz=False)
        df = by_spark if by_spark is not None else df.withColumn(PARTITION_COL, where)
        if owned is None:  # a task per partition: the shuffle is Spark's on the keys
            return df.repartition(d.partitions, *keys).mapInArrow(task, spark_out)
        # fewer tasks: a partition's rows go to the task that owns it
        return df.repartition(len(owned), d.route(df)).mapInArrow(task, spark_out)
