"""A real multi-executor cluster with state on S3: partitions move between executors, and an
executor is lost mid-query.

``examples/recovery_job.py`` runs with ``spark-submit --master local-cluster[2,1,1024]`` (two
executor JVMs, each with its own Python workers; fsstate shipped with ``--py-files``) and its
state on the S3 server, configured the way a cluster gets it: ``AWS_*`` variables in the
environment spark-submit starts with, inherited by the executors' Python workers. The job's
tasks record which executor JVM served them.

1. an uninterrupted ``local[2]`` run with state on local disk gives the reference sink;
2. the cluster run: once two batches are written, one executor JVM is killed with SIGKILL
   (its tasks and Python workers die with it); the lost tasks are retried on the other
   executor (or a replacement), and the query finishes by itself.

The cluster run's sink equals the reference exactly, both executors served tasks, and the
partitions the lost executor served ran on another executor afterwards (their state restored
from S3).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from devkit.s3_server import S3Info
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from tests.support.jobs import (
    BATCHES,
    OPERATOR,
    PARTITIONS,
    RUN_TIMEOUT_S,
    JobDirs,
    finish,
    group_alive,
    job_env,
    kill_group,
    run_to_end,
    sink_batches,
    sink_rows,
    write_inputs,
)
from tests.support.plugin import s3_options
from tests.support.stream import query_versions

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

MASTER = "local-cluster[2,1,1024]"
SLOW_MS = 600


def executors(pgid: int) -> list[int]:
    """Pids of the executor JVMs of the job's process group."""
    out = []
    for pid in group_alive(pgid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmd:
            out.append(pid)
    return out


def traces(dirs: JobDirs) -> list[tuple[int, int, int]]:
    """(batch, partition, executor pid) of every task the job recorded."""
    out = []
    for path in dirs.trace.glob("*.trace"):
        for line in path.read_text().splitlines():
            batch, partition, _worker, executor = line.split()
            out.append((int(batch), int(partition), int(executor)))
    return out


def test_an_executor_lost_mid_query_on_s3_matches_an_uninterrupted_run(
    pyfiles: Path, tmp_path: Path, s3_server: S3Info, s3_uri: str
) -> None:
    inputs = tmp_path / "input"
    write_inputs(inputs, BATCHES)
    ref = JobDirs(tmp_path / "reference", inputs, pyfiles)
    run = JobDirs(tmp_path / "cluster", inputs, pyfiles)
    for dirs in (ref, run):
        dirs.root.mkdir()
    run_to_end(ref, ref.log)
    reference = sink_rows(ref.sink)
    assert sorted(sink_batches(ref.sink)) == list(range(len(BATCHES)))

    opts = s3_options(s3_server)
    env = _s3_env(opts)
    with open(run.log, "ab") as out:
        proc = subprocess.Popen(
            run.command(SLOW_MS, master=MASTER, state=s3_uri),
            cwd=run.root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        killed, after = _kill_an_executor_mid_query(run, proc)
        finish(proc, run.log, timeout=RUN_TIMEOUT_S * 2)
    finally:
        kill_group(proc)
    assert sink_rows(run.sink) == reference
    assert "Lost executor" in run.log.read_text(errors="replace")  # Spark saw it die
    served = traces(run)
    assert len({e for _b, _p, e in served}) >= 2, served  # both executors served tasks
    lost = {p for b, p, e in served if e == killed}
    assert lost, f"the killed executor {killed} served nothing: {served}"
    late = [(b, p, e) for b, p, e in served if b >= after]
    assert late and all(e != killed for _b, _p, e in late), (killed, late)
    moved = {p for _b, p, _e in late if p in lost}
    assert moved, f"no partition of the lost executor ran elsewhere: {served}"
    _check_state_on_s3(run, s3_uri, opts)


def _s3_env(opts: dict[str, str]) -> dict[str, str]:
    """The job's environment with the S3 server's ``AWS_*`` variables."""
    return {
        **job_env(),
        "AWS_ENDPOINT_URL": opts["endpoint"],
        "AWS_ACCESS_KEY_ID": opts["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": opts["secret_access_key"],
        "AWS_REGION": opts["region"],
        "AWS_ALLOW_HTTP": "true",
    }


def _kill_an_executor_mid_query(run: JobDirs, proc: subprocess.Popen[bytes]) -> tuple[int, int]:
    """Once two batches are written (and not the last two), SIGKILL an executor JVM that served
    a partition; returns its pid and the first batch that starts after the kill."""
    killed = 0
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not killed:
        assert proc.poll() is None, f"job ended ({proc.returncode}) before the kill"
        assert time.monotonic() < deadline, "no executor to kill before the timeout"
        pids = executors(proc.pid)
        written = sink_batches(run.sink)
        if len(written) >= 2 and len(pids) == 2 and len(written) < len(BATCHES) - 1:
            served_before = {(p, e) for _b, p, e in traces(run)}
            victims = [e for _p, e in served_before if e in pids] or pids
            killed = victims[0]  # an executor that served a partition
            after = max(written) + 2  # batches that start after the kill
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    return killed, after


def _check_state_on_s3(run: JobDirs, s3_uri: str, opts: dict[str, str]) -> None:
    # the state is on S3, one version per batch for each partition (nothing on local disk)
    assert not run.state.exists()
    location = Location.parse(s3_uri, opts)
    (query,) = {f.path.split("/", 1)[0] for f in FileIO(location).list("", recursive=True)}
    for partition in range(PARTITIONS):
        versions = query_versions(location.child(query), OPERATOR, partition)
        assert versions[-1] == len(BATCHES) - 1
