"""FileIO: the one narrow door between fsstate and storage (local disk or object stores).

It works on paths relative to its root and delegates to a backend
(:mod:`fsstate.storage.local`, :mod:`fsstate.storage.objects`), adding typed errors, the
probe for conditional writes, Parquet encoding with CRCs and request counters.

Invariants:

* Nothing else in fsstate opens, lists, renames or deletes files; every path given to this
  class is relative to its root and uses ``/`` separators.
* A published file is complete or absent (see the backends); ``publish_if_absent`` publishes
  only if no file is there, atomically with respect to every other writer, and is what makes
  a version's manifest immutable once written.
* Durable once published (``fsync=True``, the default): a local file's data is flushed to
  disk before it gets its final name and its directory entry right after, so a file that a
  later manifest names survives a power loss with it, and a manifest is never durable before
  its files. Object stores are durable on PUT.
* Every storage failure surfaces as :class:`fsstate.errors.StorageError` naming the object and
  never a credential; a file that exists but cannot be decoded surfaces as a
  ``CorruptFileError`` from the caller.
"""

from __future__ import annotations

import contextlib
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fsstate.errors import ConfigError, StorageError, StorageNotFoundError
from fsstate.storage.backend import (
    Backend,
    FileEntry,
    MissingObject,
    RequestStats,
    SizeMismatch,
    parquet_file,
)
from fsstate.storage.local import LocalBackend
from fsstate.storage.location import Location, redact

__all__ = [
    "FileEntry",
    "FileIO",
    "Location",
    "MissingObject",
    "ParquetStream",
    "RequestStats",
    "SizeMismatch",
]


