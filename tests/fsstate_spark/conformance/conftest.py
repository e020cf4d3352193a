"""The conformance suite's fixture: one :class:`~tests.fsstate_spark.conformance.harness.
Conformance` per test session, compared with the stored references of Spark's handles
(:mod:`~tests.fsstate_spark.conformance.reference`), or, with
``FSSTATE_CONFORMANCE_REFERENCE`` set to ``live``, ``write`` or ``check``, with Spark's handles
run once per scenario and flavour in the session."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from tests.fsstate_spark.conformance.harness import Conformance
from tests.fsstate_spark.conformance.reference import StoredReferences, mode


@pytest.fixture(scope="session")
def conformance(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Conformance:
    """The session's conformance runner (runs under a session temporary directory)."""
    stored = StoredReferences() if mode() == "stored" else None
    return Conformance(spark, tmp_path_factory.mktemp("conformance"), stored)
