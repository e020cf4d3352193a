"""The seed-003 query on Spark: ``SELECT category, MAX(length) FROM info JOIN visit ON product
GROUP BY category`` over two change streams, with retractions.

Spark's streaming aggregations cannot take deletes, and a MAX that loses its maximum must find
the next one: here the join keeps both sides' rows (multisets) and the aggregation keeps, per
category, a count per distinct length in order, so a retraction finds the new maximum without
loading the group (:mod:`fsstate.operators.retract`). The output is a changelog: ``op`` -1
withdraws a category's old result, +1 states the new one.

Inputs, one JSON file per micro-batch: ``info`` rows ``product, category, op`` and ``visit``
rows ``product, user, length, op`` (op +1 insert, -1 delete).

Run: ``python examples/max_by_category.py`` (the seed's worked example: Fruit 40 and
Vegetable 50; a 60-long Potato visit moves Vegetable to 60; deleting it moves it back).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fsstate_spark import operators as ops

INFO_SCHEMA = "product STRING, category STRING, op INT"
VISIT_SCHEMA = "product STRING, user STRING, length BIGINT, op INT"


def flow(info: DataFrame, visit: DataFrame, *, output: str = "changelog") -> ops.Flow:
    """The query as an fsstate flow over the two change streams."""
    joined = ops.changelog_join(ops.source(info), ops.source(visit), on=["product"])
    return joined.transform(
        lambda df: df.select(
            F.col("left.category").alias("category"), F.col("right.length").alias("length"), "op"
        )
    ).retract_aggregate(
        keys=["category"], aggs=[ops.Agg("max", "length", "max_length")], output=output
    )


def streams(spark: SparkSession, root: Path) -> tuple[DataFrame, DataFrame]:
    """The two change streams, one file per micro-batch under ``root/info`` and ``root/visit``."""

    def read(name: str, schema: str) -> DataFrame:
        return (
            spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(root / name))
        )

    return read("info", INFO_SCHEMA), read("visit", VISIT_SCHEMA)


SEED_BATCHES: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = [
    (
        [
            {"product": "Apple", "category": "Fruit", "op": 1},
            {"product": "Banana", "category": "Fruit", "op": 1},
            {"product": "Carrot", "category": "Vegetable", "op": 1},
            {"product": "Potato", "category": "Vegetable", "op": 1},
        ],
        [
            {"product": "Apple", "user": "Alice", "length": 10, "op": 1},
            {"product": "Apple", "user": "Bob", "length": 20, "op": 1},
            {"product": "Carrot", "user": "Bob", "length": 50, "op": 1},
            {"product": "Banana", "user": "Alice", "length": 40, "op": 1},
        ],
    ),
    ([], [{"product": "Potato", "user": "Eve", "length": 60, "op": 1}]),
    ([], [{"product": "Potato", "user": "Eve", "length": 60, "op": -1}]),
]


def main() -> None:
    from devkit.spark_local import local_session, write_batches

    spark = local_session("fsstate-max-by-category")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_batches(root / "info", [i for i, _ in SEED_BATCHES])
        write_batches(root / "visit", [v for _, v in SEED_BATCHES])

        def show(df: DataFrame, batch_id: int) -> None:
            rows = sorted((r.op, r.category, r.max_length) for r in df.collect())
            print(f"batch {batch_id}: " + ", ".join(f"{o:+d} {c} {m}" for o, c, m in rows))

        info, visit = streams(spark, root)
        query = (
            ops.write_stream(
                flow(info, visit),
                checkpoint_location=str(root / "checkpoint"),
                sink=show,
                partitions=2,
            )
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    sys.exit(main())