class FileIO:
    """Storage access rooted at a location (a local directory or an object store prefix).

    Args:
        uri: a local path (``/tmp/state``, ``./state``), a URI (``file://``, ``s3://bucket/prefix``,
            ``gs://...``, ``az://...``, ``memory:///...``) or a :class:`Location`.
        fsync: flush published local files and their directory entries to disk (0.5 ms to a
            few ms per file, with the disk's load); False trades crash durability for latency.
            Object stores are durable on PUT.
        options: object store settings (see :mod:`fsstate.storage.location`); they win over
            the URI's.

    Raises:
        ConfigError: if the location cannot be used.
    """

    def __init__(
        self, uri: str | Location, fsync: bool = True, options: Mapping[str, Any] | None = None
    ) -> None:
        self.location = Location.parse(uri, options)
        self.fsync = fsync
        self.is_local = self.location.is_local
        self.backend: Backend
        if self.is_local:
            self.backend = LocalBackend(self.location.path, fsync)
        else:
            from fsstate.storage.objects import ObjectBackend

            self.backend = ObjectBackend(self.location)

    @property
    def uri(self) -> str:
        """The root as a URI (no secret)."""
        return self.location.uri()

    @property
    def stats(self) -> RequestStats:
        """Requests made through this FileIO (see :class:`RequestStats`)."""
        return self.backend.stats

    def child(self, *parts: str) -> FileIO:
        """A FileIO rooted at a sub-directory (the same settings; its own request counters)."""
        return FileIO(self.location.child(*parts), self.fsync)

    # -- paths -------------------------------------------------------------------------------
    def describe(self, path: str) -> str:
        """A human-readable location of ``path`` for error messages (never a secret)."""
        return self.backend.describe(path)

    def _error(self, what: str, path: str, exc: BaseException) -> StorageError:
        detail = redact(str(exc), self.location)
        return StorageError(f"cannot {what} {self.describe(path)}: {detail}")

    # -- reads -------------------------------------------------------------------------------
    def read_bytes(self, path: str) -> bytes:
        """The whole content of a file."""
        try:
            return self.backend.read(path)
        except MissingObject as exc:
            raise StorageNotFoundError(f"{self.describe(path)} does not exist") from exc
        except OSError as exc:
            raise self._error("read", path, exc) from exc

    def open_parquet(
        self, path: str, expected_size: int | None = None, metadata: Any = None
    ) -> pq.ParquetFile:
        """A Parquet reader on ``path`` (page checksums verified).

        Args:
            path: the file.
            expected_size: its size as the manifest recorded it (checked unless ``metadata``).
            metadata: its footer, already read and checked (no request until data is read).

        Raises:
            MissingObject: the file does not exist.
            SizeMismatch: ``expected_size`` was given and the file has another size.
            StorageError: storage failed.
            pyarrow.ArrowException: the file does not decode (the caller types it).
        """
        try:
            verify = metadata is None or expected_size is None
            source = self.backend.input_file(path, expected_size, verify)
        except (MissingObject, SizeMismatch):
            raise
        except OSError as exc:
            raise self._error("read", path, exc) from exc
        return parquet_file(source, metadata)

    def size(self, path: str) -> int | None:
        """Size in bytes, or None if the file does not exist."""
        entry = self._head(path)
        return None if entry is None else entry.size_bytes

    def exists(self, path: str) -> bool:
        """Whether a file exists at ``path``."""
        return self._head(path) is not None

    def _head(self, path: str) -> FileEntry | None:
        try:
            return self.backend.head(path)
        except OSError as exc:
            raise self._error("stat", path, exc) from exc

    def list(self, directory: str, recursive: bool = False) -> list[FileEntry]:
        """Files under ``directory`` (empty if it does not exist), paths relative to the root."""
        try:
            return self.backend.list(directory, recursive)
        except OSError as exc:
            raise self._error("list", directory, exc) from exc

    # -- writes ------------------------------------------------------------------------------
    def makedirs(self, directory: str) -> None:
        """Create ``directory`` and its parents (no-op on object stores)."""
        try:
            self.backend.makedirs(directory)
        except OSError as exc:
            raise self._error("create directory", directory, exc) from exc

    def publish_bytes(self, path: str, data: bytes) -> None:
        """Atomically write ``data`` at ``path``, replacing any previous file."""
        try:
            self.backend.put(path, data)
        except OSError as exc:
            raise self._error("write", path, exc) from exc

    def publish_if_absent(self, path: str, data: bytes) -> bool:
        """Atomically write ``data`` at ``path`` unless a file is there; returns whether this
        call published it (also True when the file holds exactly ``data``: a retried request
        whose first attempt landed).

        On an object store that ignores conditional writes this refuses (ConfigError) unless
        the location declares ``single_writer`` (then: publish if no file is there, not atomic).
        """
        single = not self.check_conditional_writes()
        try:
            if single:
                existing = self.backend.head(path)
                if existing is not None:
                    return self.backend.read(path) == data
                self.backend.put(path, data)
                return True
            return self.backend.put_if_absent(path, data)
        except OSError as exc:
            raise self._error("write", path, exc) from exc

    def check_conditional_writes(self) -> bool:
        """Whether this store honours conditional writes (probed once per bucket per process:
        two conditional PUTs of one probe object, the second must be refused).

        Returns:
            True if it does; False if it does not and the location declares ``single_writer``.

        Raises:
            ConfigError: the store ignores the condition and ``single_writer`` is not set.
        """
        if self.is_local:
            return True
        loc = self.location
        key = (loc.scheme, loc.bucket, loc.option_map.get("endpoint", ""))
        honoured = _conditional.get(key)
        if honoured is None:
            probe = f".fsstate-conditional-probe-{uuid.uuid4().hex}"
            try:
                first = self.backend.put_if_absent(probe, b"1")
                second = self.backend.put_if_absent(probe, b"2")
                self.backend.delete([probe])
            except OSError as exc:
                raise self._error("probe conditional writes at", probe, exc) from exc
            honoured = _conditional[key] = first and not second
        if honoured:
            return True
        if loc.single_writer:
            return False
        raise ConfigError(
            f"the object store of {loc.uri()} ignores conditional writes (If-None-Match: *): two "
            "attempts of one task could both publish a version. Use a store that honours them "
            "(AWS S3, GCS, Azure, recent MinIO or SeaweedFS), or set the storage option "
            "single_writer=true if no two attempts can ever write one store at a time"
        )

    def write_parquet(self, path: str, table: pa.Table, **options: Any) -> tuple[int, int]:
        """Write ``table`` as a Parquet file published atomically at ``path``.

        The file is encoded in memory first, so its CRC-32 is known before it is published.

        Returns:
            (size in bytes, CRC-32 of the whole file).
        """
        sink = pa.BufferOutputStream()
        try:
            pq.write_table(table, sink, write_page_checksum=True, **options)
        except (pa.ArrowException, ValueError) as exc:
            raise StorageError(f"cannot encode {self.describe(path)}: {exc}") from exc
        data = sink.getvalue().to_pybytes()
        self.publish_bytes(path, data)
        return len(data), zlib.crc32(data)

    @contextlib.contextmanager
    def parquet_stream(
        self, path: str, schema: pa.Schema, **options: Any
    ) -> Iterator[ParquetStream]:
        """Write a Parquet file row group by row group, published atomically at ``path`` when
        the block ends without an exception (else discarded).

        Unlike :meth:`write_parquet` the encoded file is never held in memory whole: a merge of
        runs larger than the memory budget streams through (on object stores, as a multipart
        upload). Size and CRC-32 of the whole file are on the yielded stream after the block.
        """
        try:
            with self.backend.open_output(path) as out:
                sink = _CrcSink(out)
                writer = pq.ParquetWriter(sink, schema, write_page_checksum=True, **options)
                stream = ParquetStream(writer, sink)
                try:
                    yield stream
                finally:
                    writer.close()
            self.stats.add("put", n=0, written=sink.size)
        except (OSError, pa.ArrowException) as exc:
            raise self._error("write", path, exc) from exc

    def delete(self, path: str) -> bool:
        """Delete a file; returns False if it was already gone."""
        existed = True
        if self.is_local:
            existed = self._head(path) is not None
        self.delete_many([path])
        return existed

    def delete_many(self, paths: Sequence[str]) -> None:
        """Delete files (missing ones are ignored; object stores: bulk requests)."""
        if not paths:
            return
        try:
            self.backend.delete(list(paths))
        except OSError as exc:
            raise self._error("delete", paths[0], exc) from exc


_conditional: dict[tuple[str, str, str], bool] = {}


class _CrcSink:
    """A write-only file object over an Arrow output stream that keeps size and CRC-32."""

    def __init__(self, out: Any) -> None:
        self._out = out
        self.size = 0
        self.crc = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.crc = zlib.crc32(view, self.crc)
        self.size += view.nbytes
        self._out.write(data)
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        """Nothing buffered here (the Arrow stream flushes on close)."""

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True  # the Arrow stream is closed by its owner


class ParquetStream:
    """An open :meth:`FileIO.parquet_stream`: row groups in, footer metadata at the end."""

    def __init__(self, writer: pq.ParquetWriter, sink: _CrcSink) -> None:
        self._writer = writer
        self._sink = sink

    def write_row_group(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` as one row group."""
        self._writer.write_batch(batch, row_group_size=max(1, batch.num_rows))

    def add_metadata(self, metadata: dict[bytes, bytes]) -> None:
        """Key-value metadata for the footer (written when the block ends)."""
        self._writer.add_key_value_metadata(metadata)

    @property
    def size_bytes(self) -> int:
        """Bytes written so far (the whole file once the block has ended)."""
        return self._sink.size

    @property
    def crc32(self) -> int:
        """CRC-32 of the bytes written so far."""
        return self._sink.crc
