"""The object-store backend (S3, GCS, Azure, in-memory) over ``obstore``, the Python binding of
Rust's ``object_store``.

Requests (what the request counters see): ``read`` one GET; ``input_file`` one ranged GET of
the file's tail (footer and real size together, no HEAD) and one ranged GET per read Arrow
makes (a row group with ``pre_buffer``: one or two); ``put`` one PUT (a multipart upload above
``PART_BYTES``: one request per part plus two); ``put_if_absent`` one conditional PUT
(``If-None-Match: *``) plus one GET when the key exists; ``delete`` one bulk request per 1000
keys; ``list`` one request per page; ``head`` one HEAD.

Invariants:

* One client per (scheme, bucket, settings, the scheme's environment variables) per process:
  connections are reused by every store of the process. Every ``memory://`` location of a
  process shares one in-memory store.
* Retries: the client retries reads, overwriting writes and server errors with exponential
  backoff (``retries_max`` times, within ``retry_timeout_ms``); a conditional PUT whose answer
  was lost (connection reset, timeout) is retried here after reading the key back, so a write
  that landed is recognized as ours (same bytes) and never reported as a conflict.
* Every failure is raised as :class:`ObjectStoreFailure` (an ``OSError``) or
  :class:`fsstate.storage.backend.MissingObject`; its message is one line: the cause in a few
  words (connection refused, DNS, timeout, access denied, server error...), the address the
  client tried, and which settings to check, never a secret (worded by
  :mod:`fsstate.storage.failures`). The client's full report (tens of lines) goes to the debug
  log (logger ``fsstate.storage.objects``), scrubbed of secrets too.
* A panic of the client (``pyo3_runtime.PanicException``, a ``BaseException``) never escapes:
  building a client turns it into a ``ConfigError``, a request into an ``ObjectStoreFailure``.
  Settings are checked before a client is built (:func:`fsstate.storage.location.check_options`,
  endpoints from the environment too), so the known panics (a bad endpoint port) do not happen.
* ``open_output`` publishes only when the block ends without an exception: small objects are
  one PUT at the end; larger ones a multipart upload completed at the end (an abandoned upload
  stays invisible).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import obstore
import obstore.exceptions as oexc
import pyarrow as pa
from obstore.store import MemoryStore, from_url

from fsstate.storage.backend import (
    Backend,
    FileEntry,
    MissingObject,
    RequestStats,
    SizeMismatch,
    is_panic,
)
from fsstate.storage.failures import ENV_PREFIX, build_error, explain, one_line
from fsstate.storage.location import Location, check_endpoint, check_options

PART_BYTES = 8 * 1024 * 1024  # multipart upload part size (memory held per streamed write)
TAIL_BYTES = 64 * 1024  # bytes read from a file's end to get its footer (and its real size)
CREATE_ATTEMPTS = 3  # conditional PUTs whose answer was lost, tried again after a read-back

_CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "timeout",
        "connect_timeout",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "user_agent",
        "http1_only",
        "http2_only",
    }
)
_FSSTATE_KEYS = frozenset({"single_writer", "retries_max", "retry_timeout_ms"})
_DEFAULTS = {"timeout": "30s", "connect_timeout": "5s"}  # the client's own defaults too
# endpoints the client reads from the environment: (option that wins over them, variables)
_ENV_ENDPOINTS = {
    "s3": ("endpoint", ("AWS_ENDPOINT_URL", "AWS_ENDPOINT")),
    "az": ("endpoint", ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")),
    "gs": ("base_url", ("GOOGLE_BASE_URL",)),
}

T = TypeVar("T")


class ObjectStoreFailure(OSError):
    """A request failed (after the client's retries); the message names the cause and what
    to check (the caller adds the operation and the object)."""


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
_memory: MemoryStore | None = None


def client_for(location: Location) -> Any:
    """The process's client for a location's bucket and settings (created once)."""
    global _memory
    opts = location.option_map
    prefix = ENV_PREFIX.get(location.scheme, "-") + "_"
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(prefix)))
    key = (location.scheme, location.bucket, tuple(sorted(opts.items())), env)
    with _clients_lock:
        client = _clients.get(key)
        if client is not None:
            return client
        if location.scheme == "memory":
            if _memory is None:
                _memory = MemoryStore()
            client = _memory
        else:
            client = _build(location, opts)
        _clients[key] = client
        return client


def _check_settings(location: Location, opts: dict[str, str]) -> None:
    """The typed settings (again: a location may not come from ``Location.parse``) and the
    endpoints the client would read from the environment."""
    check_options(opts, location.uri())
    option, variables = _ENV_ENDPOINTS.get(location.scheme, ("", ()))
    if option and option not in opts:
        for name in variables:
            value = os.environ.get(name)
            if value:
                check_endpoint(value, name, location.uri(), environment=True)


def _build(location: Location, opts: dict[str, str]) -> Any:
    _check_settings(location, opts)
    client_options: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for name, value in opts.items():
        if name in _FSSTATE_KEYS:
            continue
        if name in _CLIENT_KEYS:
            client_options[name] = value
        else:
            config[name] = value
    if client_options:
        # given client options replace the client's environment ones: keep those users set
        env = ENV_PREFIX.get(location.scheme, "")
        for name, value in _DEFAULTS.items():
            client_options.setdefault(name, value)
        allow = os.environ.get(f"{env}_ALLOW_HTTP") if env else None
        if allow is not None:
            client_options.setdefault("allow_http", allow)
    retries = int(opts.get("retries_max", "4"))
    retry_timeout = int(opts.get("retry_timeout_ms", "30000"))
    retry = {
        "max_retries": retries,
        "retry_timeout": _dt.timedelta(milliseconds=retry_timeout),
        "backoff": {
            "init_backoff": _dt.timedelta(milliseconds=100),
            "max_backoff": _dt.timedelta(seconds=2),
            "base": 2,
        },
    }
    build: Callable[..., Any] = from_url  # one call for every provider's typed overload
    try:
        return build(
            f"{location.scheme}://{location.bucket}",
            config=config or None,
            client_options=client_options or None,
            retry_config=retry,
        )
    except (oexc.BaseError, ValueError) as exc:
        raise build_error(location, opts, exc) from None
    except BaseException as exc:  # only the client's panic (a BaseException) is ours to type
        if not is_panic(exc):
            raise
        raise build_error(location, opts, exc) from None


class ObjectBackend(Backend):
    """Objects under ``location`` (its path is the key prefix)."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self.client = client_for(location)
        self.prefix = location.path.strip("/")
        self.stats = RequestStats()

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def describe(self, key: str) -> str:
        """The object's URI (no secret)."""
        return self.location.describe(key)

    def _call(self, key: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except FileNotFoundError as exc:
            raise MissingObject(key) from exc
        except oexc.BaseError as exc:
            raise ObjectStoreFailure(explain(exc, self.location)) from None
        except ValueError as exc:  # the client refused the request (a malformed path or range)
            raise ObjectStoreFailure(f"invalid request: {one_line(str(exc))}") from None
        except BaseException as exc:  # only the client's panic (a BaseException) is ours to type
            if not is_panic(exc):
                raise
            raise ObjectStoreFailure(explain(exc, self.location)) from None

    # -- reads -------------------------------------------------------------------------------
    def read(self, key: str) -> bytes:
        """The whole object (one GET)."""
        data = self._call(key, lambda: bytes(obstore.get(self.client, self._key(key)).bytes()))
        self.stats.add("get", read=len(data))
        return data

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (one ranged GET)."""
        data = self._call(
            key, lambda: bytes(obstore.get_range(self.client, self._key(key), start=start, end=end))
        )
        self.stats.add("get", read=len(data))
        return data

    def input_file(self, key: str, size: int | None, verify: bool = True) -> Any:
        """An Arrow file over ranged GETs; with ``verify`` its tail is read first (the real
        size comes with it), else no request is made until Arrow reads."""
        expected_size = size
        if expected_size is not None and not verify:
            return pa.PythonFile(_RangeReader(self, key, expected_size, b""), mode="r")
        if expected_size is None:
            entry = self.head(key)
            if entry is None:
                raise MissingObject(key)
            expected_size = entry.size_bytes
        want = min(TAIL_BYTES, expected_size)

        def tail() -> tuple[int, bytes]:
            result = obstore.get(self.client, self._key(key), options={"range": {"suffix": want}})
            return int(result.meta["size"]), bytes(result.bytes())

        if want:
            size, data = self._call(key, tail)
            self.stats.add("get", read=len(data))
            if size != expected_size:
                raise SizeMismatch(size)
        else:
            size, data = 0, b""
        return pa.PythonFile(_RangeReader(self, key, size, data), mode="r")

    def head(self, key: str) -> FileEntry | None:
        """Size and modification time (one HEAD), or None."""
        self.stats.add("head")
        try:
            meta = self._call(key, lambda: obstore.head(self.client, self._key(key)))
        except MissingObject:
            return None
        return FileEntry(key, int(meta["size"]), _ms(meta.get("last_modified")))

    def list(self, prefix: str, recursive: bool) -> list[FileEntry]:
        """Objects under a directory (one request per page)."""
        base = self._key(prefix).rstrip("/") + "/"
        strip = f"{self.prefix}/" if self.prefix else ""
        out: list[FileEntry] = []

        def entries(metas: list[Any]) -> None:
            for m in metas:
                path = str(m["path"])
                rel = path[len(strip) :] if path.startswith(strip) else path
                out.append(FileEntry(rel, int(m["size"]), _ms(m.get("last_modified"))))

        def run() -> None:
            if recursive:
                for chunk in obstore.list(self.client, prefix=base):
                    self.stats.add("list")
                    entries(list(chunk))
            else:
                self.stats.add("list")
                result = obstore.list_with_delimiter(self.client, prefix=base)
                entries(list(result["objects"]))

        self._call(prefix, run)
        return out

    # -- writes ------------------------------------------------------------------------------
    def makedirs(self, prefix: str) -> None:
        """Nothing: object stores have no directories."""

    def put(self, key: str, data: bytes) -> None:
        """One PUT (the client retries it: overwriting is idempotent)."""
        self._call(key, lambda: obstore.put(self.client, self._key(key), data))
        self.stats.add("put", n=_put_requests(len(data)), written=len(data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """A conditional PUT; the key's bytes decide when it existed or the answer was lost."""
        full = self._key(key)
        for attempt in range(CREATE_ATTEMPTS):
            self.stats.add("put", written=len(data))
            try:
                obstore.put(self.client, full, data, mode="create")
                return True
            except (oexc.AlreadyExistsError, oexc.PreconditionError):
                return self._same_bytes(key, data)  # ours if a retry of a landed write
            except oexc.GenericError as exc:  # the answer was lost (reset, timeout)
                try:
                    return self._same_bytes(key, data)
                except MissingObject:
                    if attempt == CREATE_ATTEMPTS - 1:
                        raise ObjectStoreFailure(explain(exc, self.location)) from None
            except oexc.BaseError as exc:
                raise ObjectStoreFailure(explain(exc, self.location)) from None
            except BaseException as exc:  # only the client's panic is ours to type
                if not is_panic(exc):
                    raise
                raise ObjectStoreFailure(explain(exc, self.location)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _same_bytes(self, key: str, data: bytes) -> bool:
        return self.read(key) == data

    @contextlib.contextmanager
    def open_output(self, key: str) -> Iterator[Any]:
        """A buffered writer: one PUT, or a multipart upload, completed when the block ends."""
        writer = self._call(
            key,
            lambda: obstore.open_writer(
                self.client, self._key(key), buffer_size=PART_BYTES, max_concurrency=2
            ),
        )
        sink = _CountingWriter(self, key, writer)
        ok = False
        try:
            yield sink
            ok = True
        finally:
            if ok:
                self._call(key, writer.close)
                self.stats.add("put", n=_put_requests(sink.size))
            # else: never closed, so the object is not published

    def delete(self, keys: Sequence[str]) -> None:
        """Bulk deletes of up to 1000 keys per request."""
        for start in range(0, len(keys), 1000):
            batch = [self._key(k) for k in keys[start : start + 1000]]
            self.stats.add("delete")
            with contextlib.suppress(MissingObject):
                self._call(batch[0], lambda b=batch: obstore.delete(self.client, b))  # type: ignore[misc]


def _put_requests(size: int) -> int:
    return 1 if size <= PART_BYTES else -(-size // PART_BYTES) + 2


def _ms(ts: Any) -> int | None:
    if ts is None:
        return None
    return int(ts.timestamp() * 1000)


class _CountingWriter:
    """A binary stream over obstore's writer that keeps the size written."""

    def __init__(self, backend: ObjectBackend, key: str, writer: Any) -> None:
        self._backend = backend
        self._key = key
        self._writer = writer
        self.size = 0

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._backend._call(self._key, lambda: self._writer.write(data))
        self.size += n
        return n


class _RangeReader:
    """A read-only file over ranged GETs, with the tail already read (Parquet footers)."""

    def __init__(self, backend: ObjectBackend, key: str, size: int, tail: bytes) -> None:
        self._backend = backend
        self._key = key
        self._size = size
        self._tail = tail
        self._tail_at = size - len(tail)
        self._pos = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = 0 if whence == 0 else self._pos if whence == 1 else self._size
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        start = self._pos
        end = self._size if n is None or n < 0 else min(self._size, start + n)
        if end <= start:
            return b""
        if start >= self._tail_at:
            data = self._tail[start - self._tail_at : end - self._tail_at]
        else:
            data = self._backend.read_range(self._key, start, end)
        self._pos = start + len(data)
        return data

    def close(self) -> None:
        self.closed = True
