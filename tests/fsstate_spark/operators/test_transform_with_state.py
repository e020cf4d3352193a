"""Unchanged StatefulProcessors driven by fsstate against Spark's transformWithState.

Every case runs one processor twice over the same micro-batches (one JSON file per batch):
with Spark's ``transformWithStateInPandas`` / ``transformWithState`` and Spark's handles, and
with ``ops.transform_with_state_in_pandas`` / ``ops.transform_with_state`` and
``ops.write_stream``; the outputs must be equal batch by batch. Spark runs with
``spark.sql.streaming.noDataMicroBatches.enabled=false``, the one allowed difference (the
driver runs in ``foreachBatch`` and gets no no-data micro-batches).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf
from fsstate.errors import ConfigError
from fsstate.osmem import YOUNG_OBJECTS_MAX
from fsstate_spark import operators as ops
from tests.support.driver_processors import (
    EVENT_INPUT,
    EVENT_OUTPUT,
    JOIN_INPUT,
    JOIN_OUTPUT,
    MAX_INPUT,
    MAX_OUTPUT,
    PROC_OUTPUT,
    EventTimers,
    JoinChanges,
    MaxWithRetractions,
    ProcTimers,
)
from tests.support.migration_processors import INIT_SCHEMA, Basket
from tests.support.migration_processors import INPUT_SCHEMA as BASKET_INPUT
from tests.support.migration_processors import OUTPUT_SCHEMA as BASKET_OUTPUT
from tests.support.processors import (
    GC_PROBE_SCHEMA,
    ORDER_BATCHES,
    ORDER_INPUT_SCHEMA,
    ORDER_SCHEMA,
    ROW_SCHEMA,
    SINK_BATCHES,
    SINK_SCHEMA,
    TTL_SCHEMA,
    GcProbe,
    KitchenSink,
    KitchenSinkRenamed,
    MapListOrder,
    RowCounter,
    TtlTimers,
)
from tests.support.stream import StreamRunner

pytestmark = [pytest.mark.spark, pytest.mark.compat]  # compat: every other minor runs it


@pytest.fixture
def no_data_batches_off(spark: SparkSession) -> Iterator[None]:
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        yield


def _both(
    runner: StreamRunner, processor_factory: Any, batches: Any, schema: str, **kw: Any
) -> Any:
    native = runner.run(processor_factory(), batches, schema, **kw)
    driven = runner.run(processor_factory(), batches, schema, driver=True, **kw)
    assert driven == native
    return native


def test_value_list_map_with_a_failed_attempt_pandas_and_row(
    runner: StreamRunner, tmp_path: Path, no_data_batches_off: None
) -> None:
    """KitchenSink fails once after writing state in batch 1: the retried task (a new attempt
    of the stage's ``mapInArrow`` task) must not see those writes."""
    marker = tmp_path / "failed-once"
    native = runner.run(KitchenSink(), SINK_BATCHES, SINK_SCHEMA)
    driven = runner.run(
        KitchenSink(fail_key="b", marker=str(marker)), SINK_BATCHES, SINK_SCHEMA, driver=True
    )
    assert marker.exists()
    assert driven == native
    _both(runner, RowCounter, SINK_BATCHES, ROW_SCHEMA, pandas=False)


def test_ttl_and_processing_time_timers(runner: StreamRunner, no_data_batches_off: None) -> None:
    """TTL of value, list and map state and processing-time timers (pandas), and timers at,
    before and after the batch time with a delete (Row)."""
    _both(runner, TtlTimers, SINK_BATCHES, TTL_SCHEMA, time_mode="ProcessingTime")
    rows = _both(
        runner, ProcTimers, SINK_BATCHES, PROC_OUTPUT, time_mode="ProcessingTime", pandas=False
    )
    assert any(r[2] == "timer" and "ts=-1000" in r[4] for r in rows)  # before the batch time
    assert any(r[2] == "timer" and "ts=1 " in r[4] for r in rows)  # fired a batch later


def _t(seconds: int) -> str:
    return (dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)).isoformat()


