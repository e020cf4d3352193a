"""fsstate's own Spark calls leave the caller's active SparkSession as they found it.

PySpark's ``createDataFrame`` makes its session the process's active one; fsstate calls it on a
micro-batch's session inside ``foreachBatch`` (the driver's schema pass, a rescale's
partitioner). Without :func:`fsstate_spark.settings.keeping_active_session` the stream's clone
stayed active and a later ``tiered()`` read the clone's ``spark.fsstate.*`` settings, not the
ones the user had just set (found as an order-dependent failure of
``test_bad_settings_fail_at_tiered``).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf
from fsstate.errors import ConfigError
from fsstate_spark import tiered
from fsstate_spark.state.keys import spark_partitioner
from tests.support.processors import KitchenSink


def test_a_partitioner_on_another_session_leaves_the_active_one(spark: SparkSession) -> None:
    other = spark.newSession()
    partition_of = spark_partitioner(other, ["k"], 7)
    parts = partition_of(pa.table({"k": pa.array([1, 2, 3], pa.int64())}))
    assert len(parts) == 3 and all(0 <= p < 7 for p in parts)
    assert SparkSession.getActiveSession() is spark
    with session_conf(spark, **{"spark.fsstate.memoryLimit": "not-a-size"}):  # noqa: SIM117
        with pytest.raises(ConfigError, match="memory_limit"):
            tiered(KitchenSink())


def test_createdataframe_alone_would_switch_it(spark: SparkSession) -> None:
    """The PySpark behaviour the helper guards against (if PySpark stops doing this, the
    helper can go)."""
    other = spark.newSession()
    try:
        other.createDataFrame([(1,)], "a int")
        assert SparkSession.getActiveSession() is other
    finally:
        spark.createDataFrame([(1,)], "a int")  # the suite's session active again
    assert SparkSession.getActiveSession() is spark
