"""Spark suite fixtures: a :class:`tests.support.stream.StreamRunner` per test, the memo of
native runs shared between tests, and ``tiered_loop``: ``tiered()`` with fsstate's keyed loop
and with PySpark's own (the session, S3 server and py-files zip come from
:mod:`tests.support.plugin`; the session's Python workers are fsstate's,
``conf/spark-defaults.conf``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from fsstate_spark import tiered
from fsstate_spark.tiered.processor import TieredProcessor
from tests.support.stream import StreamRunner

Tiered = Callable[..., TieredProcessor]


@pytest.fixture(scope="session")
def native_results() -> dict[str, list[tuple[Any, ...]]]:
    """Outputs of native runs shared between tests that compare against the same input."""
    return {}


@pytest.fixture()
def runner(spark: SparkSession, tmp_path: Path) -> StreamRunner:
    """A StreamRunner writing under the test's tmp_path."""
    return StreamRunner(spark, tmp_path)


@pytest.fixture(params=["fast", "stock"])
def tiered_loop(request: pytest.FixtureRequest) -> Tiered:
    """``tiered`` with fsstate's keyed loop (``fast``) or PySpark's own per-key loop
    (``stock``, ``fast_loop=False``): every tiered() equivalence suite runs both ways."""
    fast = request.param == "fast"

    def make(processor: StatefulProcessor, **kwargs: Any) -> TieredProcessor:
        return tiered(processor, fast_loop=fast, **kwargs)

    return make
