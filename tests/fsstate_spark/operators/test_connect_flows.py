"""Every kind of operator flow from a Spark Connect client equals the classic session's.

The flows of :mod:`tests.support.connect_flows` (deduplication then a tumbling window in append
mode, a sliding window in update mode, session windows, an interval join, a changelog join
with a retracting aggregate, transform_with_state then a BatchProcessor,
transform_with_state_in_pandas with event-time timers then one with an initial state) run over
the same input files twice: on the suite's classic session, and from a Spark Connect client in
a process of its own (``python -m tests.support.connect_flows``) served from the suite's JVM
(:func:`~tests.support.connect_flows.connect_server`: no second JVM to start). Each flow's rows
must be equal batch by batch. The client prepares its flows (plans, checks, pickled drivers)
while the classic flows run, and runs its queries once they are done. It also reports what it
refuses (what a Connect client cannot read of a grouped DataFrame): each case must be a
ConfigError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.connect_flows import await_client, connect_server, run_flows, write_inputs

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[3]


def test_every_operator_kind_from_a_connect_client_equals_the_classic_session(
    spark: SparkSession, tmp_path: Path
) -> None:
    inputs = tmp_path / "input"
    write_inputs(inputs)
    go, out, err = tmp_path / "go", tmp_path / "connect.out", tmp_path / "connect.err"
    command = [sys.executable, "-m", "tests.support.connect_flows", "--input", str(inputs)]
    command += ["--work", str(tmp_path / "connect"), "--go", str(go)]
    with connect_server(spark) as url, out.open("w") as stdout, err.open("w") as stderr:
        env = {**os.environ, "SPARK_REMOTE": url, "PYSPARK_PYTHON": sys.executable}
        client = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
        try:  # the client prepares its flows while the classic ones run, then runs them alone
            classic = run_flows(spark, inputs, tmp_path / "classic", together=True)
            go.touch()
            threads = await_client(client, tmp_path / "connect", spark)
        finally:
            client.kill()
    lines = [ln for ln in out.read_text().splitlines() if ln.startswith("RESULT ")]
    assert client.returncode == 0 and lines, (
        out.read_text()[-2000:] + err.read_text()[-4000:] + str(threads)
    )
    for name, text in threads.items():  # stuck, restarted from its checkpoint: say so
        message = f"Connect flow {name!r} was stuck; the JVM's threads then:\n{text[:6000]}"
        warnings.warn(message, stacklevel=1)
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["session"] == "pyspark.sql.connect.session"
    connect = result["flows"]
    assert sorted(connect) == sorted(classic)
    for name, batches in classic.items():
        assert len(batches) >= 3, f"{name}: {len(batches)} micro-batches ran"
        assert any(batches), f"{name}: no output at all proves nothing"
        assert len(connect[name]) == len(batches), (name, len(connect[name]), len(batches))
        for b, (rows, got) in enumerate(zip(batches, connect[name])):
            assert got == rows, f"{name}, batch {b}:\n classic {rows}\n connect {got}"
    for case, outcome in result["refusals"].items():
        assert outcome.startswith("ConfigError: "), f"{case}: {outcome}"
