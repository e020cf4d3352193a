"""Support of the Prometheus exporter's tests: the server binary, the example dashboard's
queries, and batches of real committed stores.

Invariants: :func:`prometheus_binary` installs Debian's package into the cache when it is
missing and apt is there (``make test`` has done it already), else skips the test naming the
command; :func:`panel_queries` returns every query of every panel of the dashboard, with its
template variables replaced by values that select every series.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from devkit.prometheus_server import find_prometheus, install
from devkit.repo import ROOT
from fsstate import PartitionStore
from fsstate_spark.metrics.model import BatchProgress
from fsstate_spark.metrics.watch import read_views, resolve

DASHBOARD = ROOT / "docs" / "monitoring" / "fsstate-grafana.json"
# template variables and what stands for them in a query against the test server
VARIABLES = {"$__rate_interval": "1m", "$query": ".+", "$operator": ".+"}
METRIC_NAME = re.compile(r"\bfsstate_[a-z_]+\b")


def prometheus_binary() -> str:
    """The prometheus binary (installed into the cache if missing; skips without apt)."""
    try:
        return find_prometheus()
    except FileNotFoundError:
        if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
            pytest.skip("no prometheus binary and no apt: python -m devkit.prometheus_server")
    try:
        return install()
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"could not unpack Debian's prometheus ({exc})")


def dashboard() -> dict[str, Any]:
    """The example Grafana dashboard."""
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text("utf-8"))
    return doc


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL with the template variables substituted) of every panel target."""
    out = []
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"unknown template variable in {expr!r}"
            out.append((panel["title"], expr))
    return out


def metric_names(expr: str) -> set[str]:
    """The fsstate metric names a PromQL expression reads."""
    return set(METRIC_NAME.findall(expr))


class Stores:
    """Two partitions of a real store committed batch by batch: updates, deletes and TTL
    expiry, each batch's figures read back from the manifests as a BatchProgress."""

    TTL_MS = 1000

    def __init__(self, root: Path, query_id: str = "3f1e0c2a-query") -> None:
        self.root = root
        self.query_id = query_id
        self.clock = 1_700_000_000_000
        self.stores = [
            PartitionStore.open(str(root / query_id), operator="counts", partition=p)
            for p in range(2)
        ]
        schema = pa.schema([("n", pa.int64())])
        self.tables = [s.value_table("count", schema, ttl_ms=self.TTL_MS) for s in self.stores]

    def batch(self, batch_id: int) -> BatchProgress:
        """Commit batch ``batch_id`` (keys of the batch, some deleted, older ones expire)."""
        self.clock += 600  # keys written two batches ago expire
        for p, (store, table) in enumerate(zip(self.stores, self.tables)):
            store.set_time(self.clock)
            table.expire()
            for i in range(200 * (p + 1)):
                table.update((f"b{batch_id}-k{i}",), (batch_id,))
            for i in range(0, 50):
                table.clear((f"b{batch_id - 1}-k{i}",))
            store.commit(batch_id)
        views = read_views(resolve(str(self.root)))
        ops = tuple(v.progress for v in views)
        return BatchProgress(self.query_id, None, "counts-q", batch_id, self.clock, ops)

    def close(self) -> None:
        """Close the stores."""
        for s in self.stores:
            s.close()
