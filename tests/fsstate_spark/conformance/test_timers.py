"""Spark's timer and event-time scenarios against fsstate's ways: processing-time timers,
event-time timers and late rows, a watermark without event-time mode, an output event time
for a downstream stateful operator, and the same on one shuffle partition
(``test_pandas_transform_with_state.py`` and its Row twin).

Processing-time values are wall-clock: they are blanked before the comparison, and only
what the timing makes certain is asserted on every way's output (a timer set 1 ms after a
batch's time fires in the next batch; its expiry precedes that batch's time).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.fsstate_spark.conformance import processors as p
from tests.fsstate_spark.conformance.harness import (
    Conformance,
    Scenario,
    cases,
    flavours,
    rows,
    step,
)
from tests.fsstate_spark.conformance.inputs import ID_TEMP, RESOURCE1, RESOURCE2, RESOURCE3

PROC_OUT = "id string, countAsString string, timeValues string"
EVENT_OUT = "id string, timestamp string"
EVENT_BATCHES = (
    rows(ID_TEMP, ("a", 20)),
    rows(ID_TEMP, ("a", 4)),
    rows(ID_TEMP, ("a", 2), ("a", 11), ("a", 13), ("a", 15)),
)
NO_EVENT_TIME_COLUMN = {
    "driver": "eventTimeColumnName (the output's event time for a downstream stateful "
    "operator): the flow driver refuses it (ConfigError)"
}


def _event_time(delay: str) -> Any:
    def prepare(df: DataFrame) -> DataFrame:
        seconds = F.from_unixtime(F.col("temperature")).cast("timestamp")
        return df.select("id", seconds.alias("eventTime")).withWatermark("eventTime", delay)

    return prepare


def _blank_time(batch: int, row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "timeValues": None}


def _timer_before_batch_time(batches: Mapping[int, list[dict[str, Any]]], who: str) -> None:
    """Spark's check: key 0's timer, fired in a batch, expired before that batch's time."""
    for batch, out in batches.items():
        fired = [int(r["timeValues"]) for r in out if r["countAsString"] == "-1"]
        now = [int(r["timeValues"]) for r in out if r["countAsString"] != "-1" and r["id"] == "0"]
        for expiry in fired:
            assert now and all(expiry < t for t in now), (
                f"{who} batch {batch}: a timer expiring at {expiry} fired in a batch at {now}"
            )
    assert any(r["countAsString"] == "-1" for b in batches.values() for r in b), (
        f"{who}: no timer fired: {dict(batches)}"
    )


def _proc_timer(name: str, partitions: int, slow: bool = False) -> Scenario:
    return Scenario(
        name,
        (
            step(
                flavours(p.PandasProcTimeCount, p.RowProcTimeCount),
                PROC_OUT,
                RESOURCE3,
                RESOURCE1,
                RESOURCE2,
            ),
        ),
        time_mode="ProcessingTime",
        partitions=partitions,
        slow=slow,
        gap_s=0.01,
        normalize=_blank_time,
        check=_timer_before_batch_time,
        expected={
            0: [("0", "1"), ("1", "1")],
            1: [("0", "3"), ("0", "-1"), ("1", "3")],
            2: [("0", "3"), ("0", "-1"), ("1", "5")],
        },
        expected_columns=("id", "countAsString"),
    )


def _event_timer(name: str, partitions: int, slow: bool = False) -> Scenario:
    return Scenario(
        name,
        (step(flavours(p.PandasMaxEventTime, p.RowMaxEventTime), EVENT_OUT, *EVENT_BATCHES),),
        time_mode="EventTime",
        prepare=_event_time("10 seconds"),
        partitions=partitions,
        slow=slow,
        expected={
            0: [("a", "20"), ("a-expired", "0")],
            1: [("a", "4"), ("a-expired", "10000")],
            2: [("a", "15"), ("a-expired", "10000")],
        },
        expected_columns=("id", "timestamp"),
    )


def _min_event_time(time_mode: str, slow: bool = False) -> Scenario:
    return Scenario(
        f"test_transform_with_state_with_wmark_and_non_event_time: {time_mode}",
        (step(flavours(p.PandasMinEventTime, p.RowMinEventTime), EVENT_OUT, *EVENT_BATCHES),),
        time_mode=time_mode,
        prepare=_event_time("10 seconds"),
        slow=slow,
        expected={0: [("a", "20")], 1: [("a", "4")], 2: [("a", "2")]},
        expected_columns=("id", "timestamp"),
    )


def _chaining(grouping: tuple[str, ...], slow: bool = False) -> Scenario:
    return Scenario(
        f"test_transform_with_state_chaining_ops: by {', '.join(grouping)}",
        (
            step(
                flavours(p.PandasChainingOps, p.RowChainingOps),
                "id string, outputTimestamp timestamp",
                rows(ID_TEMP, ("a", 10), ("b", 15)),
                rows(ID_TEMP, ("a", 11), ("c", 25)),
                rows(ID_TEMP, ("a", 5)),
            ),
        ),
        time_mode="EventTime",
        output_mode="Append",
        sink_mode="append",
        event_time_column="outputTimestamp",
        prepare=_event_time("5 seconds"),
        slow=slow,
        downstream=lambda df: df.groupBy(*grouping).count(),
        expected={0: [], 1: [(10, 1)], 2: [(11, 1), (15, 1)]},
        expected_columns=("seconds", "count"),
        normalize=lambda b, r: {**r, "seconds": int(r["outputTimestamp"].timestamp())},
        not_for=NO_EVENT_TIME_COLUMN,
    )


SINGLE = "test_transform_with_state_with_timers_single_partition"
SCENARIOS = [
    _proc_timer("test_transform_with_state_proc_timer", 2),
    _event_timer("test_transform_with_state_event_time", 2),
    _min_event_time("None"),
    _min_event_time("ProcessingTime", slow=True),
    _chaining(("outputTimestamp",)),
    _chaining(("outputTimestamp", "id"), slow=True),
    _event_timer(f"{SINGLE}: event time", 1, slow=True),
    _proc_timer(f"{SINGLE}: proc timer", 1, slow=True),
]


# every other minor runs it, on its tiered() way (devkit/compat_matrix.py)
@pytest.mark.compat
@pytest.mark.parametrize(("scenario", "way", "flavour"), cases(SCENARIOS))
def test_timer_scenarios_match_sparks_handles(
    conformance: Conformance, scenario: Scenario, way: str, flavour: str
) -> None:
    """Processing-time and event-time timers, late rows, watermarks and a downstream stateful
    operator: the way's output is Spark's, batch by batch (wall-clock values blanked)."""
    conformance.check(scenario, way, flavour)
