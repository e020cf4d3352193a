"""Rescaling a flow's stage state when the flow starts with another ``partitions=``.

The flow driver (:mod:`fsstate_spark.operators.driver`) checks each stage's recorded partition
count at its first micro-batch ``b``; when it differs, :func:`rescale_stage` rescales the stage's
state at version ``b - 1`` (the version batch ``b`` starts from, whatever Spark re-runs) with
:func:`fsstate.store.rescale.rescale`, before anything of batch ``b`` runs.

Invariants:

* A row's new partition is computed by Spark itself
  (:func:`fsstate_spark.state.keys.spark_partitioner`): ``pmod(hash(keys...), M)``
  evaluated on the key columns as the state holds them, the expression the driver puts on
  every row and the one ``repartition(M, *keys)`` shuffles by, so rescaled keys are where the
  next batch's shuffle sends their rows. A keyless stage's state goes to partition 0, where
  the driver's literal key sends its rows.
* Atomic and re-runnable as :mod:`fsstate.store.rescale` is: a driver killed during a rescale
  leaves the old generation in force, and the restarted query rescales again.
* Cost: one small Spark job per key range read (:data:`fsstate.store.rescale.CHUNK_BYTES` of
  stored state per range at most), run on the driver's session; the rows are read and written
  by the driver process (not by executors): the state's bytes pass through the driver once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession

from fsstate.storage.fileio import FileIO
from fsstate.store.layout import Layout
from fsstate.store.rescale import log_progress, rescale
from fsstate_spark.operators.settings import FlowSettings
from fsstate_spark.state.keys import spark_partitioner

__all__ = ["rescale_stage"]

log = logging.getLogger(__name__)


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

    partition_of: Any = spark_partitioner(spark, keys, config.partitions)
    result = rescale(
        fileio,
        operator,
        partitions=config.partitions,
        keys=list(keys),
        partition_of=partition_of,
        version=version,
        config=config.store,
        progress=log_progress,
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
