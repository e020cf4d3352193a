"""Spark suite fixtures: a :class:`tests.support.stream.StreamRunner` per test and the memo of
native runs shared between tests (the session, S3 server and py-files zip come from
:mod:`tests.support.plugin`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.stream import StreamRunner


@pytest.fixture(scope="session")
def native_results() -> dict[str, list[tuple[Any, ...]]]:
    """Outputs of native runs shared between tests that compare against the same input."""
    return {}


@pytest.fixture()
def runner(spark: SparkSession, tmp_path: Path) -> StreamRunner:
    """A StreamRunner writing under the test's tmp_path."""
    return StreamRunner(spark, tmp_path)
