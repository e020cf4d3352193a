"""``tiered()`` with an initial state (Spark's initial-state eval types), with fsstate's keyed
loop and with PySpark's own: the same rows as Spark's handles, batch by batch."""

from __future__ import annotations

from pyspark.sql import SparkSession

from devkit.spark_local import session_conf
from tests.fsstate_spark.conftest import Tiered
from tests.fsstate_spark.operators.test_transform_with_state import BASKET_BATCHES, INIT_ROWS
from tests.support.migration_processors import INIT_SCHEMA, Basket
from tests.support.migration_processors import INPUT_SCHEMA as BASKET_INPUT
from tests.support.migration_processors import OUTPUT_SCHEMA as BASKET_OUTPUT
from tests.support.stream import StreamRunner


def test_initial_state_matches_native(
    spark: SparkSession, runner: StreamRunner, tiered_loop: Tiered
) -> None:
    init = spark.createDataFrame(INIT_ROWS, INIT_SCHEMA).groupBy("k")
    kwargs = {"input_schema": BASKET_INPUT, "initial_state": init}
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        native = runner.run(Basket(), BASKET_BATCHES, BASKET_OUTPUT, **kwargs)
        got = runner.run(
            tiered_loop(Basket(), state_uri=str(runner.root / "state")),
            BASKET_BATCHES,
            BASKET_OUTPUT,
            **kwargs,
        )
    assert got == native
