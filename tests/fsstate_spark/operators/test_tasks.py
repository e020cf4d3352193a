"""Key groups: a stage's state keeps ``partitions`` partitions and runs in ``tasks`` Spark tasks.

Invariants checked: with fewer tasks than partitions (each task running the epochs of the
partitions Spark's hash partitioning of the partition number sends it), a windowed count, a
dedup and a running aggregate equal Spark's built-ins batch by batch, and equal the same flow
with a task per partition; every partition commits every epoch, with rows or without, and the
driver learns every commit from the tasks' receipts; a bad task count is a ConfigError when
the flow is built.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from fsstate.errors import ConfigError
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.store.identity import store_dir_for
from fsstate_spark import operators as ops
from tests.support.flow_cases import Case, assert_same

pytestmark = pytest.mark.spark

SEED = 11


def _batches() -> list[list[dict[str, object]]]:
    rng = random.Random(SEED)
    return [
        [
            {
                "k": rng.choice("abcdefgh"),
                "t": 100 + 8 * b + rng.randint(0, 7),
                "v": rng.randint(0, 9),
            }
            for _ in range(rng.randint(0, 30))
        ]
        for b in range(4)
    ]


def test_fewer_tasks_than_partitions_equal_spark(spark: SparkSession, tmp_path: Path) -> None:
    case = Case(spark, tmp_path, [_batches()])
    window = (
        case.frame()
        .withWatermark("t", "5 seconds")
        .groupBy(F.window("t", "10 seconds").alias("window"), "k")
        .agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("sum(v)"))
    )

    def flow() -> ops.Flow:
        return ops.source(case.frame(), watermark=("t", "5 seconds")).window_aggregate(
            keys=["k"],
            time="t",
            window=ops.Window(size_ms=10_000),
            aggs=[ops.Agg("count"), ops.Agg("sum", "v")],
        )

    want = case.builtin(window)
    grouped = case.fsstate(flow(), partitions=7, tasks=2, tag="-t2")
    assert_same(SEED, want, grouped)
    assert_same(SEED, want, case.fsstate(flow(), partitions=7, tasks=7, tag="-t7"))
    # every partition committed every epoch, with rows or without
    fileio = FileIO(str(tmp_path / "ckpt-fsstate-t2" / "fsstate"))
    name = flow().stages[0].op.name
    for p in range(7):
        for epoch in range(case.n):
            read_manifest(fileio, store_dir_for(name, p), epoch)


def test_running_aggregate_and_dedup_in_three_tasks(spark: SparkSession, tmp_path: Path) -> None:
    case = Case(spark, tmp_path, [_batches()])
    agg = case.frame().groupBy("k").agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("s"))
    flow = (
        ops.source(case.frame())
        .transform(lambda d: d.withColumn("op", F.lit(1).cast("tinyint")))
        .retract_aggregate(
            keys=["k"], aggs=[ops.Agg("count"), ops.Agg("sum", "v", "s")], output="upsert"
        )
        .transform(lambda d: d.drop("op"))
    )
    assert_same(SEED, case.builtin(agg, mode="update"), case.fsstate(flow, partitions=5, tasks=3))
    # a key at most once per batch: which of a batch's rows Spark keeps is its choice
    rng = random.Random(SEED)
    unique = [
        [{"k": k, "t": 100 + 8 * b + rng.randint(0, 7), "v": 1} for k in rng.sample("abcdefgh", 4)]
        for b in range(5)
    ]
    case = Case(spark, tmp_path / "dedup", [unique])
    dedup = (
        case.frame().withWatermark("t", "5 seconds").dropDuplicatesWithinWatermark(["k"])
    ).select("k")
    flow = (
        ops.source(case.frame(), watermark=("t", "5 seconds"))
        .deduplicate(keys=["k"], time="t")
        .transform(lambda d: d.select("k"))
    )
    assert_same(SEED, case.builtin(dedup), case.fsstate(flow, partitions=5, tasks=3))


@pytest.mark.parametrize("tasks", [0, 9, True, "2"])
def test_bad_task_count_is_refused(spark: SparkSession, tmp_path: Path, tasks: object) -> None:
    case = Case(spark, tmp_path, [_batches()])
    flow = ops.source(case.frame(), watermark=("t", "5 seconds")).deduplicate(keys=["k"], time="t")
    with pytest.raises(ConfigError, match="tasks="):
        ops.write_stream(
            flow,
            checkpoint_location=str(tmp_path / "c"),
            partitions=8,
            tasks=tasks,  # type: ignore[arg-type]
        )
