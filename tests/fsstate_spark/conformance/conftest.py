"""The conformance suite's fixture: one :class:`~tests.fsstate_spark.conformance.harness.
Conformance` per test session, so Spark's handles run once per scenario and flavour and every
way compares with that run."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from tests.fsstate_spark.conformance.harness import Conformance


@pytest.fixture(scope="session")
def conformance(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Conformance:
    """The session's conformance runner (runs under a session temporary directory)."""
    return Conformance(spark, tmp_path_factory.mktemp("conformance"))
