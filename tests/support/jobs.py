"""Running ``examples/recovery_job.py`` as a real application: ``spark-submit --py-files``,
SIGKILL of all its processes (its session), and what its sink, Spark's checkpoint and fsstate hold.

Used by the spark-submit, local-cluster and operator recovery tests.

Invariants: a subprocess never outlives its timeout (on any failure every process of its
session is killed); input files get distinct, increasing modification times, one per micro-batch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

from devkit import jobs as devkit_jobs
from fsstate.inspect import find_stores

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "recovery_job.py"
OPERATOR = "RecentValues"  # the processor's class name in the job = its fsstate operator name
PARTITIONS = 2
RUN_TIMEOUT_S = 180.0
SLOW_MS = 800  # per batch, between the state commit and the sink write: the kill window

# killed runs: name -> which partitions have committed the interrupted batch's fsstate version
# ("some": not all of them, the job's partition 1 sleeps before its commit; "all": the job
# sleeps in foreachBatch before the sink write)
KILL_POINTS = {"early": "some", "late": "all"}

KEYS = ["a", "b", "c"]
BATCHES: list[list[dict[str, Any]]] = [
    [{"k": KEYS[(b + i) % 3], "v": b * 10 + i} for i in range(2 + b % 3)] for b in range(6)
]


def spark_submit() -> Path:
    """The ``spark-submit`` script shipped inside the installed pyspark package."""
    script = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    if not script.exists():
        pytest.skip(f"no spark-submit in the pyspark package ({script})")
    return script


def write_inputs(directory: Path, batches: list[list[dict[str, Any]]]) -> None:
    """One JSON-lines file per batch with increasing modification times (one per trigger)."""
    directory.mkdir(parents=True)
    base = 1_600_000_000
    for i, rows in enumerate(batches):
        path = directory / f"part-{i:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (base + 10 * i, base + 10 * i))


@dataclass(frozen=True)
class JobDirs(devkit_jobs.JobDirs):
    """Directories of one logical run of the job (shared by its restarts), and the archive
    of fsstate its spark-submit ships (``--py-files``)."""

    pyfiles: Path

    @property
    def log(self) -> Path:
        """Output of every spark-submit of this run."""
        return self.root / "job.log"

    def command(
        self, slow_ms: int = 0, master: str = "local[2]", state: str | None = None
    ) -> list[str]:
        """The spark-submit command line of the job."""
        return [
            str(spark_submit()),
            "--master",
            master,
            "--driver-java-options",
            devkit_jobs.JAVA_OPTIONS,
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.ui.showConsoleProgress=false",
            "--conf",
            f"spark.sql.shuffle.partitions={PARTITIONS}",
            "--conf",  # fsstate's keyed loop for tiered() (installed in this interpreter)
            "spark.python.worker.module=pyspark_fsstate.worker",
            "--conf",  # scratch space of the run (a killed JVM cannot clean it up)
            f"spark.local.dir={self.root / 'spark-local'}",
            "--py-files",
            str(self.pyfiles),
            str(JOB),
            "--input",
            str(self.input),
            "--checkpoint",
            str(self.checkpoint),
            "--state-uri",
            state or str(self.state),
            "--sink",
            str(self.sink),
            "--slow-ms",
            str(slow_ms),
            "--trace-dir",
            str(self.trace),
        ]

    @property
    def trace(self) -> Path:
        """Where the job's tasks record which executor served them."""
        path = self.root / "trace"
        path.mkdir(parents=True, exist_ok=True)
        return path


def job_env() -> dict[str, str]:
    """Environment of spark-submit: this interpreter for driver and workers, no PYTHONPATH.

    PYTHONPATH is dropped so the job can only find fsstate through ``--py-files`` (or, failing
    that, the editable install; the job reports which one was used).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def group_alive(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``pgid``."""
    return _live(lambda fields: int(fields[2]) == pgid)


def session_alive(sid: int) -> list[int]:
    """Pids of live (non-zombie) processes of session ``sid``: a job started in its own session
    (the Python driver and the JVMs in its process group, and PySpark's worker daemon, which puts
    itself and its forked workers in a process group of their own)."""
    return _live(lambda fields: int(fields[3]) == sid)


def _live(match: Callable[[list[str]], bool]) -> list[int]:
    alive = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        if fields[0] not in ("Z", "X") and match(fields):
            alive.append(int(proc.name))
    return alive


