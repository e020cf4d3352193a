"""A fork server for the driver-side Python processes Spark starts, for the test suite.

Spark runs each ``transformWithState`` query's first batch with a new Python process on the
driver (``python -m pyspark.sql.streaming.transform_with_state_driver_worker``: it reads the
processor's state variables); importing pyspark, pandas and pyarrow is most of its 0.7 s, and
the suite starts one for every query start (a third of a conformance test's time). This
server imports them once; :data:`devkit.repo.WORKER_LAUNCHER` hands such a start to it through
``devkit/bin/forkserver_client.py``, and the worker runs in a fork of the warm server with the
client's standard streams, arguments, working directory, environment and ``PYTHONPATH``.

Invariants:

* Only what :func:`servable` accepts is served: the server's own interpreter (the same
  virtualenv, by path) and ``-m`` of a module of :data:`MODULES`; anything else is refused and
  the client starts the worker as a new interpreter.
* The server imports :data:`PRELOAD` (pyspark's runner's imports, pandas, pyarrow) and the
  repository's :data:`PRELOAD_OWN` from the repository root. A fork keeps the latter only if
  the client's ``PYTHONPATH`` would import them from there too (its first entry holding them
  is the root); otherwise (a ``--py-files`` zip, another checkout) the fork drops every module
  of the repository's packages and imports them where the client would.
* A fork runs with the client's environment and ``sys.path`` = working directory, the
  client's ``PYTHONPATH`` entries, then the interpreter's own (site-packages), as a new
  ``python -m`` would; it exits when its client's connection closes (Spark kills the process
  it started) and sends its exit status to the client otherwise.
* The server is single-threaded (it forks), reaps its forks through ``SIG_IGN`` for
  ``SIGCHLD``, and exits when its standard input closes (its starter gone or done).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile
from pathlib import Path
from typing import Any

from devkit.repo import ROOT

SOCKET_ENV = "FSSTATE_PYTHON_FORKSERVER"  # the server's socket, for the launcher
MODULES_ENV = "FSSTATE_PYTHON_FORKSERVER_MODULES"  # what it serves, space-separated
MODULES = ("pyspark.sql.streaming.transform_with_state_driver_worker",)  # served by fork
PRELOAD = (*MODULES, "pandas", "pyarrow")  # imported once by the server
PRELOAD_OWN = ("fsstate_spark",)  # the repository's, kept by a fork whose client has them there
OWN_PACKAGES = ("fsstate", "fsstate_spark", "pyspark_fsstate", "devkit")  # dropped together
STATUS = struct.Struct("!i")  # the fork's exit status, to the client
LENGTH = struct.Struct("!Q")  # the request's length, before its JSON
REQUEST_BYTES_MAX = 64 << 20
BACKLOG = 64  # connections waiting for the (one-at-a-time) accept loop


def servable(request: dict[str, Any], modules: tuple[str, ...]) -> str | None:
    """The module to run for ``request``, or None when the server must refuse it."""
    argv = request.get("argv")
    if request.get("python") != sys.executable or not isinstance(argv, list) or len(argv) != 2:
        return None
    flag, module = argv
    return module if flag == "-m" and module in modules else None


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The client's request and standard streams (closed by the caller)."""
    first, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(first) < LENGTH.size:
        raise ValueError("short request")
    size = LENGTH.unpack_from(first)[0]
    if size > REQUEST_BYTES_MAX:
        raise ValueError(f"request of {size} bytes")
    body = bytearray(first[LENGTH.size :])
    while len(body) < size:
        chunk = conn.recv(min(1 << 16, size - len(body)))
        if not chunk:
            raise ValueError("truncated request")
        body += chunk
    request = json.loads(body)
    if len(fds) != 3 or not isinstance(request, dict):
        raise ValueError("no standard streams")
    return request, fds


def _finds(entry: str, package: str) -> bool:
    """Whether ``sys.path`` entry ``entry`` (a directory or a zip) holds ``package``."""
    if os.path.isdir(entry):
        return os.path.exists(os.path.join(entry, package, "__init__.py"))
    if zipfile.is_zipfile(entry):
        with zipfile.ZipFile(entry) as archive, contextlib.suppress(KeyError):
            archive.getinfo(f"{package}/__init__.py")
            return True
    return False


def _own_modules_or_not(entries: list[str]) -> None:
    """Drop the repository's preloaded modules unless ``entries`` find them where the server
    did (:data:`devkit.repo.ROOT`)."""
    for package in PRELOAD_OWN:
        first = next((e for e in entries if _finds(e, package)), None)
        if first is None or os.path.realpath(first) != os.path.realpath(ROOT):
            for name in [n for n in sys.modules if n.split(".")[0] in OWN_PACKAGES]:
                del sys.modules[name]
            return


