"""Spark's state-variable scenarios against fsstate's ways: a value state never set, list
state (interleaved iterators, 190-element lists, TTL), map state (iteration order, TTL),
value state with TTL, TTL expiry, and the query outputs of the state-metadata tests
(``test_pandas_transform_with_state_state_variable.py`` and its Row twin).

The state-metadata and state-store data source assertions of Spark's metadata tests read
Spark's own state store: they are listed as scenarios that cannot apply (skipped), while the
outputs of the same queries are compared.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from pyspark.sql import DataFrame

from tests.fsstate_spark.conformance import processors as p
from tests.fsstate_spark.conformance.harness import (
    ALL_WAYS,
    STATE_API_WAYS,
    Conformance,
    Factory,
    Scenario,
    cases,
    flavours,
    rows,
    step,
)
from tests.fsstate_spark.conformance.inputs import ID_TEMP, RESOURCE1, RESOURCE2, init_rows

COUNT_OUT = "id string, countAsString string"
TWO_EACH = {0: [("0", "2"), ("1", "2")]}
COUNTS = {0: [("0", "2"), ("1", "2")], 1: [("0", "3"), ("1", "2")]}
COLUMNS = ("id", "countAsString")
LIST_STATE = flavours(p.PandasListState, p.RowListState)
MAP_TTL = flavours(p.PandasMapStateTTL, p.RowMapStateTTL)
STATE_SOURCE = {
    ALL_WAYS: "reads Spark's state-metadata / statestore data sources on the query's "
    "checkpoint: Spark's own store, which holds no user state under tiered() and does not "
    "exist under the flow driver"
}
TTL_MS, GAP_S = 300, 0.4  # every TTL value is expired by the next micro-batch (certain)


def _ttl_expiry_expected() -> dict[int, list[tuple[str, int]]]:
    out = {}
    for batch in range(3):
        out[batch] = [
            row
            for key in ("0", "1")
            for row in (
                (f"ttl-count-{key}", 1),
                (f"count-{key}", batch + 1),
                (f"ttl-list-state-count-{key}", 1),
                (f"ttl-map-state-count-{key}", 1),
            )
        ]
    return out


def _metadata_init(conf: Conformance, flavour: str) -> DataFrame:
    return init_rows(conf.spark, "id string, temperature int")


def _state_source(name: str, processors: Mapping[str, Factory]) -> Scenario:
    return Scenario(name, (step(processors, COUNT_OUT, RESOURCE1),), not_for=STATE_SOURCE)


SCENARIOS = [
    Scenario(
        "test_transform_with_state_non_exist_value_state",
        (step(flavours(p.PandasMissingValue, p.RowMissingValue), COUNT_OUT, RESOURCE1),),
        expected={0: [("0", "0"), ("1", "0")]},
        expected_columns=COLUMNS,
    ),
    Scenario(
        "test_transform_with_state_list_state",
        (step(LIST_STATE, COUNT_OUT, RESOURCE1),),
        time_mode="ProcessingTime",
        expected=TWO_EACH,
        expected_columns=COLUMNS,
    ),
    Scenario(
        "test_transform_with_state_list_state_large_list",
        (
            step(
                flavours(p.PandasLargeList, p.RowLargeList),
                "id string, prevElements string, updatedElements string",
                RESOURCE1,
                RESOURCE2,
            ),
        ),
        expected={
            b: [(k, ",".join(map(str, range(prev))), ",".join(map(str, range(new)))) for k in "01"]
            for b, prev, new in ((0, 0, 100), (1, 100, 190))
        },
        expected_columns=("id", "prevElements", "updatedElements"),
    ),
    Scenario(
        "test_transform_with_state_list_state_large_ttl",
        (step(flavours(p.PandasListStateTTL, p.RowListStateTTL), COUNT_OUT, RESOURCE1),),
        time_mode="ProcessingTime",
        expected=TWO_EACH,
        expected_columns=COLUMNS,
    ),
    Scenario(
        "test_transform_with_state_map_state",
        (step(flavours(p.PandasMapState, p.RowMapState), COUNT_OUT, RESOURCE1),),
        expected=TWO_EACH,
        expected_columns=COLUMNS,
    ),
    Scenario(  # also test_transform_with_map_state_metadata: the very same query
        "test_transform_with_state_map_state_large_ttl",
        (step(MAP_TTL, COUNT_OUT, RESOURCE1),),
        time_mode="ProcessingTime",
        expected=TWO_EACH,
        expected_columns=COLUMNS,
    ),
    Scenario(
        "test_value_state_ttl_basic",
        (
            step(
                flavours(p.PandasViolationsTTL, p.RowViolationsTTL),
                COUNT_OUT,
                RESOURCE1,
                RESOURCE2,
            ),
        ),
        time_mode="ProcessingTime",
        expected=COUNTS,
        expected_columns=COLUMNS,
    ),
    Scenario(
        "test_value_state_ttl_expiration",
        (
            step(
                flavours(lambda: p.PandasTTLCounts(TTL_MS), lambda: p.RowTTLCounts(TTL_MS)),
                "id string, count int",
                *[rows(ID_TEMP, ("1", 0), ("0", 0))] * 3,
            ),
        ),
        time_mode="ProcessingTime",
        gap_s=GAP_S,
        expected=_ttl_expiry_expected(),
        expected_columns=("id", "count"),
    ),
    Scenario(
        "test_transform_with_map_state_metadata_with_init_state",
        (step(MAP_TTL, COUNT_OUT, RESOURCE1),),
        slow=True,
        time_mode="ProcessingTime",
        initial_state=_metadata_init,
        expected=TWO_EACH,
        expected_columns=COLUMNS,
    ),
    Scenario(
        "test_transform_with_list_state_metadata",
        (step(LIST_STATE, COUNT_OUT, RESOURCE1, RESOURCE2),),
        slow=True,
        time_mode="ProcessingTime",
        expected=COUNTS,
        expected_columns=COLUMNS,
    ),
    Scenario(
        "test_transform_with_value_state_metadata",
        (step(flavours(p.PandasViolations, p.RowViolations), COUNT_OUT, RESOURCE1, RESOURCE2),),
        time_mode="ProcessingTime",
        conf={"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"},
        slow=True,
        expected=COUNTS,
        expected_columns=COLUMNS,
    ),
    _state_source("test_transform_with_list_state_metadata: state sources", LIST_STATE),
    _state_source(
        "test_transform_with_value_state_metadata: state sources, change feed",
        flavours(p.PandasViolations, p.RowViolations),
    ),
]


# make test-compat-full runs it on every matrix entry, every way
@pytest.mark.compat_full
@pytest.mark.parametrize(("scenario", "way", "flavour"), cases(SCENARIOS, STATE_API_WAYS))
def test_state_variable_scenarios_match_sparks_handles(
    conformance: Conformance, scenario: Scenario, way: str, flavour: str
) -> None:
    """Value, list and map state, with and without TTL, read back as Spark's handles read
    them: the way's output is Spark's, batch by batch."""
    conformance.check(scenario, way, flavour)
