"""Schema evolution of tiered state across restarts of a real streaming query: an allowed
change (widened, reordered, added or removed fields, as Spark's Avro state encoding allows) reads
the rows the earlier version stored; a forbidden one fails the restarted query with the typed
error before any state is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from fsstate_spark import tiered
from tests.support.evolution_processors import (
    OUT_SCHEMA,
    TotalsBadType,
    TotalsDropped,
    TotalsV1,
    TotalsV2,
)
from tests.support.stream import StreamRunner, query_versions

FIRST = [[{"k": "a", "v": 1}, {"k": "b", "v": 2}], [{"k": "a", "v": 3}]]
THEN = [[{"k": "a", "v": 10}, {"k": "b", "v": 20}, {"k": "c", "v": 5}], [{"k": "b", "v": 1}]]


def _versions(state_uri: Path) -> dict[tuple[str, int], list[int]]:
    out = {}
    for query in state_uri.iterdir():
        for part in (0, 1):
            out[(query.name, part)] = query_versions(query, "totals-op", part)
    return out


ALLOWED = {
    # fields reordered and widened, a nullable one added: version 1's rows read with them
    TotalsV2: [
        (2, "a", 3, 14, None),  # a row of version 1: count and total widened, last null
        (2, "b", 2, 22, None),
        (2, "c", 1, 5, None),
        (3, "b", 3, 23, "v20"),  # written by version 2
    ],
    # a field removed (as Spark's Avro encoding allows): version 1's rows read without it
    TotalsDropped: [
        (2, "a", None, 14, None),  # version 1's total of 'a' (4) read without its count
        (2, "b", None, 22, None),
        (2, "c", None, 5, None),
        (3, "b", None, 23, None),
    ],
}


@pytest.mark.parametrize("processor", list(ALLOWED), ids=lambda p: p.__name__)
def test_allowed_change_reads_old_rows_after_a_restart(
    spark: SparkSession, runner: StreamRunner, tmp_path: Path, processor: type
) -> None:
    state = tmp_path / "state"
    first = runner.run(
        tiered(TotalsV1(), state_uri=str(state), name="totals-op"), FIRST, OUT_SCHEMA, name="q"
    )
    assert first == [(0, "a", 1, 1, None), (0, "b", 1, 2, None), (1, "a", 2, 4, None)]
    then = runner.run(
        tiered(processor(), state_uri=str(state), name="totals-op"),
        THEN,
        OUT_SCHEMA,
        name="q",
        total_batches=4,
    )
    assert then == ALLOWED[processor]


@pytest.mark.parametrize(("processor", "field"), [(TotalsBadType, "'count' changed type")])
def test_forbidden_change_fails_the_restart_before_writing(
    spark: SparkSession, runner: StreamRunner, tmp_path: Path, processor: type, field: str
) -> None:
    state = tmp_path / "state"
    runner.run(
        tiered(TotalsV1(), state_uri=str(state), name="totals-op"), FIRST, OUT_SCHEMA, name="q"
    )
    before = _versions(state)
    with pytest.raises(Exception, match="SchemaEvolutionError") as info:
        runner.run(
            tiered(processor(), state_uri=str(state), name="totals-op"),
            THEN,
            OUT_SCHEMA,
            name="q",
            total_batches=4,
        )
    assert "state 'totals'" in str(info.value) and field in str(info.value)
    assert _versions(state) == before
