"""The worker side of an operator stage: one ``mapInArrow`` task runs the epochs of its state
partitions.

:func:`stage_task` builds the function a stage's ``mapInArrow`` runs. In the task it reads the
task's partition id from Spark's TaskContext, collects its input batches (an epoch's rows of the
state partitions the task owns, as Arrow), and runs each owned partition's epoch with
:func:`fsstate.operators.run_epoch` (store from the process's pool at the previous epoch,
commit of this one), yielding the outputs as Arrow batches. A stage has ``partitions`` state
partitions (key groups: where keys live) and runs in ``tasks`` Spark tasks; with as many tasks
as partitions each task owns its own partition, with fewer task ``t`` owns the partitions
``p`` with ``p mod tasks = t`` (``owned``: as many per task as possible), so a batch
pays a Spark task (scheduling, the Python worker round trip) per task, not per partition.

Invariants:

* The task is a function of (stage settings, epoch, watermarks, partition input): a retried,
  speculative or recomputed task computes the same output, and adopts the version a previous
  attempt published (exactly once, :mod:`fsstate.operators.runner`).
* The input is cast to the stage's input schema computed on the driver (so an empty partition
  still declares its tables with the right types, and timestamps have one time zone label);
  the output is cast to the schema the driver declared to Spark.
* Rows are in the partition they belong to: the driver adds each row's partition as Spark's
  hash partitioning computes it (``_fsstate_partition``), and a task refuses rows of a
  partition it does not own (an exchange coalesced or replaced by Spark's optimizer would
  otherwise put keys into the wrong store). The column is dropped before the operator sees
  the rows. Every owned partition's epoch commits, with rows or without.
* :func:`combine_task` (before the shuffle) is stateless: it touches no store.
* After its epoch committed (or adopted) its version, a task adds a receipt, the version's
  meta with its summary and the commit's duration (:mod:`fsstate_spark.receipts`), to the
  stage's accumulator when the driver gave one: receipts are idempotent (a recomputed task
  adds the same one), so the driver may trust any receipt it gets.
* Nothing but the operator's store is touched; settings reach the worker with the function
  (picklable, no secret in its ``repr``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from fsstate.errors import ConfigError
from fsstate.operators.base import Operator
from fsstate.operators.runner import EpochResult, run_epoch
from fsstate.osmem import task_collector
from fsstate.store.pool import store_pool
from fsstate.store.record import Writer
from fsstate_spark.operators.settings import FlowSettings
from fsstate_spark.receipts import COMMIT_MS_KEY, SUMMARY_KEY
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
    writer: Writer
    receipts: Any = None  # a Spark accumulator of (stage, partition, epoch) -> version meta
    owned: tuple[tuple[int, ...], ...] | None = None  # task -> its state partitions (None: itself)
    layout: str = ""  # the stage's layout generation directory (fsstate.store.layout)
    combine_skip_until: int = 0  # recorded with the combine record (fsstate.operators.combining)


def stage_task(
    settings: StageSettings, epoch: int, late_ms: int, evict_ms: int, now_ms: int | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one stage for one epoch."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tc = TaskContext.get()
        if tc is None:  # pragma: no cover - Spark always runs mapInArrow in a task
            raise ConfigError("an fsstate operator stage runs only inside a Spark task")
        task_id = tc.partitionId()
        config = settings.config
        owned = (task_id,) if settings.owned is None else _owned(settings, task_id)
        if owned and owned[-1] >= config.partitions:
            raise ConfigError(
                f"operator {settings.op.name!r}: task of partition {task_id} but the stage "
                f"has {config.partitions} partitions; do not change the stage's partitioning"
            )
        apply_engine_settings(config)
        store_pool().max_idle = config.max_cached_stores
        with task_collector():  # many long-lived objects (fsstate.osmem)
            yield from _run(settings, task_id, owned, batches, epoch, late_ms, evict_ms, now_ms)

    return task


def _run(
    settings: StageSettings,
    task_id: int,
    owned: tuple[int, ...],
    batches: Iterator[pa.RecordBatch],
    epoch: int,
    late_ms: int,
    evict_ms: int,
    now_ms: int | None,
) -> Iterator[pa.RecordBatch]:
    """Run the epochs of the task's partitions; their outputs as Arrow batches."""
    config = settings.config
    parts = [pa.Table.from_batches([b]) for b in batches]
    table = _checked(pa.concat_tables(parts) if parts else None, task_id, owned, settings)
    fileio = fileio_for(config.root, config.store.fsync)
    for partition, rows in _by_partition(table, owned, settings):
        result = run_epoch(
            settings.op,
            fileio,
            partition,
            epoch,
            rows,
            late_ms=late_ms,
            evict_ms=evict_ms,
            config=config.store,
            writer=settings.writer,
            now_ms=now_ms,
            layout=settings.layout,
            combine_skip_until=settings.combine_skip_until,
        )
        if settings.receipts is not None:  # the driver learns the commit without a read
            settings.receipts.add({(settings.op.name, partition, epoch): _receipt(result)})
        out = _conform(result.output, settings.output_schema)
        yield from out.to_batches(max_chunksize=OUTPUT_BATCH_ROWS)


