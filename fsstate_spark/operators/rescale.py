"""Rescaling a flow's stage state when the flow starts with another ``partitions=``.

The flow driver (:mod:`fsstate_spark.operators.driver`) checks each stage's recorded partition
count at its first micro-batch ``b``; when it differs, :func:`rescale_stage` rescales the stage's
state at version ``b - 1`` (the version batch ``b`` starts from, whatever Spark re-runs) with
:func:`fsstate.store.rescale.rescale`, before anything of batch ``b`` runs.

Invariants:

* A row's new partition is computed by Spark itself (:func:`spark_partitioner`): the key columns,
  as the state holds them, become a DataFrame (Arrow to Spark types, the same conversion the
  stage's input schema came from) and ``pmod(hash(keys...), M)`` is evaluated on it: the
  expression the driver puts on every row and the one ``repartition(M, *keys)`` shuffles by,
  so rescaled keys are where the next batch's shuffle sends their rows. No Python
  re-implementation of Spark's hash exists to drift. A keyless stage's state goes to partition
  0, where the driver's literal key sends its rows.
* Atomic and re-runnable as :mod:`fsstate.store.rescale` is: a driver killed during a rescale
  leaves the old generation in force, and the restarted query rescales again.
* Cost: one small Spark job per key range read (:data:`fsstate.store.rescale.CHUNK_BYTES` of
  stored state per range at most), run on the driver's session; the rows are read and written
  by the driver process (not by executors): the state's bytes pass through the driver once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from fsstate.storage.fileio import FileIO
from fsstate.store.layout import Layout
from fsstate.store.rescale import RescaleProgress, rescale
from fsstate_spark.operators.settings import FlowSettings

__all__ = ["rescale_stage", "spark_partitioner"]

log = logging.getLogger(__name__)
_INDEX = "_fsstate_row"


def spark_partitioner(
    spark: SparkSession, keys: Sequence[str], partitions: int
) -> Callable[[pa.Table], np.ndarray]:
    """A ``partition_of`` for :func:`fsstate.store.rescale.rescale`: each key row's partition
    as Spark's hash partitioning into ``partitions`` computes it (see the module docstring)."""

    def partition_of(key_table: pa.Table) -> np.ndarray:
        n = key_table.num_rows
        if not n:
            return np.zeros(0, dtype=np.int64)
        indexed = key_table.append_column(_INDEX, pa.array(np.arange(n, dtype=np.int64)))
        df = spark.createDataFrame(indexed)
        where = F.pmod(F.hash(*[F.col(k) for k in keys]), F.lit(partitions)).cast("long")
        got = df.select(F.col(_INDEX), where.alias("p")).toArrow()
        out = np.empty(n, dtype=np.int64)
        out[got.column(_INDEX).to_numpy()] = got.column("p").to_numpy()
        return out

    return partition_of


def rescale_stage(
    spark: SparkSession,
    fileio: FileIO,
    operator: str,
    keys: Sequence[str],
    config: FlowSettings,
    version: int | None,
) -> Layout:
    """Rescale the state of stage ``operator`` (partitioned by ``keys``) to
    ``config.partitions`` at ``version`` (None: nothing committed); returns the new layout."""

    def progress(p: RescaleProgress) -> None:
        log.info(
            "fsstate: rescaling %r: %d of %d old partitions read, %d rows written, %.0f ms",
            p.operator,
            p.done,
            p.total,
            p.rows,
            p.elapsed_ms,
        )

    partition_of: Any = spark_partitioner(spark, keys, config.partitions)
    result = rescale(
        fileio,
        operator,
        partitions=config.partitions,
        keys=list(keys),
        partition_of=partition_of,
        version=version,
        config=config.store,
        progress=progress,
    )
    log.warning(
        "fsstate: rescaled the state of %r from %s to %s partitions at batch %s (%d rows)",
        operator,
        result.previous.partitions,
        result.layout.partitions,
        version,
        result.rows,
    )
    return result.layout
