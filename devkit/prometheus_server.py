"""A throwaway Prometheus server on loopback, scraping given targets: Debian's ``prometheus``.

The Prometheus exporter's tests (``tests/fsstate_spark/metrics/test_prometheus.py``) start one
with the exporter as its only target and query its HTTP API. The binary is Debian's
``prometheus`` package (2.42), unpacked without installing it (``apt-get download`` and
``dpkg -x``: no service, no root needed beyond apt's) into a cache directory, once:
``python -m devkit.prometheus_server --install`` (``make test`` runs it).

Usage::

    with PrometheusServer(tmp_path, targets=["127.0.0.1:9464"]) as prom:
        prom.wait_scrape(after=time.time())
        prom.query('fsstate_state_rows{operator="count"}')  # the API's result list

What it does (the invariants a started server holds):

* finds ``prometheus`` (``$FSSTATE_PROMETHEUS``, the cache, then ``$PATH``); the cache is
  ``$FSSTATE_PROMETHEUS_CACHE`` or ``<user cache dir>/fsstate/prometheus``;
* listens on 127.0.0.1 only, on a port it picks (retrying on fresh ports if the port was taken
  meanwhile), with a fresh TSDB directory inside ``tmpdir``, lifecycle and admin APIs off;
* scrapes every target each ``scrape_interval`` (job ``fsstate``, path ``/metrics``);
* waits (bounded) for ``/-/ready``; stops with SIGTERM, SIGKILL after ``stop_timeout``.

Dependencies: stdlib (and ``apt-get``/``dpkg`` for ``--install``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

__all__ = ["PrometheusServer", "PrometheusStartError", "cache_dir", "find_prometheus", "install"]

PACKAGE = "prometheus"  # Debian's package
JOB = "fsstate"


class PrometheusStartError(RuntimeError):
    """Prometheus did not come up; the message carries the tail of its log."""


def cache_dir() -> Path:
    """Where :func:`install` unpacks the binary."""
    env = os.environ.get("FSSTATE_PROMETHEUS_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fsstate" / "prometheus"


def find_prometheus() -> str:
    """The ``prometheus`` binary: ``$FSSTATE_PROMETHEUS``, the cache, then ``$PATH``.

    Raises:
        FileNotFoundError: none holds one (run ``python -m devkit.prometheus_server --install``).
    """
    cands = [
        os.environ.get("FSSTATE_PROMETHEUS"),
        str(cache_dir() / "usr" / "bin" / "prometheus"),
        shutil.which("prometheus"),
    ]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError(
        "prometheus binary not found: python -m devkit.prometheus_server --install "
        "(Debian's package, unpacked into the cache), or set FSSTATE_PROMETHEUS"
    )


def install() -> str:
    """Unpack Debian's ``prometheus`` package into :func:`cache_dir` unless a binary is found.

    Runs ``apt-get download`` (then ``apt-get update`` and again if it fails: a fresh machine's
    lists may be stale) in a temporary directory and ``dpkg -x``; starts nothing.

    Returns:
        The binary's path.

    Raises:
        subprocess.CalledProcessError: apt or dpkg failed.
    """
    try:
        return find_prometheus()
    except FileNotFoundError:
        pass
    target = cache_dir()
    with tempfile.TemporaryDirectory(prefix="fsstate-prom-") as tmp:
        get = ["apt-get", "download", "-q", PACKAGE]
        if subprocess.run(get, cwd=tmp, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
            subprocess.run(get, cwd=tmp, check=True, capture_output=True)
        (deb,) = Path(tmp).glob(f"{PACKAGE}_*.deb")
        unpacked = Path(tmp) / "x"
        subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
        target.mkdir(parents=True, exist_ok=True)
        (target / "usr" / "bin").mkdir(parents=True, exist_ok=True)
        partial = target / "usr" / "bin" / "prometheus.partial"
        shutil.copy2(unpacked / "usr" / "bin" / "prometheus", partial)
        partial.replace(target / "usr" / "bin" / "prometheus")  # atomic: never half a binary
    return find_prometheus()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """Context manager running Prometheus on loopback with ``targets`` to scrape."""

    def __init__(
        self,
        tmpdir: str | os.PathLike[str],
        targets: Sequence[str],
        *,
        scrape_interval: str = "1s",
        binary: str | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        attempts: int = 3,
    ) -> None:
        self.root = Path(tmpdir)
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.binary = binary or find_prometheus()
        self.start_timeout, self.stop_timeout, self.attempts = start_timeout, stop_timeout, attempts
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log_path = self.root / "prometheus.log"
        self._log: IO[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def _config(self) -> Path:
        cfg = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "scrape_interval": self.scrape_interval,
                    "scrape_timeout": self.scrape_interval,
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        path = self.root / "prometheus.yml"
        path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        return path

    def start(self) -> None:
        """Start Prometheus and wait until it is ready (retries on a fresh port).

        Raises:
            PrometheusStartError: it did not come up (with its log's tail).
        """
        if self.proc is not None:
            raise RuntimeError("already started")
        self.root.mkdir(parents=True, exist_ok=True)
        config = self._config()
        for attempt in range(self.attempts):
            self.port = _free_port()
            data = self.root / f"data{attempt}"
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={data}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                start_new_session=True,
            )
            if self._wait_ready():
                return
            self.stop()
        raise PrometheusStartError(f"prometheus did not start: {self._tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def _tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(self.stop_timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (raises if the status is not
        ``success``)."""
        url = f"{self.url}/api/v1/{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result: ``[{"metric": {labels}, "value": [t, "v"]}, ...]``."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_scrape(self, after: float, timeout: float = 20.0) -> None:
        """Wait until every target was scraped successfully, starting after ``after`` (epoch
        seconds).

        Raises:
            TimeoutError: no such scrape within ``timeout`` (names the targets' states).
        """
        deadline = time.monotonic() + timeout
        active: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            active = self.api("targets")["activeTargets"]
            done = [t for t in active if t["health"] == "up" and _epoch(t["lastScrape"]) > after]
            if active and len(done) == len(active):
                return
            time.sleep(0.2)
        raise TimeoutError(f"no scrape of every target after {after}: {active}")


def _epoch(stamp: str) -> float:
    """Prometheus' RFC 3339 timestamp (nanoseconds) as epoch seconds."""
    micro = re.sub(r"(\.\d{1,6})\d*", r"\1", stamp).replace("Z", "+00:00")
    return datetime.fromisoformat(micro).timestamp()


def main(argv: list[str] | None = None) -> None:
    """``python -m devkit.prometheus_server --install``: unpack the binary (once)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="unpack Debian's prometheus")
    args = parser.parse_args(argv)
    if args.install:
        print(install())
    else:
        print(find_prometheus())


if __name__ == "__main__":
    main()