def kill_now(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of ``proc``'s session at once: its process group first (the Python
    driver and the JVM, atomically), then the Python workers' groups, so that no worker goes on
    to commit state once the JVM is gone (a killed machine's workers do not either)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in session_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def kill_group(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGKILL every process of ``proc``'s session (JVM, Python driver, workers) and wait."""
    kill_now(proc)
    proc.wait(timeout=timeout)
    deadline = time.monotonic() + timeout
    while left := session_alive(proc.pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes survived SIGKILL: {left}")
        for pid in left:  # forked after the first round
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def start(dirs: JobDirs, log: Path, slow_ms: int = 0) -> subprocess.Popen[bytes]:
    """Start the job in its own session (so all its processes can be killed)."""
    return dirs.launch(dirs.command(slow_ms), log, job_env())


def finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = RUN_TIMEOUT_S) -> None:
    """Wait for a started job to end by itself; fail (after killing it) on error or timeout."""
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        kill_group(proc)
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise AssertionError(f"job ended with {rc} (None: timeout); log tail:\n{tail}")


def run_to_end(dirs: JobDirs, log: Path, slow_ms: int = 0) -> None:
    """Run the job until it ends by itself; fail (after killing it) on error or timeout."""
    finish(start(dirs, log, slow_ms), log)


def sink_batches(sink: Path) -> dict[int, list[list[Any]]]:
    """Batch id -> rows of every complete sink file."""
    out: dict[int, list[list[Any]]] = {}
    for path in sorted(sink.glob("batch-*.json")):
        doc = json.loads(path.read_text())
        assert path.name == f"batch-{doc['batch_id']:05d}.json"
        out[doc["batch_id"]] = doc["rows"]
    return out


def sink_rows(sink: Path) -> list[tuple[Any, ...]]:
    """Sorted (batch id, *row) of the whole sink."""
    return sorted((batch_id, *row) for batch_id, rows in sink_batches(sink).items() for row in rows)


def state_versions(state: Path) -> dict[int, list[int]]:
    """Partition -> committed fsstate versions along the lineage committed last (one query
    directory under the state URI; each run writes a lineage of its own)."""
    queries = [p for p in state.iterdir() if p.is_dir()] if state.exists() else []
    if not queries:
        return {}
    assert len(queries) == 1, queries
    out: dict[int, list[int]] = {}
    for p in range(PARTITIONS):
        stores = find_stores(str(queries[0]), operator=OPERATOR, partition=p)
        out[p] = list(stores[0].history()) if stores else []
    return out


def spark_log(checkpoint: Path, name: str) -> list[int]:
    """Batch ids recorded in the checkpoint's ``offsets`` or ``commits`` log."""
    d = checkpoint / name
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.exists() else []


def module_origins(log: Path) -> dict[str, list[str]]:
    """The job's report of where the driver and the workers imported fsstate from."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("fsstate modules: "):
            return dict(json.loads(line.removeprefix("fsstate modules: ")))
    raise AssertionError(f"no module report in {log}")


def kill_mid_batch(dirs: JobDirs, min_written: int, committed_by: str) -> int:
    """Start the job and SIGKILL it inside a micro-batch whose fsstate version is committed.

    Waits until at least ``min_written`` batch files are in the sink and a batch without a
    sink file has its fsstate version committed by some but not all partitions
    (``committed_by="some"``: partition 1 sleeps before its commit) or by all of them
    (``"all"``: the job sleeps in foreachBatch before the sink write), then kills every
    process of the job.

    Returns:
        The interrupted batch id.
    """
    proc = start(dirs, dirs.log, SLOW_MS)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"job ended (rc {proc.returncode}) before it was killed")
            if time.monotonic() > deadline:
                raise AssertionError("no batch to interrupt before the timeout")
            written = set(sink_batches(dirs.sink))
            if len(written) >= min_written:
                versions = [set(vs) for vs in state_versions(dirs.state).values()] or [set()]
                every = set.intersection(*versions)
                committed = every if committed_by == "all" else set.union(*versions) - every
                pending = sorted(committed - written)
                if pending:
                    kill_now(proc)
                    return pending[-1]
            time.sleep(0.05)
    finally:
        kill_group(proc)


def checkpoint_view(dirs: JobDirs) -> dict[str, Any]:
    """What the sink, Spark's checkpoint and fsstate hold (after a kill)."""
    return {
        "sink": sorted(sink_batches(dirs.sink)),
        "offsets": spark_log(dirs.checkpoint, "offsets"),
        "commits": spark_log(dirs.checkpoint, "commits"),
        "fsstate": state_versions(dirs.state),
    }