EVENT_BATCHES = [
    [
        {"k": "a", "v": 1, "t": _t(10)},
        {"k": "b", "v": 4, "t": _t(10)},
        {"k": "c", "v": 2, "t": _t(30)},
    ],
    [
        {"k": "a", "v": 8, "t": _t(40)},
        {"k": "d", "v": 3, "t": _t(40)},
        {"k": "b", "v": 5, "t": _t(5)},
    ],
    [
        {"k": "e", "v": 12, "t": _t(60)},
        {"k": "c", "v": 7, "t": _t(20)},
        {"k": "f", "v": 1, "t": _t(60)},
    ],
    [{"k": "a", "v": 9, "t": _t(90)}, {"k": "g", "v": 16, "t": _t(95)}],
    [{"k": "h", "v": 2, "t": _t(130)}, {"k": "a", "v": 3, "t": _t(60)}],
]


def test_event_time_timers_late_rows_and_keys_expiring_together(
    runner: StreamRunner, no_data_batches_off: None
) -> None:
    rows = _both(
        runner,
        EventTimers,
        EVENT_BATCHES,
        EVENT_OUTPUT,
        time_mode="EventTime",
        input_schema=EVENT_INPUT,
        watermark=("t", "10 seconds"),
    )
    timers = [r for r in rows if r[2] == "timer"]
    assert len({r[0] for r in timers}) < len(timers)  # several keys fired in one batch


def test_map_and_list_order(runner: StreamRunner, no_data_batches_off: None) -> None:
    _both(
        runner,
        lambda: MapListOrder("pandas"),
        ORDER_BATCHES,
        ORDER_SCHEMA,
        input_schema=ORDER_INPUT_SCHEMA,
    )
    _both(
        runner,
        lambda: MapListOrder("row"),
        ORDER_BATCHES,
        ORDER_SCHEMA,
        input_schema=ORDER_INPUT_SCHEMA,
        pandas=False,
    )


BASKET_BATCHES = [
    [{"k": "a", "item": "x", "v": 1}, {"k": "b", "item": "y", "v": 2}],
    [
        {"k": "a", "item": "z", "v": 3},
        {"k": "c", "item": "x", "v": -1},
        {"k": "d", "item": "q", "v": 4},
    ],
    [{"k": "b", "item": "y", "v": 5}, {"k": "a", "item": "x", "v": 6}],
]
INIT_ROWS = [
    ("a", "total", 10, None, None, None),
    ("a", "recent", None, ["p", "q"], None, None),
    ("a", "counts", None, None, "p", 2),
    ("c", "total", 7, None, None, None),  # a key with initial state and a clearing row
    ("e", "total", 3, None, None, None),  # a key with initial state only
    ("e", "counts", None, None, "r", 1),
]


def test_initial_state(
    spark: SparkSession, runner: StreamRunner, no_data_batches_off: None
) -> None:
    init = spark.createDataFrame(INIT_ROWS, INIT_SCHEMA).groupBy("k")
    _both(
        runner,
        Basket,
        BASKET_BATCHES,
        BASKET_OUTPUT,
        input_schema=BASKET_INPUT,
        initial_state=init,
    )


JOIN_BATCHES = [
    [
        {"product": "p1", "side": "info", "category": "veg", "op": 1},
        {"product": "p1", "side": "visit", "user": "ann", "length": 10, "op": 1},
        {"product": "p2", "side": "visit", "user": "bob", "length": 30, "op": 1},
    ],
    [
        {"product": "p2", "side": "info", "category": "veg", "op": 1},
        {"product": "p1", "side": "visit", "user": "cat", "length": 50, "op": 1},
    ],
    [
        {"product": "p1", "side": "visit", "user": "cat", "length": 50, "op": -1},
        {"product": "p2", "side": "info", "category": "veg", "op": -1},
        {"product": "p2", "side": "info", "category": "fruit", "op": 1},
    ],
]
MAX_BATCHES = [
    [{"category": "veg", "length": 10, "op": 1}, {"category": "veg", "length": 50, "op": 1}],
    [{"category": "veg", "length": 50, "op": -1}, {"category": "fruit", "length": 30, "op": 1}],
    [{"category": "veg", "length": 10, "op": -1}, {"category": "fruit", "length": 40, "op": 1}],
]


def test_join_and_max_with_retractions(runner: StreamRunner, no_data_batches_off: None) -> None:
    _both(runner, JoinChanges, JOIN_BATCHES, JOIN_OUTPUT, input_schema=JOIN_INPUT, key="product")
    rows = _both(
        runner,
        MaxWithRetractions,
        MAX_BATCHES,
        MAX_OUTPUT,
        input_schema=MAX_INPUT,
        key="category",
    )
    assert (1, "veg", 10, 1) in rows and (2, "veg", None, 0) in rows


