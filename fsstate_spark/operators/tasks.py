"""The worker side of an operator stage: one ``mapInArrow`` task = one partition's epoch.

:func:`stage_task` builds the function a stage's ``mapInArrow`` runs. In the task it reads the
partition id from Spark's TaskContext, collects the partition's input batches (an epoch's rows
of one partition, as Arrow), runs the operator's epoch with :func:`fsstate.operators.run_epoch`
(store from the process's pool at the previous epoch, commit of this one) and yields the
output as Arrow batches.

Invariants:

* The task is a function of (stage settings, epoch, watermarks, partition input): a retried,
  speculative or recomputed task computes the same output, and adopts the version a previous
  attempt published (exactly once, :mod:`fsstate.operators.runner`).
* The input is cast to the stage's input schema computed on the driver (so an empty partition
  still declares its tables with the right types, and timestamps have one time zone label);
  the output is cast to the schema the driver declared to Spark.
* Rows are in the partition they belong to: the driver adds each row's partition as Spark's
  hash partitioning computes it (``_fsstate_partition``), and a task refuses rows of another
  partition (an exchange coalesced or replaced by Spark's optimizer would otherwise put keys
  into the wrong store). The column is dropped before the operator sees the rows.
* :func:`combine_task` (before the shuffle) is stateless: it touches no store.
* After its epoch committed (or adopted) its version, a task adds a receipt, the version's
  meta, to the stage's accumulator when the driver gave one: receipts are idempotent (a
  recomputed task adds the same one), so the driver may trust any receipt it gets.
* Nothing but the operator's store is touched; settings reach the worker with the function
  (picklable, no secret in its ``repr``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from fsstate.errors import ConfigError
from fsstate.operators.base import Operator
from fsstate.operators.runner import run_epoch
from fsstate.store.pool import store_pool
from fsstate_spark.operators.settings import FlowSettings
from fsstate_spark.runtime import apply_engine_settings, fileio_for

OUTPUT_BATCH_ROWS = 65_536  # rows per Arrow batch handed back to Spark
PARTITION_COL = "_fsstate_partition"  # each row's partition, as Spark's hash partitioning


@dataclass(frozen=True)
class StageSettings:
    """What every task of a stage needs (pickled with the task function)."""

    op: Operator
    config: FlowSettings
    input_schema: pa.Schema
    output_schema: pa.Schema
    writer: dict[str, Any]
    receipts: Any = None  # a Spark accumulator of (stage, partition, epoch) -> version meta
    layout: str = ""  # the stage's layout generation directory (fsstate.store.layout)


def stage_task(
    settings: StageSettings, epoch: int, late_ms: int, evict_ms: int, now_ms: int | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one stage for one epoch."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tc = TaskContext.get()
        if tc is None:  # pragma: no cover - Spark always runs mapInArrow in a task
            raise ConfigError("an fsstate operator stage runs only inside a Spark task")
        partition = tc.partitionId()
        if partition >= settings.config.partitions:
            raise ConfigError(
                f"operator {settings.op.name!r}: task of partition {partition} but the stage "
                f"has {settings.config.partitions} partitions; do not change the stage's "
                "partitioning"
            )
        config = settings.config
        apply_engine_settings(config)
        store_pool().max_idle = config.max_cached_stores
        parts = [_checked(pa.Table.from_batches([b]), partition, settings) for b in batches]
        table = (
            pa.concat_tables([_conform(p, settings.input_schema) for p in parts])
            if parts
            else (settings.input_schema.empty_table())
        )
        fileio = fileio_for(config.root, config.store.fsync)
        result = run_epoch(
            settings.op,
            fileio,
            partition,
            epoch,
            table,
            late_ms=late_ms,
            evict_ms=evict_ms,
            config=config.store,
            writer=settings.writer,
            now_ms=now_ms,
            layout=settings.layout,
        )
        if settings.receipts is not None:  # the driver learns the commit without a read
            settings.receipts.add({(settings.op.name, partition, epoch): result.meta or {}})
        out = _conform(result.output, settings.output_schema)
        yield from out.to_batches(max_chunksize=OUTPUT_BATCH_ROWS)

    return task


def combine_task(
    op: Operator, input_schema: pa.Schema, output_schema: pa.Schema, late_ms: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that combines an input partition's rows before the
    shuffle (:meth:`fsstate.operators.Operator.combine`): one pass over the partition."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [_conform(pa.Table.from_batches([b]), input_schema) for b in batches]
        table = pa.concat_tables(parts) if parts else input_schema.empty_table()
        out = _conform(op.combine(table, late_ms), output_schema)
        yield from out.to_batches(max_chunksize=OUTPUT_BATCH_ROWS)

    return task


def _checked(table: pa.Table, partition: int, settings: StageSettings) -> pa.Table:
    """``table`` without its partition column, once every row is known to belong here."""
    if PARTITION_COL not in table.column_names:
        return table
    col = table.column(PARTITION_COL)
    if table.num_rows and not pc.all(pc.equal(col, partition)).as_py():
        wrong = sorted(set(pc.unique(col).to_pylist()) - {partition})
        raise ConfigError(
            f"operator {settings.op.name!r}: the task of partition {partition} got rows of "
            f"partitions {wrong[:5]}; Spark changed the stage's partitioning (an adaptive "
            "plan coalescing or replacing its exchange): nothing was written"
        )
    return table.drop_columns([PARTITION_COL])


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema`` (columns by position; types cast, e.g. time zones)."""
    if table.schema.equals(schema):
        return table
    if table.num_columns != len(schema):
        raise ConfigError(
            f"a stage produced columns {table.column_names}, the driver declared {schema.names}"
        )
    cols = [c.cast(f.type) for c, f in zip(table.columns, schema)]
    return pa.Table.from_arrays(cols, schema=schema)
