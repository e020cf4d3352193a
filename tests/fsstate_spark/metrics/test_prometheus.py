"""The Prometheus exporter against a real Prometheus server: what Prometheus scraped and answers
is what the batches reported, and every query of the example Grafana dashboard reads exported
names and returns series."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from devkit.prometheus_server import PrometheusServer
from devkit.repo import ROOT
from fsstate_spark.metrics import listen
from fsstate_spark.metrics.model import BatchProgress, PartitionMetrics, operator_progress
from fsstate_spark.metrics.prometheus import METRICS, PrometheusExporter, exporter
from tests.support.prometheus import Stores, metric_names, panel_queries, prometheus_binary

NAMES = {name for name, _, _ in METRICS}
LABELS = 'query="counts-q", operator="counts"'


@pytest.fixture()
def scraped(tmp_path: Path) -> Iterator[tuple[PrometheusExporter, PrometheusServer]]:
    """An exporter serving on a free loopback port and a Prometheus scraping it each second."""
    binary = prometheus_binary()
    with exporter(port=0) as exp:
        assert exp.port is not None
        with PrometheusServer(tmp_path / "prom", [f"127.0.0.1:{exp.port}"], binary=binary) as p:
            yield exp, p


def value(prom: PrometheusServer, expr: str) -> float:
    result = prom.query(expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def test_the_dashboard_reads_exported_names_only() -> None:
    queries = panel_queries()
    assert len(queries) >= 10
    for title, expr in queries:
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= NAMES, f"panel {title!r} reads {sorted(names - NAMES)}, not exported"


def test_the_monitoring_page_lists_every_metric() -> None:
    page = (ROOT / "docs" / "monitoring.md").read_text("utf-8")
    listed = re.findall(r"^\| `(fsstate_[a-z_]+)` \| (gauge|counter) \|", page, re.M)
    assert listed == [(name, kind) for name, kind, _ in METRICS]


def test_prometheus_scrapes_what_the_batches_reported(
    scraped: tuple[PrometheusExporter, PrometheusServer], tmp_path: Path
) -> None:
    exp, prom = scraped
    stores = Stores(tmp_path / "state")
    batches: list[BatchProgress] = []
    try:
        for b in range(4):
            batches.append(stores.batch(b))
            exp(batches[-1])
        exp(batches[-1])  # delivered twice: counted once
    finally:
        stores.close()
    fed = time.time()
    prom.wait_scrape(after=fed)
    last = batches[-1].operator("counts")
    assert last.total("rows_expired") > 0 and last.total("rows_removed") > 0
    gauges = {
        "fsstate_batch_id": 3,
        "fsstate_state_rows": last.num_rows_total,
        "fsstate_partition_rows_max": max(p.rows_total for p in last.partitions),
        "fsstate_state_disk_bytes": last.total("disk_bytes"),
        "fsstate_partitions_reported": 2,
        "fsstate_batch_commit_duration_seconds": last.commit_time_ms / 1000,
        "fsstate_partition_commit_duration_seconds_max": max(
            p.commit_time_ms for p in last.partitions
        )
        / 1000,
    }
    for name, want in gauges.items():
        assert value(prom, f"{name}{{{LABELS}}}") == pytest.approx(want, rel=1e-3), name
    assert value(prom, f"sum(fsstate_state_memory_bytes{{{LABELS}}})") == last.total("memory_bytes")
    ops = [b.operator("counts") for b in batches]
    counters = {
        "fsstate_batches_total": 4,
        "fsstate_rows_updated_total": sum(o.total("rows_updated") for o in ops),
        "fsstate_rows_removed_total": sum(o.total("rows_removed") for o in ops),
        "fsstate_rows_expired_total": sum(o.total("rows_expired") for o in ops),
        "fsstate_written_bytes_total": sum(o.total("bytes_written") for o in ops),
        "fsstate_commit_duration_seconds_total": sum(o.commit_time_ms for o in ops) / 1000,
    }
    for name, want in counters.items():
        assert value(prom, f"{name}{{{LABELS}}}") == pytest.approx(want, rel=1e-3), name
    result = prom.query("fsstate_state_rows")
    assert result[0]["metric"]["query_id"] == "3f1e0c2a-query"
    assert result[0]["metric"]["product"] == "tiered"
    # rate() needs two samples: a second scrape, then every dashboard query has series
    prom.wait_scrape(after=time.time())
    empty = [(title, expr) for title, expr in panel_queries() if not prom.query(expr)]
    assert not empty, f"dashboard queries without series: {empty}"


def test_listen_serves_an_exporter_and_forgets_terminated_queries() -> None:
    """``listen(prometheus_port=0)`` serves an exporter among its sinks (``listener.exporter``);
    a terminated query's series are dropped from every sink with ``forget`` (no Spark: a
    session stand-in that records the listener)."""
    added: list[Any] = []
    session = SimpleNamespace(streams=SimpleNamespace(addListener=added.append))
    forgotten: list[str] = []
    keeper = SimpleNamespace(forget=forgotten.append)
    listener = listen(session, sinks=[lambda p: None, keeper], prometheus_port=0)
    exp = listener.exporter
    assert added == [listener] and exp is not None and exp.port and exp in listener.sinks
    try:
        part = PartitionMetrics(0, 0, {"rows_total": 3})
        exp(
            BatchProgress(
                "q1", None, None, 0, 0, (operator_progress("op", "tiered", 0, 1, [part]),)
            )
        )

        def scrape() -> str:
            url = f"http://127.0.0.1:{exp.port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as got:
                return str(got.read().decode())

        assert (
            'fsstate_state_rows{operator="op",product="tiered",query="q1",query_id="q1"} 3.0'
            in (scrape())
        )
        listener.onQueryTerminated(SimpleNamespace(id="q1"))
        assert forgotten == ["q1"] and 'query_id="q1"' not in scrape()
    finally:
        exp.close()
    assert listen(session).exporter is None
