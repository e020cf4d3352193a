"""Spark's initial-state scenarios against fsstate's ways: an initial state read in the first
micro-batch only, with a downstream transformation, with timers registered while it is read,
and with several rows per key read back from Spark's state data source; the timer and
several-row ones again on one shuffle partition
(``test_pandas_transform_with_state_state_variable.py`` and its Row twin).
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.fsstate_spark.conformance import processors as p
from tests.fsstate_spark.conformance.harness import (
    ALL_WAYS,
    Conformance,
    Scenario,
    cases,
    flavours,
    step,
)
from tests.fsstate_spark.conformance.inputs import INIT_TEST2, RESOURCE1, init_rows

OUT = "id string, value string"
ACCUMULATE = flavours(p.PandasAccumulate, p.RowAccumulate)
INIT_EXPECTED = {
    0: [("0", str(789 + 123 + 46)), ("1", str(146 + 346))],
    1: [("0", str(789 + 123 + 46 + 67)), ("3", str(987 + 12))],
}


def _init(conf: Conformance, flavour: str) -> DataFrame:
    return init_rows(conf.spark)


def _to_json(df: DataFrame) -> DataFrame:
    return df.select(
        F.col("id").cast("string").alias("key"), F.to_json(F.struct(F.col("value"))).alias("value")
    )


def _blank_expiry(batch: int, row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "value": None} if row["id"].endswith("-expired") else row


def _with_timers(name: str, partitions: int, slow: bool = False) -> Scenario:
    return Scenario(
        name,
        (
            step(
                flavours(p.PandasAccumulateInitialTimers, p.RowAccumulateInitialTimers),
                OUT,
                RESOURCE1,
                INIT_TEST2,
            ),
        ),
        time_mode="ProcessingTime",
        initial_state=_init,
        partitions=partitions,
        slow=slow,
        normalize=_blank_expiry,
        expected={
            0: [("0-expired", None), ("3-expired", None), *INIT_EXPECTED[0]],
            1: INIT_EXPECTED[1],
        },
        expected_columns=("id", "value"),
    )


def _multiple_rows(
    name: str, partitions: int, slow: bool = False
) -> tuple[Scenario, Scenario, Scenario]:
    """Spark's test in three parts: a first query (list state), a second one whose initial
    state is the first one's list state read with Spark's state data source (several rows per
    key), and the second one's list state read back the same way (cannot apply)."""
    first = Scenario(
        f"{name}: first query",
        (
            step(
                flavours(p.PandasListState, p.RowListState),
                "id string, countAsString string",
                RESOURCE1,
            ),
        ),
        partitions=partitions,
        slow=slow,
        expected={0: [("0", "2"), ("1", "2")]},
        expected_columns=("id", "countAsString"),
    )

    def from_state_source(conf: Conformance, flavour: str) -> DataFrame:
        columns = ("key.id AS id", "list_element.temperature AS initVal")
        return conf.spark_state(first, flavour, "listState1", columns)

    listed = flavours(p.PandasAccumulateListInitial, p.RowAccumulateListInitial)
    second = Scenario(
        f"{name}: second query",
        (step(listed, OUT, RESOURCE1, INIT_TEST2),),
        initial_state=from_state_source,
        partitions=partitions,
        slow=slow,
        expected={
            0: [("0", str(123 + 46)), ("1", str(146 + 346))],
            1: [("0", str(123 + 46 + 67)), ("3", "12")],
        },
        expected_columns=("id", "value"),
    )
    state_source = Scenario(
        f"{name}: list state read back",
        (step(listed, OUT, RESOURCE1, INIT_TEST2),),
        not_for={
            ALL_WAYS: "reads the second query's list state with Spark's statestore data source: "
            "Spark's own store, which holds no user state under tiered() and does not exist "
            "under the flow driver"
        },
    )
    return first, second, state_source


SINGLE = "test_transform_with_state_with_timers_single_partition"
SCENARIOS = [
    Scenario(
        "test_transform_with_state_init_state",
        (step(ACCUMULATE, OUT, RESOURCE1, INIT_TEST2),),
        initial_state=_init,
        expected=INIT_EXPECTED,
        expected_columns=("id", "value"),
    ),
    Scenario(
        "test_transform_with_state_init_state_with_extra_transformation",
        (step(ACCUMULATE, OUT, RESOURCE1, INIT_TEST2),),
        initial_state=_init,
        downstream=_to_json,
        expected={
            b: [(k, f'{{"value":"{v}"}}') for k, v in want] for b, want in INIT_EXPECTED.items()
        },
        expected_columns=("key", "value"),
    ),
    _with_timers("test_transform_with_state_init_state_with_timers", 2),
    *_multiple_rows("test_transform_with_state_restart_with_multiple_rows_init_state", 2),
    _with_timers(f"{SINGLE}: init state with timers", 1, slow=True),
    *_multiple_rows(f"{SINGLE}: restart with multiple rows init state", 1, slow=True)[:2],
]


# every other minor runs it, on its tiered() way (devkit/compat_matrix.py)
@pytest.mark.compat
@pytest.mark.parametrize(("scenario", "way", "flavour"), cases(SCENARIOS))
def test_initial_state_scenarios_match_sparks_handles(
    conformance: Conformance, scenario: Scenario, way: str, flavour: str
) -> None:
    """An initial state read once, with timers, downstream transformations and several rows
    per key: the way's output is Spark's, batch by batch."""
    conformance.check(scenario, way, flavour)
