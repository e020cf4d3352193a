"""fsstate's figures per batch and operator on a classic session, against the truth.

One ``tiered()`` query per loop (fsstate's keyed loop on local state, PySpark's own per-key loop
on the S3 test server) and one flow run :class:`tests.support.metrics_runs.Ledger` over three
batches under a 256 KiB memory budget (spills), with rows cleared and TTL'd rows expiring:
every figure of every batch is compared with the state read at that version, the files storage
lists, and what the input implies (:func:`tests.support.metrics_runs.check_figures`). The
tiered runs also write the listener's JSON lines, one per batch, equal to ``progress``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from fsstate_spark import tiered
from fsstate_spark.metrics import BatchProgress
from tests.support.metrics_runs import (
    SPILL_BUDGET,
    Ledger,
    check_figures,
    restore_engine,
    run_query,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(autouse=True)
def _engine_restored(spark: SparkSession) -> Iterator[None]:
    yield
    restore_engine(spark)


@pytest.mark.parametrize("loop, where", [("fast", "local"), ("stock", "s3")])
def test_tiered_figures_equal_the_state_both_loops(
    spark: SparkSession, tmp_path: Path, loop: str, where: str, request: pytest.FixtureRequest
) -> None:
    if where == "s3":
        from tests.support.plugin import s3_options

        uri = request.getfixturevalue("s3_uri")
        kwargs = {"storage_options": s3_options(request.getfixturevalue("s3_server"))}
    else:
        uri, kwargs = str(tmp_path / "state"), {}
    proc = tiered(Ledger(), state_uri=uri, fast_loop=loop == "fast", **SPILL_BUDGET, **kwargs)
    lines = tmp_path / "progress.jsonl"
    result = run_query(spark, tmp_path, proc, listen_path=lines)
    history = check_figures(result, "Ledger", "tiered")
    assert result["last"].manifest_reads == 0  # every partition's receipt came back
    _budget_reclaimed(history)
    written = [json.loads(ln) for ln in lines.read_text().splitlines()]
    assert [w["batchId"] for w in written] == [b.batch_id for b in history]
    for w, b in zip(written, history):
        assert w["id"] == result["query"]
        assert w["stateOperators"] == b.to_json()["stateOperators"]


def test_flow_figures_equal_the_state(spark: SparkSession, tmp_path: Path) -> None:
    result = run_query(spark, tmp_path, Ledger(), flow=True)
    history = check_figures(result, "Ledger", "flow")
    assert result["last"].manifest_reads == 0
    _budget_reclaimed(history)


def _budget_reclaimed(history: list[BatchProgress]) -> None:
    """Under the small budget batch 0's state (over 1 MiB) does not stay in memory: the next
    batch reads it back from storage (the controller closed the idle stores)."""
    ops = [b.operator("Ledger") for b in history]
    assert ops[0].to_json()["memoryUsedBytes"] > 1024 * 1024
    assert ops[1].total("bytes_read") > 0 and ops[1].total("files_read") > 0
