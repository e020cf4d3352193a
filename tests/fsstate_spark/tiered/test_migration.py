"""Migration from Spark's state to fsstate: a query that ran on Spark's handles (RocksDB) is read
with ``spark.read.format("statestore")`` and fed as ``initialState`` to the same processor under
``tiered()``; its outputs from then on equal those of the query continuing on Spark's handles
(the recipe of docs/evolution.md, "Moving a query from Spark's state to fsstate")."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fsstate import read_table
from tests.fsstate_spark.conftest import Tiered
from tests.support.migration_processors import (
    INIT_SCHEMA,
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    Basket,
)
from tests.support.stream import StreamRunner

SEED = 1603
BEFORE, AFTER = 3, 3  # batches on Spark's handles, then after the switch


def _batches(seed: int) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(BEFORE + AFTER):
        rows = []
        for _ in range(40):
            k = f"k{rng.randrange(12):02d}"
            v = -1 if rng.random() < 0.05 else rng.randrange(1, 50)
            rows.append({"k": k, "item": rng.choice("abcdef"), "v": v})
        out.append(rows)
    return out


def initial_state(spark: SparkSession, checkpoint: str, batch_id: int) -> DataFrame:
    """Spark's state of the Basket query at ``batch_id`` as initial state rows (INIT_SCHEMA):
    the recipe's one Spark-specific step."""

    def read(var: str, flatten: bool = True) -> DataFrame:
        return (
            spark.read.format("statestore")
            .option("path", checkpoint)
            .option("batchId", batch_id)
            .option("stateVarName", var)
            .option("flattenCollectionTypes", str(flatten).lower())
            .load()
        )

    none = F.lit(None)
    total = read("total").select(
        F.col("key.k").alias("k"), F.lit("total").alias("var"), F.col("value.total").alias("total"),
        none.cast("array<string>").alias("recent"), none.cast("string").alias("item"),
        none.cast("bigint").alias("n"),
    )  # fmt: skip
    # unflattened: one row per key with the list in order (rows of a group have no order)
    recent = read("recent", flatten=False).select(
        F.col("key.k").alias("k"), F.lit("recent").alias("var"), none.cast("bigint").alias("total"),
        F.transform("list_value", lambda e: e["item"]).alias("recent"),
        none.cast("string").alias("item"), none.cast("bigint").alias("n"),
    )  # fmt: skip
    counts = read("counts").select(
        F.col("key.k").alias("k"), F.lit("counts").alias("var"), none.cast("bigint").alias("total"),
        none.cast("array<string>").alias("recent"), F.col("user_map_key.item").alias("item"),
        F.col("user_map_value.n").alias("n"),
    )  # fmt: skip
    return total.unionByName(recent).unionByName(counts)


def test_switching_to_tiered_keeps_the_outputs_of_spark_handles(
    tiered_loop: Tiered, spark: SparkSession, runner: StreamRunner, tmp_path: Path
) -> None:
    batches = _batches(SEED)
    run = lambda proc, rows, **kw: runner.run(  # noqa: E731
        proc, rows, OUTPUT_SCHEMA, input_schema=INPUT_SCHEMA, **kw
    )
    run(Basket(), batches[:BEFORE], name="native")
    native_after = run(Basket(), batches[BEFORE:], name="native", total_batches=len(batches))

    init = initial_state(spark, str(tmp_path / "native" / "checkpoint"), BEFORE - 1)
    assert (
        init.schema.simpleString() == spark.createDataFrame([], INIT_SCHEMA).schema.simpleString()
    )
    rows_per_key = init.groupBy("k").count().agg(F.max("count")).first()
    assert rows_per_key is not None and rows_per_key[0] > 2, f"seed={SEED}"
    state = str(tmp_path / "fsstate")
    migrated = run(
        tiered_loop(Basket(), state_uri=state),
        batches[BEFORE:],
        name="migrated",
        initial_state=init.groupBy("k"),
    )
    shifted = sorted((bid + BEFORE, *rest) for bid, *rest in migrated)
    assert len(native_after) >= 2 * AFTER and shifted == native_after, f"seed={SEED}"
    # the initial state is what makes them equal: a fresh start differs
    fresh = run(tiered_loop(Basket(), state_uri=str(tmp_path / "fresh")), batches[BEFORE:])
    assert sorted((bid + BEFORE, *rest) for bid, *rest in fresh) != native_after
    # and the state fsstate holds now reads back like Spark's (the last output per key)
    last = {r[1]: r for r in native_after}
    stores = [p for p in Path(state).iterdir() if p.is_dir()]
    totals = {}
    for root in stores:
        for part in range(int(spark.conf.get("spark.sql.shuffle.partitions") or 2)):
            for r in read_table(str(root), "Basket", part, "total").to_pylist():
                totals[r["k"]] = r["total"]
    assert totals and {k: r[2] for k, r in last.items() if r[2] is not None} == {
        k: t for k, t in totals.items() if k in last
    }, f"seed={SEED}"
