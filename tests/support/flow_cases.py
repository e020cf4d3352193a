"""Comparing fsstate flows with Spark's built-in operators on the same micro-batches.

:class:`Case` writes each source's batches (one JSON file per batch) and runs a query with
Spark's built-in operator and with an fsstate flow, both through ``foreachBatch`` sinks that
collect each batch's rows; :func:`assert_same` compares them batch by batch.

Invariants: Spark's built-ins run with ``spark.sql.streaming.noDataMicroBatches.enabled=false``
(fsstate flows get no no-data micro-batches); rows are compared as sorted tuples (timestamps as
epoch seconds, floats rounded to 9 digits); a comparison with no output at all fails.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from devkit.spark_local import session_conf, write_batches
from fsstate_spark import operators as ops

SCHEMA = "k string, t bigint, v bigint, id string"
KEYS = ["a", "b", "c", "d", None]


def make_batches(
    seed: int, n_batches: int = 6, rows: int = 14, one_time_per_key: bool = False
) -> list[list[dict[str, Any]]]:
    """Rows with event times around ``100 + 8 * batch`` seconds, up to 20 s early (late rows).

    ``one_time_per_key``: the rows of one key in one batch share an event time (which of
    them Spark's deduplication keeps depends on its partition order, fsstate's on a canonical
    order; with one time per key and batch, which one is kept changes no later outcome).
    """
    rng = random.Random(seed)
    out = []
    for b in range(n_batches):
        batch = []
        times: dict[Any, int] = {}
        for j in range(rng.randint(0, rows) if b else rows):
            k = rng.choice(KEYS)
            t = 100 + 8 * b + rng.randint(-20, 6)
            if one_time_per_key:
                t = times.setdefault(k, t)
            v = None if rng.random() < 0.1 else rng.randint(-50, 50)
            batch.append({"k": k, "t": t, "v": v, "id": f"{b}-{j}"})
        out.append(batch)
    return out


def as_py(value: Any) -> Any:
    """Rows and structs as tuples, timestamps as epoch seconds, floats rounded."""
    if isinstance(value, Row):
        return tuple(as_py(v) for v in value)
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC).timestamp()
    if isinstance(value, float):
        return round(value, 9)
    return value


def row_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, repr(v)) for v in row)


def no_data_batches_off(spark: SparkSession) -> AbstractContextManager[None]:
    """No no-data micro-batches for a block (Spark's operators then emit what the watermark
    closed in the next batch with data, as the flow driver does)."""
    return session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"})


class Case:
    """Inputs of one comparison: a directory per source with its batch files."""

    def __init__(self, spark: SparkSession, root: Path, sources: list[list[list[dict[str, Any]]]]):
        self.spark, self.root = spark, root
        n = max(len(s) for s in sources)
        self.n = n
        self.dirs = []
        for i, batches in enumerate(sources):
            d = root / f"in{i}"
            write_batches(d, [*batches, *([[]] * (n - len(batches)))])
            self.dirs.append(d)

    def frame(self, i: int = 0) -> DataFrame:
        df = (
            self.spark.readStream.schema(SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(self.dirs[i]))
        )
        return df.withColumn("t", F.timestamp_seconds("t"))

    def _collect(self) -> tuple[dict[int, list[tuple[Any, ...]]], Callable[[DataFrame, int], None]]:
        got: dict[int, list[tuple[Any, ...]]] = {}

        def sink(df: DataFrame, batch_id: int) -> None:
            got[batch_id] = sorted((as_py(r) for r in df.collect()), key=row_key)

        return got, sink

    def _finish(self, query: Any, got: dict[int, list[tuple[Any, ...]]]) -> None:
        query.awaitTermination(300)
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        assert sorted(got) == list(range(self.n)), f"batches run: {sorted(got)}"

    def builtin(self, out: DataFrame, mode: str = "append") -> dict[int, list[tuple[Any, ...]]]:
        """Spark's own operator's rows per batch (no no-data batches)."""
        got, sink = self._collect()
        with no_data_batches_off(self.spark):
            query = (
                out.writeStream.outputMode(mode)
                .foreachBatch(sink)
                .option("checkpointLocation", str(self.root / "ckpt-spark"))
                .trigger(availableNow=True)
                .start()
            )
            self._finish(query, got)
        return got

    def fsstate(
        self,
        flow: ops.Flow,
        partitions: int = 3,
        tasks: int | None = None,
        tag: str = "",
        **options: Any,
    ) -> dict[int, list[tuple[Any, ...]]]:
        """The fsstate flow's rows per batch (``tag``: another checkpoint for another run;
        ``options``: more ``write_stream`` settings)."""
        got, sink = self._collect()
        query = (
            ops.write_stream(
                flow,
                checkpoint_location=str(self.root / f"ckpt-fsstate{tag}"),
                sink=sink,
                partitions=partitions,
                tasks=tasks,
                **options,
            )
            .trigger(availableNow=True)
            .start()
        )
        self._finish(query, got)
        return got


def assert_same(seed: int, spark_rows: dict[int, Any], ours: dict[int, Any]) -> None:
    for b in sorted(spark_rows):
        assert ours.get(b) == spark_rows[b], (
            f"seed {seed}, batch {b}:\n spark   {spark_rows[b]}\n fsstate {ours.get(b)}"
        )
    assert any(spark_rows.values()), f"seed {seed}: no output at all proves nothing"
