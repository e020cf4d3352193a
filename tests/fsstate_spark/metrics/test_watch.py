"""``fsstate-spark watch --once`` on a real tiered() query's state: the table fits 80 columns
and the JSON's figures are the newest versions' summaries, the same figures the listener
reported for the last batch (to the Prometheus exporter too); a location without state is one
line and exit code 2."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf
from fsstate.inspect.catalog import find_stores, read_store_manifest
from fsstate.storage.fileio import FileIO
from fsstate_spark import tiered
from fsstate_spark.cli import cli
from fsstate_spark.metrics import BatchProgress, listen
from fsstate_spark.metrics.prometheus import PrometheusExporter
from tests.support.processors import TTL_SCHEMA, TtlTimers
from tests.support.stream import StreamRunner

BATCHES = [[{"k": f"k{i}", "v": i} for i in range(b, 12 + b)] for b in range(3)]


def _listened(spark: SparkSession, run: Callable[[], object], last: int) -> list[BatchProgress]:
    """What the listener reported while ``run`` ran (waiting for batch ``last``'s report)."""
    got: list[BatchProgress] = []
    exporter = PrometheusExporter()
    # through a lambda: the listener forgets a terminated query in sinks that can forget, and
    # the exporter's figures are read here after the query ended
    listener = listen(spark, sinks=[got.append, lambda p: exporter(p)])
    try:
        run()
        deadline = time.monotonic() + 30
        while not any(b.batch_id == last for b in got) and time.monotonic() < deadline:
            time.sleep(0.1)
        final = max(got, key=lambda b: b.batch_id)
        labels = {
            "query": final.name or final.query_id,
            "query_id": final.query_id,
            "operator": "TtlTimers",
            "product": "tiered",
        }
        sample = exporter.registry.get_sample_value
        rows = final.operator("TtlTimers").num_rows_total
        assert sample("fsstate_state_rows", labels) == rows
        assert sample("fsstate_batches_total", labels) == len({b.batch_id for b in got})
    finally:
        spark.streams.removeListener(listener)
        exporter.close()
    return got


def test_watch_once_shows_the_newest_versions_of_a_tiered_query(
    spark: SparkSession, runner: StreamRunner, tmp_path: Path
) -> None:
    state_uri = str(tmp_path / "state")
    processor = tiered(TtlTimers(), state_uri=state_uri)
    # without no-data batches: a no-data batch the runner stops mid-way may commit its state
    # version before the checkpoint records the batch (state ahead is legal, and watch's lag
    # would then not be 0)
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        reported = _listened(
            spark,
            lambda: runner.run(
                processor, BATCHES, TTL_SCHEMA, time_mode="ProcessingTime", name="w"
            ),
            len(BATCHES) - 1,
        )
    watch = ["watch", str(tmp_path / "w" / "checkpoint"), "--state-uri", state_uri, "--once"]
    cli_runner = CliRunner()
    table = cli_runner.invoke(cli, watch, env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert max(len(line) for line in lines) <= 80, table.output
    assert any(line.startswith("TtlTimers") for line in lines), table.output

    got = cli_runner.invoke(cli, ["--json", *watch])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    (op,) = doc["operators"]
    state = FileIO(state_uri)
    stores = find_stores(state, prefix=op["query"])
    summaries = [read_store_manifest(state, s).summary for s in stores]
    assert all(s is not None for s in summaries)
    assert op["operatorName"] == "TtlTimers" and op["product"] == "tiered"
    assert op["latestVersion"] == doc["committedBatch"] == max(s.latest for s in stores)
    assert op["lag"] == 0
    assert op["numRowsTotal"] == sum(s.rows_total or 0 for s in summaries if s) > 0
    assert op["numRowsUpdated"] == sum(s.rows_updated for s in summaries if s)
    assert op["customMetrics"]["diskBytes"] == sum(s.disk_bytes for s in summaries if s) > 0
    # the listener's figures of the batch (the tasks' receipts) are the manifests' figures
    listened = next(b for b in reported if b.batch_id == op["latestVersion"]).operator("TtlTimers")
    for key in ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "memoryUsedBytes"):
        assert listened.to_json()[key] == op[key], key
    for key in ("rowsExpired", "bytesWritten", "diskBytes", "filesTotal"):
        assert listened.custom_metrics()[key] == op["customMetrics"][key], key


def test_watch_of_a_location_without_state_is_one_line(tmp_path: Path) -> None:
    got = CliRunner().invoke(cli, ["watch", str(tmp_path), "--once"])
    assert got.exit_code == 2
    assert got.output.count("\n") == 1 and "ConfigError: no committed fsstate state" in got.output
