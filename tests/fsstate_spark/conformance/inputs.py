"""The input files of Spark's transformWithState tests, as JSON rows.

Spark writes text files (``"0, 123"``) and splits them into ``id`` (string) and
``temperature`` (int); here each is one JSON file of ``{"id": ..., "temperature": ...}`` rows,
read with the schema :data:`~tests.fsstate_spark.conformance.harness.ID_TEMPERATURE`. Names
follow Spark's helpers (``_prepare_test_resource1`` is :data:`RESOURCE1`).
"""

from __future__ import annotations

from typing import Any

from tests.fsstate_spark.conformance.harness import rows

ID_TEMP = ("id", "temperature")

RESOURCE1 = rows(ID_TEMP, ("0", 123), ("0", 46), ("1", 146), ("1", 346))
RESOURCE2 = rows(ID_TEMP, ("0", 123), ("0", 223), ("0", 323), ("1", 246), ("1", 6))
RESOURCE3 = rows(ID_TEMP, ("0", 123), ("1", 6))
# the second file of Spark's initial-state tests: key 3 only in the initial state before
INIT_TEST2 = rows(ID_TEMP, ("0", 67), ("3", 12))


def init_rows(spark: Any, schema: str = "id string, initVal int") -> Any:
    """Spark's initial state ``[("0", 789), ("3", 987)]`` as a DataFrame."""
    return spark.createDataFrame([("0", 789), ("3", 987)], schema)
