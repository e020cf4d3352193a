"""fsstate's per-batch figures for Prometheus: a listener sink and a scrape endpoint.

:class:`PrometheusExporter` is a sink of :func:`fsstate_spark.metrics.listen` (a callable taking
each :class:`~fsstate_spark.metrics.model.BatchProgress`) and a ``prometheus_client`` custom
collector over the latest figures of each (query, operator); :meth:`PrometheusExporter.serve`
exposes them over HTTP on the driver (``/metrics``, the text format Prometheus scrapes).
``prometheus_client`` comes with ``pip install 'fsstate[prometheus]'``.

Names and labels (:data:`METRICS` is the full list; ``docs/monitoring.md`` the table): every
name starts with ``fsstate_``, is in base units (seconds, bytes) and ends in ``_total`` for a
counter; the labels of every series are ``query`` (the query's name, else its id),
``query_id``, ``operator`` and ``product`` (``tiered`` or ``flow``), plus ``tier`` on
``fsstate_state_memory_bytes`` (``hot``, ``sealed`` and ``other``: they sum to the store's
memory). No partition label: per-operator sums plus the largest partition (``..._max``) to
show skew.

Invariants:

* Gauges are the newest batch's figures (state size, memory, disk, the batch's commit time);
  counters (``_total``) are the sums of the batches this exporter received, kept per
  (query id, operator): a batch is added once (a second delivery of the batch just taken, the
  same (run id, branches, batch id), is ignored), and the counters only grow. A batch id run
  again by another run of the query (a roll-back's or a fork's re-run, the same query id under
  a new run id, on a lineage of its own) is another batch: its figures become the gauges (the
  query follows the lineage it runs on, so ``fsstate_batch_id`` may go down) and add to the
  counters (the batch did the work again).
* What the exporter keeps is bounded: at most ``max_series`` (query, operator) entries; past
  it the one updated longest ago is dropped (``forget`` drops a query's at once).
* Collection reads a snapshot taken under a lock: a scrape never sees half of a batch.
* :meth:`PrometheusExporter.serve` runs one daemon thread serving requests one at a time (each
  with a socket timeout), bound to loopback unless told otherwise; :meth:`close` stops it.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

try:
    from prometheus_client import CollectorRegistry, make_wsgi_app
    from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - the prometheus extra is missing
    raise ImportError(
        f"fsstate's Prometheus exporter needs prometheus-client ({exc}): "
        "pip install 'fsstate[prometheus]'"
    ) from None

from fsstate.errors import ConfigError
from fsstate_spark.metrics.model import BatchProgress, OperatorProgress

__all__ = ["LABELS", "METRICS", "PrometheusExporter", "exporter"]

LABELS = ("query", "query_id", "operator", "product")
MAX_SERIES = 10_000  # (query, operator) entries kept by default
REQUEST_TIMEOUT_S = 10.0  # a scrape connection idle that long is closed

# (name, type, help): every metric the exporter writes
METRICS: tuple[tuple[str, str, str], ...] = (
    ("fsstate_batch_id", "gauge", "The newest batch id reported."),
    ("fsstate_batch_timestamp_seconds", "gauge", "When the newest batch's figures were taken."),
    ("fsstate_partitions", "gauge", "State partitions of the operator."),
    ("fsstate_partitions_reported", "gauge", "Partitions whose figures the newest batch has."),
    ("fsstate_state_rows", "gauge", "Live state rows at the newest batch."),
    ("fsstate_partition_rows_max", "gauge", "Live rows of the largest partition (skew)."),
    ("fsstate_state_memory_bytes", "gauge", "State memory at the newest commit, by tier."),
    ("fsstate_state_disk_bytes", "gauge", "Bytes of the data files of the newest versions."),
    ("fsstate_state_files", "gauge", "Data files of the newest versions."),
    ("fsstate_versions_retained", "gauge", "Versions retention keeps (largest partition)."),
    ("fsstate_batch_commit_duration_seconds", "gauge", "Newest batch's commits, summed."),
    ("fsstate_partition_commit_duration_seconds_max", "gauge", "Newest batch's slowest commit."),
    ("fsstate_batches_total", "counter", "Batches reported."),
    ("fsstate_rows_updated_total", "counter", "Rows written."),
    ("fsstate_rows_removed_total", "counter", "Rows deleted by the processor."),
    ("fsstate_rows_expired_total", "counter", "Rows removed by TTL expiry."),
    ("fsstate_written_bytes_total", "counter", "Data file bytes written."),
    ("fsstate_written_files_total", "counter", "Data files written."),
    ("fsstate_read_bytes_total", "counter", "Data file bytes read from storage."),
    ("fsstate_read_files_total", "counter", "Data files read from storage."),
    ("fsstate_spilled_bytes_total", "counter", "Bytes spilled from memory to storage."),
    ("fsstate_spills_total", "counter", "Spills."),
    ("fsstate_compactions_total", "counter", "Compactions."),
    ("fsstate_commit_duration_seconds_total", "counter", "Commit time, summed over partitions."),
)

# counter name -> the summary key summed over partitions (commit time apart: seconds)
_COUNTED = {
    "fsstate_rows_updated_total": "rows_updated",
    "fsstate_rows_removed_total": "rows_removed",
    "fsstate_rows_expired_total": "rows_expired",
    "fsstate_written_bytes_total": "bytes_written",
    "fsstate_written_files_total": "files_written",
    "fsstate_read_bytes_total": "bytes_read",
    "fsstate_read_files_total": "files_read",
    "fsstate_spilled_bytes_total": "bytes_spilled",
    "fsstate_spills_total": "spills",
    "fsstate_compactions_total": "compactions",
}
TIERS = ("hot", "sealed", "other")


@dataclass
class _Series:
    """The figures of one (query id, operator): the newest batch and the running sums."""

    labels: tuple[str, str, str, str]
    batch: tuple[str | None, tuple[str, ...], int]  # the newest: (run id, branches, batch id)
    timestamp_s: float
    latest: OperatorProgress
    sums: dict[str, float] = field(default_factory=dict)

    def add(self, op: OperatorProgress) -> None:
        for name, key in _COUNTED.items():
            self.sums[name] = self.sums.get(name, 0) + op.total(key)
        self.sums["fsstate_batches_total"] = self.sums.get("fsstate_batches_total", 0) + 1
        seconds = op.commit_time_ms / 1000.0
        name = "fsstate_commit_duration_seconds_total"
        self.sums[name] = self.sums.get(name, 0.0) + seconds


def _memory_tiers(op: OperatorProgress) -> dict[str, int]:
    hot, sealed = op.total("memory_hot_bytes"), op.total("memory_sealed_bytes")
    return {"hot": hot, "sealed": sealed, "other": max(0, op.total("memory_bytes") - hot - sealed)}


def _gauges(s: _Series) -> dict[str, float]:
    op = s.latest
    custom = op.custom_metrics()
    return {
        "fsstate_batch_id": s.batch[2],
        "fsstate_batch_timestamp_seconds": s.timestamp_s,
        "fsstate_partitions": op.num_partitions,
        "fsstate_partitions_reported": op.partitions_reported,
        "fsstate_state_rows": op.num_rows_total,
        "fsstate_partition_rows_max": custom["rowsTotalMax"],
        "fsstate_state_disk_bytes": op.total("disk_bytes"),
        "fsstate_state_files": op.total("files_total"),
        "fsstate_versions_retained": custom["versionsRetained"],
        "fsstate_batch_commit_duration_seconds": op.commit_time_ms / 1000.0,
        "fsstate_partition_commit_duration_seconds_max": float(custom["commitTimeMsMax"]) / 1000,
    }


class PrometheusExporter(Collector):
    """A listener sink that keeps each (query, operator)'s figures for Prometheus to scrape.

    Call it with each batch's progress (``listen(spark, sinks=[exporter])``), then serve it
    (:meth:`serve`) or register it in a registry of your own (``registry=``).

    Args:
        registry: where to register the collector (default: a registry of its own, which
            :meth:`serve` exposes; pass ``prometheus_client.REGISTRY`` to add fsstate's metrics
            to an endpoint the application already serves).
        max_series: the most (query, operator) entries kept (the one updated longest ago goes).

    Raises:
        ConfigError: ``max_series`` is not a positive int.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, max_series: int = MAX_SERIES
    ) -> None:
        if isinstance(max_series, bool) or not isinstance(max_series, int) or max_series < 1:
            raise ConfigError(f"max_series={max_series!r} must be a positive int")
        self.max_series = max_series
        self.registry = CollectorRegistry(auto_describe=True) if registry is None else registry
        self._lock = threading.Lock()
        self._series: OrderedDict[tuple[str, str], _Series] = OrderedDict()
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.registry.register(self)

    def __call__(self, progress: BatchProgress) -> None:
        """Take one batch's figures (the sink call)."""
        query = progress.name or progress.query_id
        with self._lock:
            for op in progress.operators:
                key = (progress.query_id, op.operator_name)
                labels = (query, progress.query_id, op.operator_name, op.product)
                batch = (progress.run_id, op.branches, progress.batch_id)
                s = self._series.pop(key, None)
                if s is None:
                    s = _Series(labels, batch, 0.0, op)
                elif s.batch == batch:
                    self._series[key] = s  # delivered again: counted already
                    continue
                s.labels, s.batch, s.latest = labels, batch, op
                s.timestamp_s = progress.timestamp_ms / 1000.0
                s.add(op)
                self._series[key] = s
            while len(self._series) > self.max_series:
                self._series.popitem(last=False)

    def forget(self, query_id: str) -> None:
        """Drop a query's series (a stopped query; its counters start again if it reports)."""
        with self._lock:
            for key in [k for k in self._series if k[0] == query_id]:
                del self._series[key]

    def collect(self) -> Iterator[Metric]:
        """The metrics of :data:`METRICS` over the entries kept (prometheus_client's hook)."""
        with self._lock:
            snapshot = [
                (s.labels, _gauges(s), dict(s.sums), _memory_tiers(s.latest))
                for s in self._series.values()
            ]
        for name, kind, doc in METRICS:
            if name == "fsstate_state_memory_bytes":
                mem = GaugeMetricFamily(name, doc, labels=(*LABELS, "tier"))
                for labels, _, _, tiers in snapshot:
                    for tier in TIERS:
                        mem.add_metric([*labels, tier], tiers[tier])
                yield mem
                continue
            family: Metric = (
                GaugeMetricFamily(name, doc, labels=LABELS)
                if kind == "gauge"
                else CounterMetricFamily(name, doc, labels=LABELS)
            )
            for labels, gauges, sums, _ in snapshot:
                value = gauges[name] if kind == "gauge" else sums.get(name, 0)
                family.add_metric(list(labels), value)  # type: ignore[attr-defined]
            yield family

    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve the registry on ``http://addr:port/metrics`` from a daemon thread.

        Args:
            port: the TCP port (0: a free one, returned).
            addr: the address to bind (loopback by default; ``0.0.0.0`` for every interface).

        Returns:
            The port bound.

        Raises:
            ConfigError: already serving.
            OSError: the port cannot be bound.
        """
        if self._server is not None:
            raise ConfigError(f"the exporter already serves on port {self._server.server_port}")
        server = make_server(addr, port, make_wsgi_app(self.registry), handler_class=_Quiet)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="fsstate-prometheus", daemon=True
        )
        self._thread.start()
        return int(server.server_port)

    @property
    def port(self) -> int | None:
        """The port :meth:`serve` bound (None: not serving)."""
        return None if self._server is None else int(self._server.server_port)

    def close(self) -> None:
        """Stop serving (if serving) and unregister the collector."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=REQUEST_TIMEOUT_S)
        with contextlib.suppress(KeyError):  # unregistered already
            self.registry.unregister(self)

    def __enter__(self) -> PrometheusExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Quiet(WSGIRequestHandler):
    """A request handler that logs nothing and times idle connections out."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (a scrape a second would flood the driver's stderr)."""


def exporter(port: int | None = None, addr: str = "127.0.0.1") -> PrometheusExporter:
    """A :class:`PrometheusExporter` with its own registry, serving on ``port`` unless None.

    Args:
        port: serve ``/metrics`` there (0: a free port, then read ``.port``); None: do not
            serve (register it elsewhere, or call :meth:`PrometheusExporter.serve` later).
        addr: the address to bind.

    Returns:
        The exporter: pass it to ``fsstate_spark.metrics.listen(spark, sinks=[...])``.
    """
    out = PrometheusExporter()
    if port is not None:
        out.serve(port, addr)
    return out
