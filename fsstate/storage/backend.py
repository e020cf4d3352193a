"""The contract of a storage backend (local disk, object stores) and what it reports.

A backend works on keys relative to its location; :class:`fsstate.storage.fileio.FileIO` is
the only caller. Every backend counts the requests it makes (for a local disk: the files it
opens, lists, renames and deletes), so the cost of each engine operation on storage can be
measured and documented (``docs`` and the request-count tests).

Invariants every backend honours:

* ``put`` publishes atomically: a reader sees the whole object or none (a temporary name and a
  rename on a local disk; a single PUT, or a completed multipart upload, on an object store).
* ``put_if_absent`` publishes only if nothing exists under the key, atomically with respect to
  every other writer (``link(2)`` locally, ``If-None-Match: *`` on object stores), and returns
  whether it did; when the key exists with the very bytes given, it returns True (a retried
  request whose first attempt landed).
* A missing object raises :class:`MissingObject`; any other failure an ``OSError`` subclass
  the facade turns into a typed error naming the object. A panic of a native client
  (:func:`is_panic`) is caught and raised as such an ``OSError`` too.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any


class MissingObject(FileNotFoundError):
    """The object does not exist."""


class SizeMismatch(OSError):
    """An object's size differs from the size the caller expected (``actual`` holds it)."""

    def __init__(self, actual: int) -> None:
        super().__init__(f"size {actual}")
        self.actual = actual


@dataclass(frozen=True)
class FileEntry:
    """A file found by a listing: relative path, size and modification time."""

    path: str
    size_bytes: int
    mtime_ms: int | None


@dataclass
class RequestStats:
    """Requests made by one backend (a process-wide object per location root).

    Attributes:
        get: whole or ranged reads (a local disk: files opened for reading).
        put: writes (a multipart upload counts each part and its completion).
        head: metadata lookups.
        list: listing requests (pages).
        delete: delete requests (a bulk delete of many keys counts once).
        bytes_read: bytes received.
        bytes_written: bytes sent.
    """

    get: int = 0
    put: int = 0
    head: int = 0
    list: int = 0
    delete: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str, n: int = 1, read: int = 0, written: int = 0) -> None:
        """Count ``n`` requests of ``kind`` and the bytes they moved."""
        with self._lock:
            setattr(self, kind, getattr(self, kind) + n)
            self.bytes_read += read
            self.bytes_written += written

    def snapshot(self) -> dict[str, int]:
        """The counters as a dict (to diff before and after an operation)."""
        with self._lock:
            return {
                "get": self.get,
                "put": self.put,
                "head": self.head,
                "list": self.list,
                "delete": self.delete,
                "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written,
            }

    @property
    def requests(self) -> int:
        """All requests."""
        return self.get + self.put + self.head + self.list + self.delete


class Backend(ABC):
    """Storage under one root; keys are ``/``-separated paths relative to it."""

    stats: RequestStats

    @abstractmethod
    def describe(self, key: str) -> str:
        """A human-readable location of ``key`` (never a secret)."""

    @abstractmethod
    def read(self, key: str) -> bytes:
        """The whole object."""

    @abstractmethod
    def input_file(self, key: str, size: int | None, verify: bool = True) -> Any:
        """A seekable Arrow-readable file of the object (for Parquet).

        Args:
            key: the object.
            size: its expected size (None: look it up).
            verify: check ``size`` against storage first (:class:`SizeMismatch` if it
                differs); False trusts it (a file whose footer was already read).
        """

    @abstractmethod
    def head(self, key: str) -> FileEntry | None:
        """Size and modification time, or None if the object does not exist."""

    @abstractmethod
    def list(self, prefix: str, recursive: bool) -> list[FileEntry]:
        """Objects under the directory ``prefix`` (empty if none)."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Publish ``data`` atomically at ``key``, replacing any object there."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Publish ``data`` at ``key`` only if nothing is there; returns whether it did."""

    @abstractmethod
    def open_output(self, key: str) -> AbstractContextManager[Any]:
        """A context manager yielding a writable binary stream; the object is published when
        the block ends without an exception, and never otherwise."""

    @abstractmethod
    def delete(self, keys: Sequence[str]) -> None:
        """Delete objects (missing ones are ignored)."""

    @abstractmethod
    def makedirs(self, prefix: str) -> None:
        """Make a directory and its parents (nothing to do on object stores)."""


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of a native (Rust) client: pyo3's ``PanicException``.

    It derives from ``BaseException`` (``except Exception`` misses it), and pyo3 creates the
    class lazily under the module name ``pyo3_runtime``, which cannot be imported: it is
    recognized by its module and name.
    """
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def parquet_file(source: Any, metadata: Any = None) -> Any:
    """A Parquet reader over an Arrow-readable file, page checksums verified."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(source, metadata=metadata, page_checksum_verification=True)
