"""Bounded (batch DataFrame) input through tiered() equals native; bad settings fail early."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf, write_batches
from fsstate.errors import ConfigError
from fsstate_spark import tiered
from tests.support.processors import (
    INPUT_SCHEMA,
    ROW_SCHEMA,
    SINK_SCHEMA,
    KitchenSink,
    RowCounter,
)

ROWS = [
    [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 4}],
    [{"k": "a", "v": 3}, {"k": "c", "v": 0}, {"k": "b", "v": 5}, {"k": "a", "v": 9}],
]


def test_batch_dataframe_matches_native_and_writes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    write_batches(tmp_path / "in", ROWS)
    df = spark.read.schema(INPUT_SCHEMA).json(str(tmp_path / "in"))
    state_uri = tmp_path / "state"

    def pandas_run(processor: Any) -> list[tuple[Any, ...]]:
        out = df.groupBy("k").transformWithStateInPandas(processor, SINK_SCHEMA, "Update", "None")
        return sorted(tuple(r) for r in out.collect())

    def row_run(processor: Any) -> list[tuple[Any, ...]]:
        out = df.groupBy("k").transformWithState(processor, ROW_SCHEMA, "Update", "None")
        return sorted(tuple(r) for r in out.collect())

    native = pandas_run(KitchenSink())
    assert pandas_run(tiered(KitchenSink(), state_uri=str(state_uri))) == native
    assert len(native) == 3
    native_rows = row_run(RowCounter())
    assert row_run(tiered(RowCounter(), state_uri=str(state_uri))) == native_rows
    assert list(state_uri.rglob("*")) == []  # bounded input keeps state in memory only


def test_bad_settings_fail_at_tiered(spark: SparkSession, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="state_uri"):
        tiered(KitchenSink(), state_uri=str(blocker / "sub"))
    good = str(tmp_path / "state")
    with pytest.raises(ConfigError, match="memory_limit"):
        tiered(KitchenSink(), state_uri=good, memory_limit="lots")
    with pytest.raises(ConfigError, match="memory_limit"):
        tiered(KitchenSink(), state_uri=good, memory_limit="10KiB")
    with pytest.raises(ConfigError, match="retain_versions"):
        tiered(KitchenSink(), state_uri=good, retain_versions=0)
    with pytest.raises(ConfigError, match="unknown"):
        tiered(KitchenSink(), state_uri=good, no_such_setting=1)
    with session_conf(spark, **{"spark.fsstate.memoryLimit": "not-a-size"}):
        with pytest.raises(ConfigError, match="memory_limit"):
            tiered(KitchenSink(), state_uri=good)
        # an argument wins over the Spark setting
        assert tiered(KitchenSink(), state_uri=good, memory_limit="64MiB").config.memory_limit_bytes
    conf = {"spark.fsstate.stateUri": good, "spark.fsstate.fsync": None}
    with session_conf(spark, **conf):
        processor = tiered(KitchenSink(), name="sink.v2")
        assert processor.config.state_uri == good
        assert processor.config.name == "sink.v2"
        assert processor.config.memory_limit_bytes == 256 * 1024**2  # conf/spark-defaults.conf
        assert processor.config.store.fsync  # durable by default
        spark.conf.set("spark.fsstate.fsync", "false")
        assert not tiered(KitchenSink()).config.store.fsync
        spark.conf.set("spark.fsstate.fsync", "maybe")
        with pytest.raises(ConfigError, match="fsync"):
            tiered(KitchenSink())


def _two_operators(spark: SparkSession, tmp_path: Path, names: tuple[str | None, str | None]):
    """A query with two chained transformWithStateInPandas operators of one processor class
    (Spark runs them in two stages with the same partition ids)."""
    write_batches(tmp_path / "in", ROWS)
    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    state = str(tmp_path / "state")
    first, second = (tiered(KitchenSink(), state_uri=state, name=n) for n in names)
    out = (
        df.groupBy("k")
        .transformWithStateInPandas(first, SINK_SCHEMA, "Append", "None")
        .selectExpr("k", "count AS v")
        .groupBy("k")
        .transformWithStateInPandas(second, SINK_SCHEMA, "Append", "None")
    )
    rows: list[Any] = []
    query = (
        out.writeStream.foreachBatch(lambda d, i: rows.extend(d.collect()))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # the caller checks exception()
        query.awaitTermination(180)
    return query, rows


def test_two_operators_sharing_a_store_name_fail_early(spark: SparkSession, tmp_path: Path) -> None:
    """The same processor class twice in one query defaults to one store name: the second
    to commit a version finds it published by the other operator of the same run and fails,
    naming the store and what to do (instead of both silently sharing one state)."""
    query, _ = _two_operators(spark, tmp_path / "same", (None, None))
    err = query.exception()
    assert err is not None, "two operators shared one store without an error"
    assert "same name 'KitchenSink'" in str(err) and "name=..." in str(err), str(err)
    query, rows = _two_operators(spark, tmp_path / "named", ("first", "second"))
    assert query.exception() is None, query.exception()
    # the second operator counts the first one's rows per key: one per batch with the key
    assert sorted((r["k"], r["count"]) for r in rows) == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("b", 2),
        ("c", 1),
    ]
