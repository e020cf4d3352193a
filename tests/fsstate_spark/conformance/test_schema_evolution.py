"""Spark's state schema evolution scenarios (Avro state encoding) against fsstate's ways: one
checkpoint restarted with processors whose state schema adds, removes, reorders and widens
fields; a narrowing Spark refuses; a non-nullable state schema
(``test_pandas_transform_with_state.py`` and its Row twin).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from pyspark.sql.types import StructType

from tests.fsstate_spark.conformance import processors as p
from tests.fsstate_spark.conformance.harness import (
    STATE_API_WAYS,
    Batch,
    Conformance,
    Factory,
    Scenario,
    Step,
    cases,
    flavours,
    step,
)
from tests.fsstate_spark.conformance.inputs import RESOURCE1, RESOURCE2, RESOURCE3

AVRO = {"spark.sql.streaming.stateStore.encodingFormat": "avro"}


def _evolve(
    processors: Mapping[str, Factory], *batches: Batch, spark_error: str | None = None
) -> Step:
    """A restart with ``processors``; the output's ``value`` has their state's schema."""
    schema: StructType = processors["pandas"]().state_schema
    output = f"id string, value {schema.simpleString()}"
    return step(processors, output, *batches, spark_error=spark_error)


BASIC = flavours(p.PandasBasicState, p.RowBasicState)
ADDED = flavours(p.PandasAddedFields, p.RowAddedFields)
UPCAST = flavours(p.PandasUpcast, p.RowUpcast)

SCENARIOS = [
    Scenario(
        "test_schema_evolution_scenarios",
        (
            _evolve(BASIC, RESOURCE1),
            _evolve(ADDED, RESOURCE2),
            _evolve(flavours(p.PandasRemovedFields, p.RowRemovedFields), RESOURCE3),
            _evolve(flavours(p.PandasReorderedFields, p.RowReorderedFields), RESOURCE3),
            _evolve(UPCAST, RESOURCE3),
        ),
        conf=AVRO,
    ),
    Scenario(
        "test_schema_evolution_fails",
        (
            _evolve(ADDED, RESOURCE1),
            _evolve(UPCAST, RESOURCE2),
            _evolve(BASIC, RESOURCE3, spark_error="STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION"),
        ),
        conf=AVRO,
    ),
    Scenario(
        "test_not_nullable_fails",
        (
            _evolve(
                flavours(p.PandasNotNullableState, p.RowNotNullableState),
                RESOURCE1,
                spark_error="TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE",
            ),
        ),
        conf=AVRO,
    ),
]


# make test-compat-full runs it on every matrix entry, every way
@pytest.mark.compat_full
@pytest.mark.parametrize(("scenario", "way", "flavour"), cases(SCENARIOS, STATE_API_WAYS))
def test_schema_evolution_scenarios_match_sparks_handles(
    conformance: Conformance, scenario: Scenario, way: str, flavour: str
) -> None:
    """State schemas that change across restarts of one checkpoint: the way carries (or
    refuses) the state as Spark's handles do, batch by batch."""
    conformance.check(scenario, way, flavour)