def _exit_with_client(conn: socket.socket) -> None:
    """In a fork: exit as soon as the client's connection closes (the client was killed)."""
    with contextlib.suppress(OSError):
        while conn.recv(1):
            pass
    os._exit(1)


def _streams(unbuffered: bool) -> None:
    """Standard streams on the client's descriptors 0-2 (now dup'ed over the server's)."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        if unbuffered:
            setattr(sys, name, io.TextIOWrapper(raw, write_through=True))
        else:
            buffered = io.BufferedWriter(raw)
            setattr(sys, name, io.TextIOWrapper(buffered, line_buffering=fd == 2))


def _run_fork(
    conn: socket.socket, fds: list[int], request: dict[str, Any], module: str, base: list[str]
) -> None:
    """The fork: become the client's worker, run the module, report, exit (never returns)."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        env = {str(k): str(v) for k, v in request["env"].items()}
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        _streams(bool(env.get("PYTHONUNBUFFERED")))
        entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *entries, *base]
        _own_modules_or_not(sys.path)
        sys.argv[:] = [module]  # as ``python -m module``: runpy puts the file in argv[0]
        conn.sendall(b"y")
        threading.Thread(target=_exit_with_client, args=(conn,), daemon=True).start()
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
    except BaseException:  # the fork reports whatever ended it, then exits
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(OSError):
            conn.sendall(STATUS.pack(code))
        os._exit(code)


def _handle(
    conn: socket.socket, listener: socket.socket, base: list[str], modules: tuple[str, ...]
) -> None:
    """Serve one connection: refuse it, or fork its worker."""
    fds: list[int] = []
    try:
        request, fds = _read_request(conn)
        module = servable(request, modules)
        if module is None:
            conn.sendall(b"n")
            return
        if os.fork() == 0:
            listener.close()
            _run_fork(conn, fds, request, module, base)
    except (OSError, ValueError):
        pass  # the client starts its worker itself (refused) or is gone
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def serve(path: str, modules: tuple[str, ...] = MODULES) -> None:
    """Import :data:`PRELOAD`, listen on ``path``, fork workers running one of ``modules``
    until stdin closes."""
    own = {str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base = [p for p in sys.path[1:] if p and str(Path(p).resolve()) not in own]
    for name in PRELOAD:
        importlib.import_module(name)
    for name in MODULES:  # what they import stays; runpy runs them afresh as __main__
        del sys.modules[name]
    for name in PRELOAD_OWN:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{path}.{os.getpid()}"
    listener.bind(staging)
    listener.listen(BACKLOG)
    os.replace(staging, path)  # clients see a listening socket or none
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1 << 10):
            break
        if listener in ready:
            conn, _ = listener.accept()
            _handle(conn, listener, base, modules)
    listener.close()
    with contextlib.suppress(OSError):
        os.unlink(path)


class ForkServer:
    """A running server (see the module docstring): started by :meth:`start`, ended by
    :meth:`stop` or by its starter's exit."""

    def __init__(self, proc: subprocess.Popen[bytes], path: str) -> None:
        self.proc = proc
        self.path = path

    @classmethod
    def start(cls, modules: tuple[str, ...] = MODULES) -> ForkServer:
        """Start a server with this interpreter and point the launcher at it
        (``os.environ[SOCKET_ENV]`` and ``[MODULES_ENV]``; set before any SparkSession, whose
        JVM's environment
        its workers get).

        Args:
            modules: what it serves (a test's own module; Spark's runner by default).
        """
        directory = tempfile.mkdtemp(prefix="fsstate-fork-")  # short: AF_UNIX paths <= 107
        path = os.path.join(directory, "socket")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(ROOT)
        proc = subprocess.Popen(
            [sys.executable, "-m", "devkit.python_forkserver", path, *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            cwd=directory,
        )
        os.environ[SOCKET_ENV] = path
        os.environ[MODULES_ENV] = " ".join(modules)  # the launcher sends only these
        return cls(proc, path)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until the server listens (its imports done).

        Raises:
            RuntimeError: the server exited, or did not listen in time.
        """
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fork server {self.path}: not listening")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the server (forks still running end with their clients) and remove its
        socket."""
        os.environ.pop(SOCKET_ENV, None)
        os.environ.pop(MODULES_ENV, None)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(os.path.dirname(self.path))


if __name__ == "__main__":
    serve(sys.argv[1], tuple(sys.argv[2:]) or MODULES)
