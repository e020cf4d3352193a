"""Spark's basic transformWithState scenarios against fsstate's ways: value state with a
deleted state variable, restarts, multi-column keys, batch queries, composite and large
values (``test_pandas_transform_with_state.py`` and its Row twin).

Every case runs one scenario one way (``tiered``, ``driver``) in one flavour (pandas, Row) and
compares it batch by batch with Spark's handles on the same input (see
:mod:`~tests.fsstate_spark.conformance.harness`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fsstate_spark.conformance import processors as p
from tests.fsstate_spark.conformance.harness import (
    Conformance,
    Scenario,
    cases,
    flavours,
    rows,
    step,
)
from tests.fsstate_spark.conformance.inputs import RESOURCE1, RESOURCE2, init_rows

COUNT_OUT = "id string, countAsString string"
VIOLATIONS = flavours(p.PandasViolations, p.RowViolations)
COUNTS = {0: [("0", "2"), ("1", "2")], 1: [("0", "3"), ("1", "2")]}
BATCH_ONLY = {"driver": "a batch query: the flow driver runs streaming queries only"}

THREE_COLUMNS = ("id1", "temperature", "id2")
SPLIT_KEY_INPUT = rows(THREE_COLUMNS, ("0", 123, "1"), ("0", 46, "1"), ("1", 146, "2"))
SPLIT_KEY_INPUT += rows(THREE_COLUMNS, ("1", 346, "2"))


def _split_key_init(conf: Conformance, flavour: str) -> Any:
    return conf.spark.createDataFrame(
        [(789, "0", "1"), (987, "3", "2")], "initVal int, id1 string, id2 string"
    )


def _init(conf: Conformance, flavour: str) -> Any:
    return init_rows(conf.spark)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


NESTED = (
    "struct<intValue:int,doubleValue:double,arrayValue:array<string>,mapValue:map<string,string>>"
)
COMPOSITE_OUT = (
    "primitiveValue string, listOfPrimitive array<string>, mapOfPrimitive map<string,string>, "
    f"listOfComposite array<{NESTED}>, mapOfComposite map<string,{NESTED}>"
)
COMPOSITE_STATE_OUT = (
    "id string, value_arr string, list_state_arr string, map_state_arr string, "
    "nested_map_state_arr string"
)
ATTRS, CONFS = {"key1": [1], "key2": [10]}, {"e1": {"e2": 5, "e3": 10}}


def _composite_state_expected() -> dict[int, list[tuple[Any, ...]]]:
    first = [(k, "0", "0", _dumps(ATTRS), _dumps(CONFS)) for k in ("0", "1")]
    second = [
        (
            k,
            str(total),
            f"0,{total}",
            _dumps({**ATTRS, k: [total]}),
            _dumps({"e1": {**CONFS["e1"], k: total}}),
        )
        for k, total in (("0", 669), ("1", 252))
    ]
    return {0: first, 1: second}


SCENARIOS = [
    Scenario(
        "test_transform_with_state_basic",
        (step(VIOLATIONS, COUNT_OUT, RESOURCE1, RESOURCE2),),
        expected=COUNTS,
        expected_columns=("id", "countAsString"),
    ),
    Scenario(
        "test_transform_with_state_query_restarts",
        (step(VIOLATIONS, COUNT_OUT, RESOURCE1), step(VIOLATIONS, COUNT_OUT, RESOURCE2)),
        expected=COUNTS,
        expected_columns=("id", "countAsString"),
    ),
    Scenario(
        "test_transform_with_state_non_contiguous_grouping_cols",
        (
            step(
                flavours(p.PandasAccumulate, p.RowAccumulate),
                "id1 string, id2 string, value string",
                SPLIT_KEY_INPUT,
            ),
        ),
        input_schema="id1 STRING, temperature INT, id2 STRING",
        keys=("id1", "id2"),
        expected={0: [("0", "1", "169"), ("1", "2", "492")]},
        expected_columns=("id1", "id2", "value"),
    ),
    Scenario(
        "test_transform_with_state_non_contiguous_grouping_cols_with_init_state",
        (
            step(
                flavours(p.PandasAccumulate, p.RowAccumulate),
                "id1 string, id2 string, value string",
                SPLIT_KEY_INPUT,
            ),
        ),
        input_schema="id1 STRING, temperature INT, id2 STRING",
        keys=("id1", "id2"),
        initial_state=_split_key_init,
        expected={0: [("0", "1", str(789 + 169)), ("1", "2", "492")]},
        expected_columns=("id1", "id2", "value"),
    ),
    Scenario(
        "test_transform_with_state_batch_query",
        (step(flavours(p.PandasMapState, p.RowMapState), COUNT_OUT, RESOURCE1),),
        batch_query=True,
        expected={0: [("0", "2"), ("1", "2")]},
        expected_columns=("id", "countAsString"),
        not_for=BATCH_ONLY,
    ),
    Scenario(
        "test_transform_with_state_batch_query_initial_state",
        (
            step(
                flavours(p.PandasAccumulate, p.RowAccumulate), "id string, value string", RESOURCE1
            ),
        ),
        batch_query=True,
        initial_state=_init,
        expected={0: [("0", str(789 + 169)), ("1", "492")]},
        expected_columns=("id", "value"),
        not_for=BATCH_ONLY,
    ),
    Scenario(
        "test_transform_with_state_in_pandas_composite_type",
        (
            step(
                flavours(p.PandasCompositeType, p.RowCompositeType),
                COMPOSITE_STATE_OUT,
                RESOURCE1,
                RESOURCE2,
            ),
        ),
        expected=_composite_state_expected(),
        expected_columns=(
            "id",
            "value_arr",
            "list_state_arr",
            "map_state_arr",
            "nested_map_state_arr",
        ),
    ),
    Scenario(
        "test_composite_output_schema",
        (
            step(
                flavours(p.PandasCompositeOutput, p.RowCompositeOutput),
                COMPOSITE_OUT,
                RESOURCE1,
                RESOURCE2,
            ),
        ),
        expected={
            0: [("key_0_count_2",), ("key_1_count_2",)],
            1: [("key_0_count_5",), ("key_1_count_4",)],
        },
        expected_columns=("primitiveValue",),
    ),
    Scenario(
        "test_transform_with_state_large_values",
        (
            step(
                flavours(p.PandasLargeValue, p.RowLargeValue),
                "id string, valueStateResult string, listStateResult string, mapStateResult string",
                RESOURCE1,
            ),
        ),
        expected={0: [("0",), ("1",)]},
        expected_columns=("id",),
    ),
]


# every other minor runs it, on its tiered() way (devkit/compat_matrix.py)
@pytest.mark.compat
@pytest.mark.parametrize(("scenario", "way", "flavour"), cases(SCENARIOS))
def test_basic_scenarios_match_sparks_handles(
    conformance: Conformance, scenario: Scenario, way: str, flavour: str
) -> None:
    """Value, list and map state with restarts, multi-column keys, batch queries, nested and
    512 KiB values: the way's output is Spark's, batch by batch."""
    conformance.check(scenario, way, flavour)
