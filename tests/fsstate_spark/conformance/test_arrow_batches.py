"""Spark's Arrow batching scenarios against fsstate's ways (pandas flavour only, as in
Spark): how many frames a key's rows arrive in under ``maxBytesPerBatch`` and
``maxRecordsPerBatch`` limits (with and without an initial state), and int output coerced to a
DECIMAL column (``test_pandas_transform_with_state.py``).

Spark's int-to-decimal test is a batch query; it is ported as a streaming one (one
micro-batch) so that the flow driver runs it too. With the coercion off, Spark's test (master)
expects the message "Cannot convert the output value"; pyspark 4.3 says "Failed to convert
the value of the column 'decimal_result' with type 'int64' to Arrow type 'decimal128(10, 2)'",
which is what the reference is held to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import DataFrame

from tests.fsstate_spark.conformance import processors as p
from tests.fsstate_spark.conformance.harness import (
    Conformance,
    Difference,
    Scenario,
    cases,
    flavours,
    rows,
    step,
)
from tests.fsstate_spark.conformance.inputs import RESOURCE1, RESOURCE2, init_rows

CHUNK_OUT = "id string, chunkCount int"
SPLIT = {0: [("0", 2), ("1", 2)], 1: [("0", 3), ("1", 2)]}  # one frame per row
WHOLE = {0: [("0", 1), ("1", 1)], 1: [("0", 1), ("1", 1)]}  # one frame per key
COERCION = "spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled"


def _init(conf: Conformance, flavour: str) -> DataFrame:
    return init_rows(conf.spark)


def _chunks(
    test: str,
    conf_key: str,
    value: str,
    expected: Mapping[int, Sequence[tuple[Any, ...]]],
    differences: tuple[Difference, ...],
) -> list[Scenario]:
    """Spark's two queries under one limit: without and with an initial state."""
    label = f"{test}: {conf_key.rsplit('.', 1)[-1]}={value}"
    plain = flavours(pandas=p.PandasChunkCount)
    initial = flavours(pandas=p.PandasChunkCountInitial)
    return [
        Scenario(
            name,
            (step(processors, CHUNK_OUT, RESOURCE1, RESOURCE2),),
            initial_state=init,
            conf={conf_key: value},
            expected=expected,
            expected_columns=("id", "chunkCount"),
            differences=differences,
            slow=init is not None,
        )
        for name, processors, init in (
            (label, plain, None),
            (f"{label}, initial state", initial, _init),
        )
    ]


BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
DECIMAL_INPUT = rows(("id", "value"), ("1", "a"), ("1", "b"), ("2", "c"))
DECIMAL_OUT = "id string, decimal_result decimal(10,2)"

SCENARIOS = [
    *_chunks("test_transform_with_state_with_bytes_limit", BYTES, "2", SPLIT, ()),
    *_chunks("test_transform_with_state_with_bytes_limit", BYTES, "100000", WHOLE, ()),
    *_chunks("test_transform_with_state_with_records_limit", RECORDS, "1", SPLIT, ()),
    *_chunks("test_transform_with_state_with_records_limit", RECORDS, "-1", WHOLE, ()),
    Scenario(
        "test_transform_with_state_int_to_decimal_coercion: enabled",
        (step(flavours(pandas=p.PandasIntToDecimal), DECIMAL_OUT, DECIMAL_INPUT),),
        input_schema="id STRING, value STRING",
        conf={COERCION: "true"},
        expected={0: [("1", Decimal("12345.00")), ("2", Decimal("12345.00"))]},
        expected_columns=("id", "decimal_result"),
    ),
    Scenario(
        "test_transform_with_state_int_to_decimal_coercion: disabled",
        (
            step(
                flavours(pandas=p.PandasIntToDecimal),
                DECIMAL_OUT,
                DECIMAL_INPUT,
                spark_error="to Arrow type 'decimal128(10, 2)'",
            ),
        ),
        input_schema="id STRING, value STRING",
        conf={COERCION: "false"},
    ),
]


# make test-compat-full runs it on every matrix entry, every way
@pytest.mark.compat_full
@pytest.mark.parametrize(("scenario", "way", "flavour"), cases(SCENARIOS))
def test_arrow_batch_scenarios_match_sparks_handles(
    conformance: Conformance, scenario: Scenario, way: str, flavour: str
) -> None:
    """Arrow batch limits and output coercion: the way hands the processor its rows in the
    frames Spark's handles do and converts its output as Spark does, batch by batch."""
    conformance.check(scenario, way, flavour)
