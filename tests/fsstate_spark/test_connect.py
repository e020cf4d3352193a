"""``tiered()`` from a Spark Connect client: the same query and output as a classic session.

The query (:func:`tests.support.connect_job.run_query`) runs on the suite's classic session,
then from a Spark Connect client in a process of its own (``python -m
tests.support.connect_job``) served from the suite's JVM
(:func:`~tests.support.connect_flows.connect_server`, as ``SparkSession.builder.remote(
"local[2]")`` serves one from a JVM of its own): ``tiered()`` runs on the client, and the
processor (with its settings) travels to the server's Python workers pickled in the plan. Both
runs must give the same rows and state, and the Connect run must have written fsstate versions
(state really kept by fsstate, not by Spark's handles).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from devkit.spark_local import write_batches
from tests.support.connect_flows import connect_server
from tests.support.connect_job import run_query
from tests.support.processors import SINK_BATCHES
from tests.support.stream import query_versions

# compat_full: make test-compat-full runs it on every matrix entry
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600), pytest.mark.compat_full]
ROOT = Path(__file__).resolve().parents[2]


def _client(url: str, inputs: Path, work: Path) -> dict[str, Any]:
    """The query run by a Spark Connect client of ``url`` (a process of its own)."""
    env = {**os.environ, "SPARK_REMOTE": url, "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "tests.support.connect_job"]
    command += ["--input", str(inputs), "--work", str(work)]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def test_tiered_over_spark_connect_equals_the_classic_session(
    spark: SparkSession, tmp_path: Path
) -> None:
    inputs = tmp_path / "input"
    write_batches(inputs, SINK_BATCHES)
    classic = run_query(spark, str(inputs), str(tmp_path / "classic"))
    with connect_server(spark) as url:
        connect = _client(url, inputs, tmp_path / "connect")
    assert connect["session"] == "pyspark.sql.connect.session"
    assert "connect" not in classic["session"]
    assert connect["rows"] == classic["rows"] and len(connect["rows"]) == 9
    assert connect["state"] == classic["state"] and connect["state"]  # format("fsstate")
    (query,) = [p for p in (tmp_path / "connect" / "state").iterdir() if p.is_dir()]
    for partition in (0, 1):
        assert query_versions(str(query), "KitchenSink", partition) == [0, 1, 2]
