"""A tiny counting, fault-injecting HTTP/1.1 reverse proxy for tests (stdlib only).

    with CountingProxy("http://127.0.0.1:9000") as px:   # px.url -> "http://127.0.0.1:PORT"
        ... point the client at px.url ...
        px.counts            # Counter({"GET": 3, "PUT": 1, ...})
        px.requests          # [Req(method, path, headers, status), ...]; headers: the ones
                             #   named in px.record_headers (range, if-none-match, if-match, ...)
        px.add_fault("503", method="PUT", times=2)       # answer 503 twice, do not forward
        px.add_fault("reset", method="GET")              # RST the client before forwarding
        px.add_fault("reset_after", method="PUT")        # forward, then drop the response (RST)
        px.add_fault("503_after", method="PUT")          # forward, then answer 503 instead
        px.add_fault("delay", seconds=3)                 # sleep before forwarding

The Host header is forwarded unchanged, so SigV4 signatures made for the proxy's address
verify upstream (S3 servers check the signature against the Host they receive). Requests are
forwarded over one upstream keep-alive connection per client connection. Bodies are streamed
(Content-Length or chunked). Only for loopback test servers.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

__all__ = ["CountingProxy", "Fault", "Req"]

_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
}
_CHUNK = 64 * 1024


class Req(NamedTuple):
    method: str
    path: str
    headers: dict
    status: object  # int, "reset" or "upstream-error:..."


@dataclass
class Fault:
    action: str  # "503" | "503_after" | "reset" | "reset_after" | "delay"
    method: str | None = None  # match this method only
    path_contains: str | None = None
    times: int = 1  # how many matching requests it applies to (-1: forever)
    seconds: float = 0.0  # for "delay"
    status: int = 503  # for "503" (any status works, e.g. 500)

    def matches(self, method: str, path: str) -> bool:
        return (
            self.times != 0
            and (self.method is None or self.method == method)
            and (self.path_contains is None or self.path_contains in path)
        )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *a):  # quiet
        pass

    def setup(self):
        super().setup()
        self._up: http.client.HTTPConnection | None = None
        self.server.owner._note_connection()

    def finish(self):
        try:
            super().finish()
        finally:
            if self._up is not None:
                self._up.close()

    # every method goes through _proxy
    def __getattr__(self, name):
        if name.startswith("do_"):
            return self._proxy
        raise AttributeError(name)

    def _read_body(self) -> bytes | None:
        te = self.headers.get("Transfer-Encoding", "").lower()
        if "chunked" in te:
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else None

    def _reset(self):
        # SO_LINGER {on, 0}: close() sends RST instead of FIN
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.close()

    def _proxy(self):
        owner = self.server.owner
        method, path = self.command, self.path
        body = self._read_body()
        fault = owner._take_fault(method, path)
        if fault is not None and fault.action == "delay":
            time.sleep(fault.seconds)
        if fault is not None and fault.action == "reset":
            owner._record(method, path, self.headers, "reset")
            return self._reset()
        if fault is not None and fault.action == "503_after":
            with contextlib.suppress(OSError, http.client.HTTPException):
                self._forward(method, path, body).read()
        if fault is not None and fault.action in ("503", "503_after"):
            msg = (
                b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code>'
                b"<Message>injected by proxy</Message></Error>"
            )
            owner._record(method, path, self.headers, fault.status)
            self.send_response(fault.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(msg)
            return
        try:
            resp = self._forward(method, path, body)
        except (OSError, http.client.HTTPException) as e:
            owner._record(method, path, self.headers, f"upstream-error:{e}")
            if self._up is not None:
                self._up.close()
                self._up = None
            return self._reset()
        owner._record(method, path, self.headers, resp.status)
        if fault is not None and fault.action == "reset_after":
            resp.read()
            return self._reset()
        if resp.status in owner.rewrite_status:  # e.g. a server that ignores preconditions
            resp.read()
            self.send_response(owner.rewrite_status[resp.status])
            self.send_header("ETag", '"rewritten-by-proxy"')  # clients want one on a PUT
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        self._relay(method, resp)

    def _forward(self, method, path, body):
        owner = self.server.owner
        for attempt in (1, 2):  # a pooled upstream connection may have been closed meanwhile
            if self._up is None:
                self._up = http.client.HTTPConnection(owner.up_host, owner.up_port, timeout=60)
            try:
                self._up.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    if k.lower() not in _HOP and k.lower() not in owner.drop_headers:
                        self._up.putheader(k, v)
                if body is not None and "Content-Length" not in self.headers:
                    self._up.putheader("Content-Length", str(len(body)))
                self._up.endheaders(body)
                return self._up.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._up.close()
                self._up = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _relay(self, method, resp: http.client.HTTPResponse):
        self.send_response_only(resp.status, resp.reason)
        chunked = resp.chunked
        length = resp.getheader("Content-Length")
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        no_body = method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        if not no_body and chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif not no_body and length is None:  # read-until-close upstream: buffer it
            data = resp.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self._up.close()
            self._up = None
            return
        self.end_headers()
        if no_body:
            resp.read()
        else:
            while True:
                chunk = resp.read1(_CHUNK) if chunked else resp.read(_CHUNK)
                if not chunk:
                    break
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                else:
                    self.wfile.write(chunk)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if resp.will_close:
            self._up.close()
            self._up = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: CountingProxy

    def handle_error(self, request, client_address):
        # clients that time out or hang up mid-response are expected in fault tests
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handle_error(request, client_address)


class CountingProxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0) -> None:
        u = urllib.parse.urlsplit(upstream)
        if u.scheme != "http":
            raise ValueError("only http:// upstreams")
        self.up_host, self.up_port = u.hostname, u.port or 80
        self._srv = _Server((host, port), _Handler)
        self._srv.owner = self
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self.counts: Counter[str] = Counter()
        self.requests: list[Req] = []
        self.record_headers = (
            "range",
            "if-none-match",
            "if-match",
            "content-length",
            "x-amz-copy-source",
            "user-agent",
        )
        self.connections = 0
        self.drop_headers: tuple[str, ...] = ()  # request headers never forwarded (lowercase)
        self.rewrite_status: dict[int, int] = {}  # upstream status -> status the client gets
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        h, p = self._srv.server_address[:2]
        return f"http://{h}:{p}"

    def start(self) -> CountingProxy:
        self._thread = threading.Thread(
            target=self._srv.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="counting-proxy",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
        if self._thread:
            self._thread.join(5)

    def __enter__(self) -> CountingProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()
            self.requests.clear()
            self.connections = 0

    def add_fault(self, action: str, **kw) -> Fault:
        f = Fault(action, **kw)
        with self._lock:
            self._faults.append(f)
        return f

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    # -- used by the handler
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self._faults:
                if f.matches(method, path):
                    if f.times > 0:
                        f.times -= 1
                    return f
        return None

    def _record(self, method, path, headers, status) -> None:
        h = {k.lower(): v for k, v in headers.items() if k.lower() in self.record_headers}
        with self._lock:
            self.counts[method] += 1
            self.requests.append(Req(method, path, h, status))

    def _note_connection(self) -> None:
        with self._lock:
            self.connections += 1


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="counting reverse proxy")
    ap.add_argument("upstream")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    with CountingProxy(a.upstream, port=a.port) as px:
        print("listening on", px.url, flush=True)
        try:
            while True:
                time.sleep(5)
                print(dict(px.counts), flush=True)
        except KeyboardInterrupt:
            pass
