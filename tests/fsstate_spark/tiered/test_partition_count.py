"""``tiered()`` state records its partition count; a run with another count fails at its first
task with :class:`fsstate.errors.PartitionCountError`, before anything is written.

How a task knows its stage's count (:mod:`fsstate_spark.runtime`): Spark's internal
``spark.sql.streaming.internal.stateStore.partitions`` reaches its tasks as a local property,
with the count restored from the checkpoint; the test's second run checks that a restart with
another ``spark.sql.shuffle.partitions`` keeps the checkpoint's count and passes. The scenario that
changes the count under the same state: a query started with a new checkpoint that keeps the
query id (its ``metadata`` file) and the state location, with another shuffle partition count.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf, write_batches
from fsstate.storage.fileio import FileIO
from fsstate.store.layout import in_force, read_layouts
from fsstate_spark import tiered
from tests.support.processors import INPUT_SCHEMA, RowCounter


def _run(spark: SparkSession, root: Path, ckpt: Path, state: Path, parts: int) -> list[Any]:
    rows: list[Any] = []
    reader = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
    df = reader.json(str(root / "in"))
    with session_conf(spark, **{"spark.sql.shuffle.partitions": str(parts)}):
        query = (
            df.groupBy("k")
            .transformWithState(
                tiered(RowCounter(), state_uri=str(state)),
                "k STRING, count BIGINT, recent STRING, seen STRING",
                "Update",
                "None",
            )
            .writeStream.foreachBatch(lambda d, b: rows.extend(d.collect()))
            .option("checkpointLocation", str(ckpt))
            .outputMode("update")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
    return rows


def _files(state: Path) -> set[str]:
    return {str(p.relative_to(state)) for p in state.rglob("*") if p.is_file()}


def test_another_partition_count_fails_at_the_first_task_with_nothing_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    write_batches(tmp_path / "in", [[{"k": f"k{i}", "v": i} for i in range(8)]])
    assert len(_run(spark, tmp_path, tmp_path / "ckpt", state, 2)) == 8
    query_id = json.loads((tmp_path / "ckpt" / "metadata").read_text())["id"]
    recorded = in_force(read_layouts(FileIO(str(state / query_id)), "RowCounter"))
    assert recorded.partitions == 2

    # the same checkpoint restarted with another session count: Spark restores 2 from its
    # offsets log and the tasks see 2, so the run goes on
    write_batches(tmp_path / "in", [[{"k": "k1", "v": 9}]])
    out = _run(spark, tmp_path, tmp_path / "ckpt", state, 5)
    assert [(r.k, r["count"]) for r in out] == [("k1", 2)]

    # a new checkpoint with the same query id (and state): the run has 3 partitions
    fresh = tmp_path / "ckpt2"
    fresh.mkdir()
    shutil.copy(tmp_path / "ckpt" / "metadata", fresh / "metadata")
    before = _files(state)
    with pytest.raises(StreamingQueryException) as info:
        _run(spark, tmp_path, fresh, state, 3)
    message = str(info.value)
    assert "PartitionCountError" in message and "has 2 partitions" in message
    assert "this run of the query has 3" in message and "rescale_query" in message
    assert _files(state) == before  # nothing written