def _receipt(result: EpochResult) -> dict[str, Any]:
    """A task's receipt: the version's meta, with its summary and the commit's duration (the
    driver's figures, :mod:`fsstate_spark.receipts`; no summary when it recorded none)."""
    out = dict(result.meta or {})
    summary = result.commit.summary
    if summary is not None:
        out[SUMMARY_KEY] = summary.to_json()
    out[COMMIT_MS_KEY] = round(result.commit_ms, 3)
    return out


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


def _owned(settings: StageSettings, task_id: int) -> tuple[int, ...]:
    """The state partitions task ``task_id`` runs, ascending."""
    assert settings.owned is not None
    if task_id >= len(settings.owned):
        raise ConfigError(
            f"operator {settings.op.name!r}: task {task_id} but the stage has "
            f"{len(settings.owned)} tasks; do not change the stage's partitioning"
        )
    return settings.owned[task_id]


def _checked(
    table: pa.Table | None, task_id: int, owned: tuple[int, ...], settings: StageSettings
) -> pa.Table | None:
    """``table``, once every row's partition column is known to name a partition of this
    task (None: no rows)."""
    if table is None or not table.num_rows:
        return None
    col = table.column(PARTITION_COL)
    allowed = pa.array(owned, pa.int32())
    if not pc.all(pc.is_in(col, value_set=allowed)).as_py():
        wrong = sorted(set(pc.unique(col).to_pylist()) - set(owned))
        raise ConfigError(
            f"operator {settings.op.name!r}: the task {task_id} (partitions {list(owned)[:5]}) "
            f"got rows of partitions {wrong[:5]}; Spark changed the stage's partitioning (an "
            "adaptive plan coalescing or replacing its exchange): nothing was written"
        )
    return table


def _by_partition(
    table: pa.Table | None, owned: tuple[int, ...], settings: StageSettings
) -> Iterator[tuple[int, pa.Table]]:
    """(partition, its rows cast to the stage's input schema) for every owned partition, in
    order, the ones without rows included (their epochs commit too)."""
    empty = settings.input_schema.empty_table()
    if table is None:
        for p in owned:
            yield p, empty
        return
    col = table.column(PARTITION_COL)
    rows = _conform(table.drop_columns([PARTITION_COL]), settings.input_schema)
    if len(owned) == 1:
        yield owned[0], rows
        return
    order = pc.sort_indices(col)  # stable: each partition's rows keep their order
    ids = col.take(order).to_numpy()
    rows = rows.take(order)
    for p in owned:
        lo, hi = np.searchsorted(ids, p, "left"), np.searchsorted(ids, p, "right")
        yield p, rows.slice(int(lo), int(hi - lo)) if hi > lo else empty


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
