"""The test suite's fork server (:mod:`devkit.python_forkserver`) on a real server process:
served starts run in a warm fork with the client's streams, environment, working directory,
``PYTHONPATH`` and exit status; refused or server-less starts run as a new interpreter with
the same result; a killed client takes its fork with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devkit.python_forkserver import MODULES_ENV, SOCKET_ENV, ForkServer
from devkit.repo import ROOT, WORKER_LAUNCHER

CLIENT = ROOT / "devkit" / "bin" / "forkserver_client.py"
PROBE = "tests.support.fork_probe"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    """A server of the probe module (the session's own server and its variable put back)."""
    for name in (SOCKET_ENV, MODULES_ENV):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    started = ForkServer.start(modules=(PROBE,))
    started.wait_ready()
    yield started
    started.stop()


def start_client(socket_path: str, module: str, cwd: Path, **env: str) -> subprocess.Popen[str]:
    """The launcher's command for ``python -m <module>`` through the server at
    ``socket_path``."""
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full.update(FSSTATE_WORKER_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    full.update(env)
    return subprocess.Popen(
        [sys.executable, "-S", "-I", str(CLIENT), socket_path, "-m", module],
        cwd=cwd,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_client(socket_path: str, module: str, cwd: Path, **env: str) -> tuple[int, Any, str]:
    """Run the client to its end: exit status, the probe's report, its stderr."""
    proc = start_client(socket_path, module, cwd, **env)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, json.loads(out.splitlines()[0]), err


def test_a_served_start_runs_in_a_warm_fork_as_the_client_would(
    server: ForkServer, tmp_path: Path
) -> None:
    status, report, err = run_client(
        server.path, PROBE, tmp_path, PROBE_MARKER="m-1", PROBE_STATUS="3", PROBE_IMPORT_OWN="1"
    )
    assert status == 3
    assert report["ppid"] == server.proc.pid  # a fork of the server, not a new interpreter
    assert report["pandas_loaded"]  # imported by the server, before the fork
    assert report["marker"] == "m-1"
    assert report["cwd"] == str(tmp_path)
    assert report["path_head"] == [str(tmp_path), str(ROOT), report["path_head"][2]]
    assert report["argv"] == [str(ROOT / "tests" / "support" / "fork_probe.py")]
    assert err.strip().endswith("probe stderr")
    assert report["own_loaded"]  # the client finds fsstate_spark in the root, as the server did
    assert report["own_file"] == str(ROOT / "fsstate_spark" / "__init__.py")


def test_a_fork_imports_the_repositorys_packages_where_its_client_would(
    server: ForkServer, tmp_path: Path, pyfiles: Path
) -> None:
    """A ``--py-files`` zip first on the client's PYTHONPATH: fsstate comes from the zip."""
    status, report, _ = run_client(
        server.path,
        PROBE,
        tmp_path,
        PYTHONPATH=f"{pyfiles}{os.pathsep}{ROOT}",
        PROBE_IMPORT_OWN="1",
    )
    assert (status, report["ppid"]) == (0, server.proc.pid)
    assert not report["own_loaded"]
    assert report["own_file"] == os.path.join(str(pyfiles), "fsstate_spark", "__init__.py")


@pytest.mark.parametrize("how", ["refused", "no server"])
def test_a_start_the_server_cannot_take_runs_as_a_new_interpreter(
    server: ForkServer, tmp_path: Path, how: str
) -> None:
    env = {"PROBE_STATUS": "5", "PROBE_MARKER": "m-2"}
    socket_path = server.path
    if how == "refused":  # another interpreter (by path) than the server's
        other = tmp_path / "python"
        other.symlink_to(sys.executable)
        env["FSSTATE_WORKER_PYTHON"] = str(other)
    else:
        socket_path = str(tmp_path / "no-such-socket")
    status, report, err = run_client(socket_path, PROBE, tmp_path, **env)
    assert status == 5
    assert report["ppid"] != server.proc.pid
    assert not report["pandas_loaded"]  # a new interpreter
    assert report["argv"] == [str(ROOT / "tests" / "support" / "fork_probe.py")]
    assert report["marker"] == "m-2"
    assert report["cwd"] == str(tmp_path)
    assert err.strip().endswith("probe stderr")
    status, report, _ = run_client(server.path, PROBE, tmp_path, PROBE_STATUS="0")
    assert (status, report["ppid"]) == (0, server.proc.pid)  # the server serves on


def test_killing_the_client_ends_its_fork(server: ForkServer, tmp_path: Path) -> None:
    proc = start_client(server.path, PROBE, tmp_path, PROBE_SLEEP_S="120")
    assert proc.stdout is not None
    report = json.loads(proc.stdout.readline())
    assert report["ppid"] == server.proc.pid
    fork = Path(f"/proc/{report['pid']}")
    assert fork.exists()
    proc.send_signal(signal.SIGTERM)  # as Spark ends a worker it started
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while fork.exists():
        assert time.monotonic() < deadline, f"fork {report['pid']} outlived its client"
        time.sleep(0.05)


@pytest.mark.parametrize("served", [True, False])
def test_the_launcher_hands_the_server_only_the_modules_it_serves(
    server: ForkServer, tmp_path: Path, served: bool
) -> None:
    """Spark's command through the suite's launcher: a listed module goes to the server,
    any other starts as a new interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(FSSTATE_WORKER_PYTHON=sys.executable, PYTHONPATH=str(ROOT), PROBE_STATUS="6")
    if not served:
        env[MODULES_ENV] = "pyspark.some_other_module"
    proc = subprocess.run(
        [str(WORKER_LAUNCHER), "-m", PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(proc.stdout.splitlines()[0])
    assert proc.returncode == 6
    assert (report["ppid"] == server.proc.pid) is served
    assert report["pandas_loaded"] is served
