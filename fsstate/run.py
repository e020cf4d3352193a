"""Runs: sealed segments of one table, in memory, on disk as Parquet, or both.

A run starts as an in-memory Arrow segment (sealed memtable or batched write). A commit writes
it once as a Parquet file with a unique name; after that the in-memory copy may be dropped and
is decoded again from the file on demand.

Invariants:

* Runs of a table form a list ordered by sequence number: every row of run ``i`` has a smaller
  ``_seq`` than every row of run ``i + 1``. Point reads walk them newest first.
* A run's file is written once and never modified; its recorded size is checked before the
  file is decoded, so a truncated file is reported, not half-read.
* Parquet files carry the table name, kind and format version as key-value metadata, and keep
  the typed ``key`` / ``ukey`` / ``value`` struct columns of :mod:`fsstate.schema`.
"""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fsstate.config import StoreConfig
from fsstate.errors import DataFileCorruptError
from fsstate.fileio import FileIO
from fsstate.schema import FORMAT_VERSION, TableSpec
from fsstate.segment import Segment


@dataclass(frozen=True)
class FileRef:
    """A state file referenced by a manifest.

    Attributes:
        path: path relative to the store directory.
        rows: number of rows.
        size_bytes: exact file size, checked before decoding.
        min_seq: smallest sequence number (data runs) or 0.
        max_seq: largest sequence number (data runs) or 0.
        crc32: CRC-32 of the whole file, checked whenever the whole file is read.
    """

    path: str
    rows: int
    size_bytes: int
    min_seq: int = 0
    max_seq: int = 0
    crc32: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form for the manifest."""
        return {
            "path": self.path,
            "rows": self.rows,
            "size_bytes": self.size_bytes,
            "min_seq": self.min_seq,
            "max_seq": self.max_seq,
            "crc32": self.crc32,
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> FileRef:
        """Inverse of :meth:`to_json`."""
        return FileRef(
            str(obj["path"]),
            int(obj["rows"]),
            int(obj["size_bytes"]),
            int(obj.get("min_seq", 0)),
            int(obj.get("max_seq", 0)),
            obj.get("crc32"),
        )


def new_data_path(prefix: str) -> str:
    """A unique relative path for a new Parquet file (attempts never clobber each other)."""
    return f"data/{prefix}-{uuid.uuid4().hex}.parquet"


def file_metadata(spec: TableSpec, role: str) -> dict[bytes, bytes]:
    """Key-value metadata stored in every fsstate Parquet file."""
    return {
        b"fsstate.format_version": str(FORMAT_VERSION).encode(),
        b"fsstate.state": spec.name.encode(),
        b"fsstate.kind": spec.kind.encode(),
        b"fsstate.role": role.encode(),
    }


def write_table_file(
    fileio: FileIO,
    store_dir: str,
    path: str,
    table: pa.Table,
    config: StoreConfig,
) -> tuple[int, int]:
    """Write a Parquet file under the store directory; returns (size in bytes, CRC-32)."""
    compression = None if config.compression == "none" else config.compression
    return fileio.write_parquet(
        f"{store_dir}/{path}",
        table,
        row_group_size=config.row_group_rows,
        compression=compression,
    )


def read_table_file(fileio: FileIO, store_dir: str, ref: FileRef) -> pa.Table:
    """Read a whole state file after checking its size; raises DataFileCorruptError."""
    full = f"{store_dir}/{ref.path}"
    where = fileio.describe(full)
    size = fileio.size(full)
    if size is None:
        raise DataFileCorruptError(
            f"state file {where} is missing; restore an older version or the directory", where
        )
    if size != ref.size_bytes:
        raise DataFileCorruptError(
            f"state file {where} has {size} bytes, the manifest recorded {ref.size_bytes} "
            "(truncated or overwritten); open an older version that does not use it",
            where,
        )
    data = fileio.read_bytes(full)
    if len(data) != ref.size_bytes or (ref.crc32 is not None and zlib.crc32(data) != ref.crc32):
        raise DataFileCorruptError(
            f"state file {where} fails its checksum (corrupted on storage); open an older "
            "version that does not use it",
            where,
        )
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataFileCorruptError(
            f"state file {where} cannot be decoded ({exc}); open an older version", where
        ) from exc
    if table.num_rows != ref.rows:
        raise DataFileCorruptError(
            f"state file {where} has {table.num_rows} rows, the manifest recorded {ref.rows}",
            where,
        )
    return table


class Run:
    """A sealed run of one table: an in-memory segment, a Parquet file, or both.

    Args:
        segment: the in-memory segment (None if only on disk).
        ref: the file reference (None until written).
    """

    __slots__ = ("_segment", "max_seq", "min_seq", "ref", "rows")

    def __init__(self, segment: Segment | None, ref: FileRef | None) -> None:
        if segment is None and ref is None:
            raise ValueError("a run needs a segment or a file")
        self._segment = segment
        self.ref = ref
        if ref is not None:
            self.rows, self.min_seq, self.max_seq = ref.rows, ref.min_seq, ref.max_seq
        else:
            assert segment is not None
            self.rows = segment.num_rows
            self.min_seq, self.max_seq = segment.min_max_seq()

    @property
    def in_memory(self) -> bool:
        """Whether the decoded segment is held in memory."""
        return self._segment is not None

    @property
    def memory_bytes(self) -> int:
        """Bytes held in memory by this run (0 if only on disk)."""
        return 0 if self._segment is None else self._segment.nbytes

    def segment(self, spec: TableSpec, fileio: FileIO, store_dir: str) -> Segment:
        """The decoded segment, read from its file on first use."""
        seg = self._segment
        if seg is None:
            assert self.ref is not None
            table = read_table_file(fileio, store_dir, self.ref)
            batch = table.combine_chunks().to_batches()
            rb = batch[0] if batch else pa.RecordBatch.from_pylist([], schema=spec.row_schema())
            if not rb.schema.equals(spec.row_schema()):
                where = fileio.describe(f"{store_dir}/{self.ref.path}")
                raise DataFileCorruptError(
                    f"state file {where} has columns {rb.schema.names} that do not match state "
                    f"{spec.name!r}; it belongs to another state or format",
                    where,
                )
            seg = Segment(spec, rb)
            self._segment = seg
        return seg

    def write(
        self, spec: TableSpec, fileio: FileIO, store_dir: str, config: StoreConfig, prefix: str
    ) -> FileRef:
        """Write the in-memory segment as a Parquet file (once); returns its reference."""
        if self.ref is not None:
            return self.ref
        assert self._segment is not None
        table = pa.Table.from_batches([self._segment.batch]).replace_schema_metadata(
            file_metadata(spec, "data")
        )
        path = new_data_path(prefix)
        size, crc = write_table_file(fileio, store_dir, path, table, config)
        self.ref = FileRef(path, self.rows, size, self.min_seq, self.max_seq, crc)
        return self.ref

    def release(self) -> int:
        """Drop the in-memory copy if the run is on disk; returns the bytes freed."""
        if self._segment is None or self.ref is None:
            return 0
        freed = self._segment.nbytes
        self._segment = None
        return freed
