"""FileIO: the one narrow door between fsstate and storage, over ``pyarrow.fs``.

Invariants:

* Nothing else in fsstate opens, lists, renames or deletes files; every path given to this
  class is relative to its root and uses ``/`` separators.
* A published file is complete or absent: local files are written to a unique temporary name
  in the same directory and renamed over the final name (atomic on POSIX); on object stores a
  single PUT is atomic, so the final name is written directly.
* Durable once published (``fsync=True``, the default): a local file's data is flushed to
  disk before the rename and its directory entry right after, so a file that a later manifest
  names survives a power loss with it, and a manifest is never durable before its files.
  Object stores are durable on PUT.
* Every storage failure surfaces as :class:`fsstate.errors.StorageError` naming the path;
  a file that exists but cannot be decoded surfaces as a ``CorruptFileError`` from the caller.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fsstate.errors import ConfigError, StorageError


@dataclass(frozen=True)
class FileEntry:
    """A file found by :meth:`FileIO.list`: relative path, size and modification time."""

    path: str
    size_bytes: int
    mtime_ms: int | None


class FileIO:
    """Storage access rooted at a URI or local path.

    Args:
        uri: a local path (``/tmp/state``, ``./state``) or any URI pyarrow understands
            (``file:///...``, ``s3://bucket/prefix``, ``gs://...``, ``hdfs://...``).
        fsync: flush published local files and their directory entries to disk (0.5 ms to a
            few ms per file, with the disk's load); False trades crash durability for latency.

    Raises:
        ConfigError: if the URI cannot be resolved to a filesystem.
    """

    def __init__(self, uri: str, fsync: bool = True) -> None:
        self.uri = uri
        self.fsync = fsync
        try:
            if "://" in uri:
                fs, root = pafs.FileSystem.from_uri(uri)
            else:
                fs, root = pafs.LocalFileSystem(), os.path.abspath(uri)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as exc:
            raise ConfigError(
                f"state URI {uri!r} cannot be opened ({exc}); give a local path or a URI "
                "pyarrow.fs understands (file://, s3://, gs://, hdfs://)"
            ) from exc
        self.fs: pafs.FileSystem = fs
        self.root = root.rstrip("/") or "/"
        self.is_local = isinstance(fs, pafs.LocalFileSystem)
        self._made_dirs: set[str] = set()

    # -- paths -------------------------------------------------------------------------------
    def full(self, path: str) -> str:
        """The filesystem path of a relative path."""
        return f"{self.root}/{path}" if path else self.root

    def describe(self, path: str) -> str:
        """A human-readable location of ``path`` for error messages."""
        full = self.full(path)
        return full if self.is_local else f"{self.uri.rstrip('/')}/{path}"

    # -- reads -------------------------------------------------------------------------------
    def read_bytes(self, path: str) -> bytes:
        """The whole content of a file."""
        try:
            with self.fs.open_input_stream(self.full(path)) as f:
                data: bytes = f.read()
                return data
        except FileNotFoundError as exc:
            raise StorageError(f"{self.describe(path)} does not exist") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {self.describe(path)}: {exc}") from exc

    def open_parquet(self, path: str) -> pq.ParquetFile:
        """A Parquet reader on ``path`` (pyarrow errors pass through for the caller to type)."""
        f = self.fs.open_input_file(self.full(path))
        return pq.ParquetFile(f, page_checksum_verification=True)

    def size(self, path: str) -> int | None:
        """Size in bytes, or None if the file does not exist."""
        info = self._info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        return int(info.size) if info.size is not None else 0

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at ``path``."""
        return bool(self._info(path).type != pafs.FileType.NotFound)

    def list(self, directory: str, recursive: bool = False) -> list[FileEntry]:
        """Files under ``directory`` (empty if it does not exist), paths relative to the root."""
        selector = pafs.FileSelector(
            self.full(directory), allow_not_found=True, recursive=recursive
        )
        try:
            infos = self.fs.get_file_info(selector)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {self.describe(directory)}: {exc}") from exc
        prefix = self.root + "/"
        out = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
            mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else None
            out.append(FileEntry(rel, int(info.size or 0), mtime))
        return out

    # -- writes ------------------------------------------------------------------------------
    def makedirs(self, directory: str) -> None:
        """Create ``directory`` and its parents (no-op on object stores)."""
        try:
            self.fs.create_dir(self.full(directory), recursive=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create directory {self.describe(directory)}: {exc}"
            ) from exc

    def publish_bytes(self, path: str, data: bytes) -> None:
        """Atomically write ``data`` at ``path``, replacing any previous file."""
        target = self.full(path)
        tmp = self._temp_name(target)
        try:
            self._ensure_parent(target)
            with self.fs.open_output_stream(tmp) as f:
                f.write(data)
            self._publish(tmp, target)
        except OSError as exc:
            self._discard(tmp)
            raise StorageError(f"cannot write {self.describe(path)}: {exc}") from exc

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

        Unlike :meth:`write_parquet` the encoded file is never held in memory: a merge of runs
        larger than the memory budget streams through. Size and CRC-32 of the whole file are
        on the yielded stream after the block.
        """
        target = self.full(path)
        tmp = self._temp_name(target)
        published = False
        try:
            self._ensure_parent(target)
            with self.fs.open_output_stream(tmp) as out:
                sink = _CrcSink(out)
                writer = pq.ParquetWriter(sink, schema, write_page_checksum=True, **options)
                stream = ParquetStream(writer, sink)
                try:
                    yield stream
                finally:
                    writer.close()
            self._publish(tmp, target)
            published = True
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot write {self.describe(path)}: {exc}") from exc
        finally:
            if not published:
                self._discard(tmp)

    def delete(self, path: str) -> bool:
        """Delete a file; returns False if it was already gone."""
        try:
            self.fs.delete_file(self.full(path))
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot delete {self.describe(path)}: {exc}") from exc

    # -- internals ---------------------------------------------------------------------------
    def _info(self, path: str) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(self.full(path))
        except OSError as exc:
            raise StorageError(f"cannot stat {self.describe(path)}: {exc}") from exc

    def _ensure_parent(self, target: str) -> None:
        parent = target.rpartition("/")[0]
        if self.is_local and parent not in self._made_dirs:
            self.fs.create_dir(parent, recursive=True)
            if self.fsync and _DIR_FLAGS is not None:
                # the entries of directories just made: each ancestor up to the root, once
                d = parent
                while d.startswith(self.root) and d != self.root:
                    d = d.rpartition("/")[0] or "/"
                    _fsync(d, _DIR_FLAGS)
            self._made_dirs.add(parent)

    def _publish(self, tmp: str, target: str) -> None:
        """Rename a complete temporary file to its final name, durably if ``fsync``."""
        if tmp == target:
            return  # object store: the PUT was the publication
        if self.fsync:
            _fsync(tmp, os.O_RDONLY)
        self.fs.move(tmp, target)
        if self.fsync and _DIR_FLAGS is not None:
            _fsync(target.rpartition("/")[0] or "/", _DIR_FLAGS)

    def _temp_name(self, target: str) -> str:
        if not self.is_local:
            return target  # a single PUT is atomic on object stores
        head, _, tail = target.rpartition("/")
        return f"{head}/.tmp-{uuid.uuid4().hex}-{tail}"

    def _discard(self, tmp: str) -> None:
        if not self.is_local:
            return
        with contextlib.suppress(OSError):
            self.fs.delete_file(tmp)


# directories can be opened (and fsynced) on POSIX only; elsewhere a rename is left to the OS
_DIR_FLAGS: int | None = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if os.name == "posix" else None


def _fsync(path: str, flags: int) -> None:
    """Flush a local file's (or directory's) data and metadata to disk."""
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