@pytest.mark.parametrize("then", [KitchenSink, KitchenSinkRenamed])
def test_restart_half_way(runner: StreamRunner, no_data_batches_off: None, then: type) -> None:
    """Three batches, a stopped query, three more on its checkpoint: as one native run, also
    when the restarted query's processor class has another name (state follows the query's
    operator, not the processor's class, as Spark's)."""
    batches = [*SINK_BATCHES, *SINK_BATCHES]
    native = runner.run(KitchenSink(), batches, SINK_SCHEMA)
    first = runner.run(KitchenSink(), batches[:3], SINK_SCHEMA, driver=True, name="restarted")
    second = runner.run(
        then(), batches[3:], SINK_SCHEMA, driver=True, name="restarted", total_batches=6
    )
    assert first + second == native


def test_event_time_needs_a_watermark_and_flow_checks(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.readStream.schema(EVENT_INPUT).json(str(tmp_path))
    with pytest.raises(ConfigError, match="needs a watermark"):
        ops.transform_with_state_in_pandas(
            df.groupBy("k"), EventTimers(), EVENT_OUTPUT, "Update", "EventTime"
        )
    with pytest.raises(ConfigError, match="timeMode"):
        ops.transform_with_state(df.groupBy("k"), ProcTimers(), PROC_OUTPUT, "Update", "Later")
    with pytest.raises(ConfigError, match="plain column names"):
        ops.transform_with_state(df.groupBy(df.v + 1), ProcTimers(), PROC_OUTPUT, "Update", "None")
    with pytest.raises(ConfigError, match="eventTimeColumnName"):
        ops.transform_with_state(
            df.groupBy("k"), ProcTimers(), PROC_OUTPUT, "Update", "None", None, "t"
        )
    flow = ops.transform_with_state_in_pandas(
        df.withWatermark("t", "10 seconds").groupBy("k"),
        EventTimers(),
        EVENT_OUTPUT,
        "Update",
        "EventTime",
    )
    assert flow.stages[0].op.name == "EventTimers"
    assert flow.sources[0].time == "t" and flow.sources[0].delay_ms == 10_000


def test_a_restart_of_tiered_with_a_renamed_processor_class_continues_the_state(
    runner: StreamRunner, no_data_batches_off: None
) -> None:
    """As :func:`test_restart_half_way` with a renamed class, under ``tiered()``."""
    from fsstate_spark import tiered
    from fsstate_spark.pyspark import PYSPARK_MINOR

    if PYSPARK_MINOR < (4, 1):  # the takeover finds the operator by its layout record
        pytest.skip(
            "PySpark 4.0's tasks carry no spark.sql.streaming.internal.stateStore.partitions: "
            "tiered() writes no layout record, so a renamed class cannot find its state"
        )

    batches = [*SINK_BATCHES, *SINK_BATCHES]
    native = runner.run(KitchenSink(), batches, SINK_SCHEMA)
    state = str(runner.root / "tiered-state")
    first = runner.run(tiered(KitchenSink(), state_uri=state), batches[:3], SINK_SCHEMA, name="t")
    second = runner.run(
        tiered(KitchenSinkRenamed(), state_uri=state),
        batches[3:],
        SINK_SCHEMA,
        name="t",
        total_batches=6,
    )
    assert first + second == native


def test_driver_stage_tasks_collect_young_objects_rarely_and_freeze_the_modules(
    runner: StreamRunner,
) -> None:
    """The flow driver's stage tasks take fsstate's collector settings while a processor runs
    (:func:`fsstate.osmem.task_collector`, as fsstate's keyed loop in Spark's operator)."""
    batches = [[{"k": f"k{i % 5}", "v": i} for i in range(30)]]
    got = runner.run(GcProbe(), batches, GC_PROBE_SCHEMA, pandas=False, driver=True)
    # rows: (batch, k, young, frozen)
    assert sorted(r[1] for r in got) == [f"k{i}" for i in range(5)]
    assert {r[2] for r in got} == {YOUNG_OBJECTS_MAX}
    assert min(r[3] for r in got) > 10_000  # the modules (tens of thousands of objects)
