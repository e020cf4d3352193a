"""Map and list iteration order against Spark's own handles, unsorted.

Spark's MapState iterates in the byte order of the encoded user key (a RocksDB prefix scan),
neither in insertion nor in last-write order; its ListState in append order. The processor
emits ``keys()`` / ``values()`` / ``iterator()`` and ``ListState.get()`` exactly as returned,
for string, BIGINT, INT, composite and DOUBLE user keys, with updates, removes, re-inserts
and clears across micro-batches; tiered state must give the same strings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from fsstate_spark import tiered
from tests.fsstate_spark.conftest import Tiered
from tests.support.processors import (
    LONG_S,
    ORDER_BATCHES,
    ORDER_INPUT_SCHEMA,
    ORDER_SCHEMA,
    MapListOrder,
)
from tests.support.stream import StreamRunner


@pytest.mark.parametrize("flavour", ["pandas", "row"])
def test_streaming_order_matches_native(
    tiered_loop: Tiered, runner: StreamRunner, tmp_path: Path, flavour: str
) -> None:
    """Unsorted map and list order equals Spark's handles after every micro-batch."""
    kwargs: dict[str, Any] = {
        "batches": ORDER_BATCHES,
        "output_schema": ORDER_SCHEMA,
        "pandas": flavour == "pandas",
        "input_schema": ORDER_INPUT_SCHEMA,
    }
    native = runner.run(MapListOrder(flavour), **kwargs)
    state = str(tmp_path / "state")
    got = runner.run(tiered_loop(MapListOrder(flavour), state_uri=state), **kwargs)
    assert got == native
    assert [r[0] for r in native] == [0, 0, 1, 1, 2, 2]
    # the order is neither insertion nor sorted order: 256 before 1, -1 last, '' after 'B'
    g1 = json.loads(native[0][2])
    assert g1["long_keys"] == [256, 1, 2, 255, -1]
    assert g1["str_keys"][:3] == [LONG_S, "", "B"]
    assert json.loads(native[0][3]) == [5, 3, 9, 10]


def test_bounded_order_matches_native(spark: SparkSession, tmp_path: Path) -> None:
    """A batch DataFrame (one call per key, in-memory state) iterates in the same order."""
    rows = [r for batch in ORDER_BATCHES for r in batch]
    df = spark.createDataFrame(rows, ORDER_INPUT_SCHEMA)

    def run(processor: Any) -> list[tuple[Any, ...]]:
        grouped = df.groupBy("k")
        out = grouped.transformWithStateInPandas(processor, ORDER_SCHEMA, "Update", "None")
        return sorted(tuple(r) for r in out.collect())

    native = run(MapListOrder())
    assert len(native) == 2
    assert run(tiered(MapListOrder(), state_uri=str(tmp_path / "state"))) == native
