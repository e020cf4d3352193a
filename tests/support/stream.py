"""Deterministic micro-batches through a transformWithState processor: :class:`StreamRunner`.

Invariants: one JSON file per micro-batch with distinct, increasing modification times read
with ``maxFilesPerTrigger=1`` and an ``availableNow`` trigger, so every run of the same input
sees the same batches; a run that did not deliver every data batch to the sink fails instead of
returning a partial output.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import DataFrame, GroupedData, SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from devkit.spark_local import write_batches
from fsstate_spark.pyspark import ROW_TRANSFORM_WITH_STATE
from tests.support.processors import INPUT_SCHEMA


class StreamRunner:
    """Runs processors over micro-batches written to files; one instance per test."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.runs = 0

    def frame(
        self, input_dir: Path, schema: str = INPUT_SCHEMA, files_per_trigger: int = 1
    ) -> DataFrame:
        """A streaming DataFrame reading one file (or ``files_per_trigger``) per micro-batch."""
        return (
            self.spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", files_per_trigger)
            .json(str(input_dir))
        )

    def run(
        self,
        processor: StatefulProcessor,
        batches: Sequence[Sequence[dict[str, Any]]],
        output_schema: str,
        *,
        time_mode: str = "None",
        pandas: bool = True,
        name: str | None = None,
        total_batches: int | None = None,
        input_schema: str = INPUT_SCHEMA,
        key: str | Sequence[str] = "k",
        initial_state: Any = None,
        driver: bool = False,
        watermark: tuple[str, str] | None = None,
        partitions: int = 2,
        input_of: str | None = None,
        files_per_trigger: int = 1,
    ) -> list[tuple[Any, ...]]:
        """Run ``processor`` over ``batches`` (appended to the input of ``name``'s query).

        Args:
            processor: native or tiered processor.
            batches: rows of each new micro-batch.
            output_schema: DDL of the output.
            time_mode: "None" (the query ends by itself) or "ProcessingTime" (it is stopped
                once the last data batch is done: Spark keeps running no-data batches then).
            pandas: transformWithStateInPandas (True) or transformWithState (False).
            name: reuse input dir and checkpoint of an earlier run with this name (restart).
            total_batches: batch ids that are data batches (default: len(batches)).
            input_schema: DDL of the input rows.
            key: grouping column(s).
            initial_state: grouped initial state (``initialState`` of transformWithState).
            driver: run the processor with fsstate's flow driver
                (``ops.transform_with_state[_in_pandas]`` and ``ops.write_stream``) instead of
                Spark's operator.
            watermark: ``withWatermark(column, delay)`` on the input.
            partitions: the flow driver's partitions.
            input_of: read the input directory of the query of that name (a copied
                checkpoint reads its original's source: Spark's file source records paths).
            files_per_trigger: input files per micro-batch (``batches`` then describe files;
                ``total_batches`` and the batches checked are the caller's to give).

        Returns:
            Sorted (batch id, *output row) tuples of the data batches.

        Raises:
            AssertionError: a data batch of this run never reached the sink (the query ended
                or was stopped early): a comparison of outputs would prove nothing.
        """
        self.runs += 1
        tag = name or f"run{self.runs}"
        input_dir = self.root / (input_of or tag) / "input"
        checkpoint = self.root / tag / "checkpoint"
        write_batches(input_dir, batches)
        last = (total_batches or len(batches)) - 1
        frame = self.frame(input_dir, input_schema, files_per_trigger)
        if watermark is not None:
            frame = frame.withWatermark(*watermark)
        grouped = frame.groupBy(*([key] if isinstance(key, str) else key))
        if driver:
            from fsstate_spark import operators as ops

            call = ops.transform_with_state_in_pandas if pandas else ops.transform_with_state
            flow = call(
                grouped, processor, output_schema, "Update", time_mode, initialState=initial_state
            )
            return self._drive(flow, checkpoint, last, len(batches), partitions)
        out = self._native(grouped, processor, output_schema, time_mode, pandas, initial_state)
        rows: list[tuple[Any, ...]] = []
        seen: list[int] = []

        def sink(batch: DataFrame, batch_id: int) -> None:
            rows.extend((batch_id, *tuple(r)) for r in batch.collect())
            seen.append(batch_id)
            time.sleep(0.2)  # keeps micro-batches well apart (TTL tests rely on it)

        query = (
            out.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            self._await_last_batch(query, time_mode, seen, last)
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {query.exception()}")
        return self._check(rows, seen, last, -(-len(batches) // files_per_trigger))

    @staticmethod
    def _native(
        grouped: GroupedData,
        processor: StatefulProcessor,
        output_schema: str,
        time_mode: str,
        pandas: bool,
        initial_state: Any,
    ) -> DataFrame:
        """Spark's transformWithState[InPandas] operator on ``grouped`` (skips the test when
        this PySpark has no Row flavour)."""
        if pandas:
            return grouped.transformWithStateInPandas(
                processor, output_schema, "Update", time_mode, initialState=initial_state
            )
        if not ROW_TRANSFORM_WITH_STATE:  # the pandas parts before this call did run
            pytest.skip(
                f"PySpark {pyspark.__version__} has no Row-flavour transformWithState (4.1+)"
            )
        return grouped.transformWithState(
            processor, output_schema, "Update", time_mode, initialState=initial_state
        )

    @staticmethod
    def _await_last_batch(query: Any, time_mode: str, seen: list[int], last: int) -> None:
        """Until the query ended by itself (time mode "None") or Spark recorded batch ``last``
        as completed after the sink saw it (it then still runs: the caller stops it)."""
        deadline = time.monotonic() + 180
        if time_mode.lower() == "none":
            query.awaitTermination(180)
            return
        while not seen or max(seen) < last:
            if query.exception() is not None or not query.isActive:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"query did not reach batch {last}")
            time.sleep(0.2)
        # the sink saw the last batch: let Spark record it as completed (its commit
        # log, then its progress) before stopping, or a restart would run it again
        while query.isActive and not any(int(p["batchId"]) >= last for p in query.recentProgress):
            if query.exception() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)

    def _check(
        self, rows: list[tuple[Any, ...]], seen: list[int], last: int, n: int
    ) -> list[tuple[Any, ...]]:
        expected = set(range(last + 1 - n, last + 1))  # this run's data batches
        missing = expected - set(seen)
        assert not missing, f"micro-batches {sorted(missing)} never reached the sink ({seen})"
        return sorted(r for r in rows if r[0] <= last)

    def _drive(
        self, flow: Any, checkpoint: Path, last: int, n: int, partitions: int
    ) -> list[tuple[Any, ...]]:
        """Run a flow with fsstate's driver (state under ``<checkpoint>/fsstate``)."""
        from fsstate_spark import operators as ops

        rows: list[tuple[Any, ...]] = []
        seen: list[int] = []

        def sink(batch: DataFrame, batch_id: int) -> None:
            rows.extend((batch_id, *tuple(r)) for r in batch.collect())
            seen.append(batch_id)
            time.sleep(0.2)  # keeps micro-batches as far apart as the native runs'

        writer = ops.write_stream(
            flow, checkpoint_location=str(checkpoint), sink=sink, partitions=partitions
        )
        query = writer.trigger(availableNow=True).start()
        try:
            query.awaitTermination(300)
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {query.exception()}")
        return self._check(rows, seen, last, n)


def memo_run(
    runner: StreamRunner, memo: dict[str, list[tuple[Any, ...]]], key: str, **kwargs: Any
) -> list[tuple[Any, ...]]:
    """``runner.run(**kwargs)``, once per ``key`` in ``memo`` (native runs shared by tests)."""
    if key not in memo:
        memo[key] = runner.run(**kwargs)
    return memo[key]


def query_versions(query_dir: Any, operator: str, partition: int) -> list[int]:
    """The versions a ``tiered()`` query's state holds for (operator, partition) along the
    history of the lineage its last run wrote (each run writes a lineage of its own:
    :mod:`fsstate.store.lineage`)."""
    from fsstate.inspect import find_stores

    where = str(query_dir) if isinstance(query_dir, Path) else query_dir
    (store,) = find_stores(where, operator=operator, partition=partition)
    return list(store.history())
