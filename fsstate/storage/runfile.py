"""Run files: the Parquet files a table's runs are written as, and their checked reads.

Run file format (version 1): the row layout of :mod:`fsstate.format.schema`, sorted by (key, ukey,
seq), in row groups of about ``row_group_bytes``, with footer key-value metadata:

========================  ==================================================================
key                       value
========================  ==================================================================
``fsstate.format_version`` ``1``
``fsstate.state``          state name; ``fsstate.kind``: value, list or map
``fsstate.role``           ``data`` or ``ttl``
``fsstate.bloom``          Bloom filter of the grouping keys (:mod:`fsstate.format.keyfilter`)
``fsstate.rg_bounds``      base64 Arrow IPC batch: first and last grouping key of each row group
========================  ==================================================================

Invariants:

* A run file is written once and never modified. Small files are read whole and checked
  against their CRC-32; large ones are read one row group at a time (:class:`DiskRun`: the
  Bloom filter and the row-group key bounds prune a point lookup to at most the row groups
  that can hold the key), with Parquet page checksums verified.
* Every decode failure is a :class:`fsstate.errors.DataFileCorruptError` naming the file.
* Decoding runs on the calling thread (``use_threads=False``, and no dataset scan): no Arrow
  pool thread ever holds a reference to a buffer or file Python owns (the bytes of a file read
  whole, an object store's file object). Releasing one takes the GIL; a pool thread that asks
  for it while the interpreter exits is ended by ``pthread_exit``, which aborts the process
  (``terminate called without an active exception``, exit 134). In a Spark worker the other
  cores run other tasks anyway.
* A segment read through the block cache is in the reader's layout (:func:`cached_segment`).
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fsstate.config import StoreConfig
from fsstate.errors import (
    DAMAGE_REMEDY,
    DataFileCorruptError,
    StorageError,
    StorageNotFoundError,
)
from fsstate.format.evolution import project_rows, projects, same_rows
from fsstate.format.keyfilter import BloomFilter
from fsstate.format.keyorder import Bound, sort_key
from fsstate.format.refs import FileRef, decode_batch, encode_batch
from fsstate.format.schema import FORMAT_VERSION, TableSpec
from fsstate.format.segment import Segment
from fsstate.storage.cache import BlockCache
from fsstate.storage.fileio import FileIO, MissingObject, SizeMismatch
from fsstate.storage.leases import PendingFiles

WHOLE_FILE_BYTES_MAX = 4 * 1024 * 1024
WHOLE, FOOTER = -1, -2  # block cache "row groups" of a whole file and of its footer


class IoTally:
    """Data file I/O of one store since it was created (read by :mod:`fsstate.store.summary`):
    files and bytes written (every run and TTL index file) and read from storage (a whole file
    or a footer counts a file, a row group its compressed bytes; block cache hits count
    nothing). Counted where the I/O happens; the background compactor adds from its thread."""

    __slots__ = ("bytes_read", "bytes_written", "files_read", "files_written")

    def __init__(self) -> None:
        self.files_written = 0
        self.bytes_written = 0
        self.files_read = 0
        self.bytes_read = 0

    def wrote(self, size: int) -> None:
        """One data file of ``size`` bytes was written."""
        self.files_written += 1
        self.bytes_written += size

    def read(self, size: int, files: int = 1) -> None:
        """``size`` bytes of ``files`` data files (0: part of a file) were read."""
        self.files_read += files
        self.bytes_read += size


@dataclass
class RunContext:
    """Where a table's runs live: storage, directory, settings and the shared block cache;
    ``tally`` counts the store's data file I/O; ``pending`` holds the files written and not
    published yet (under the writer's lease, :mod:`fsstate.storage.leases`); ``lineage`` and
    ``birth`` are what new file names record (:mod:`fsstate.storage.naming`), kept current by
    the store."""

    fileio: FileIO
    store_dir: str
    config: StoreConfig
    cache: BlockCache
    tally: IoTally = field(default_factory=IoTally)
    pending: PendingFiles | None = None
    lineage: str = ""
    birth: int = 0

    def new_path(self, prefix: str) -> str:
        """A unique path for a new data file (relative to the store directory), pending under
        the writer's lease until a manifest names it.

        Raises:
            StorageError: the lease could not be written.
        """
        if self.pending is None:
            self.pending = PendingFiles(self.fileio)
        return self.pending.new_path(prefix, self.lineage, self.birth)


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
    row_group_rows: int | None = None,
) -> tuple[int, int]:
    """Write a Parquet file under the store directory; returns (size in bytes, CRC-32)."""
    compression = None if config.compression == "none" else config.compression
    return fileio.write_parquet(
        f"{store_dir}/{path}",
        table,
        row_group_size=row_group_rows or config.row_group_rows,
        compression=compression,
        use_dictionary=False,
    )


def corrupt_file(where: str, what: str) -> DataFileCorruptError:
    return DataFileCorruptError(f"state file {where} {what}; {DAMAGE_REMEDY}", where)


def read_table_file(fileio: FileIO, store_dir: str, ref: FileRef) -> pa.Table:
    """Read a whole state file after checking its size and CRC-32."""
    full = f"{store_dir}/{ref.path}"
    where = fileio.describe(full)
    try:
        data = fileio.read_bytes(full)
    except StorageNotFoundError as exc:
        raise corrupt_file(where, "is missing") from exc
    if len(data) != ref.size_bytes:
        raise corrupt_file(where, f"has {len(data)} bytes, the manifest recorded {ref.size_bytes}")
    if ref.crc32 is not None and zlib.crc32(data) != ref.crc32:
        raise corrupt_file(where, "fails its checksum (corrupted on storage)")
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise corrupt_file(where, f"cannot be decoded ({exc})") from exc
    if table.num_rows != ref.rows:
        raise corrupt_file(where, f"has {table.num_rows} rows, the manifest recorded {ref.rows}")
    return table


def segment_of(spec: TableSpec, table: pa.Table, where: str) -> Segment:
    batches = table.combine_chunks().to_batches()
    rb = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=spec.row_schema())
    rb = rb.replace_schema_metadata(None)
    if projects(rb.schema, spec):
        projected = project_rows(rb, spec)  # written before the state's schema evolved
        if projected is None:
            raise corrupt_file(
                where, f"has columns {rb.schema.names} that do not match state {spec.name!r}"
            )
        rb = projected
    return Segment(spec, rb)


def cached_segment(
    ctx: RunContext, key: tuple[str, int], spec: TableSpec, load: Callable[[], Segment]
) -> Segment:
    """A segment through the block cache, in ``spec``'s layout: one cached before the state's
    schema evolved (:mod:`fsstate.format.evolution`) is projected and cached again; a reader
    of an older version whose layout the cached one evolved from decodes the file itself."""
    seg = ctx.cache.get(key, load)
    if seg.spec is not spec and not same_rows(seg.spec, spec):
        # rows cached under removed fields may be null where this reader sees values: decode
        # them again, as when they are cached in a newer layout (this reader is older)
        rows = None if seg.spec.removed_fields is not None else project_rows(seg.batch, spec)
        if rows is None:
            return load()
        seg = Segment(spec, rows)
        ctx.cache.put(key, seg)
    return seg


class DiskRun:
    """What a point lookup needs of a run file: Bloom filter, row-group key bounds, footer.

    Built from the footer on first use, or directly by :meth:`Run.write` (no read needed).
    """

    __slots__ = (
        "bloom",
        "firsts",
        "lasts",
        "metadata",
        "num_row_groups",
        "path",
        "size",
        "where",
    )

    def __init__(
        self,
        path: str,
        where: str,
        size: int,
        bloom: BloomFilter | None,
        firsts: list[Any],
        lasts: list[Any],
        num_row_groups: int,
        metadata: Any = None,
    ) -> None:
        self.path = path
        self.where = where
        self.size = size
        self.bloom = bloom
        self.firsts = firsts
        self.lasts = lasts
        self.num_row_groups = num_row_groups
        self.metadata = metadata

    @classmethod
    def from_footer(cls, ctx: RunContext, ref: FileRef) -> DiskRun:
        """Read the footer of a run file (size checked first)."""
        path = f"{ctx.store_dir}/{ref.path}"
        where = ctx.fileio.describe(path)
        try:
            md = ctx.fileio.open_parquet(path, ref.size_bytes).metadata
            kv = md.metadata or {}
            bloom = BloomFilter.from_text(kv[b"fsstate.bloom"]) if b"fsstate.bloom" in kv else None
            bounds = decode_bounds(kv.get(b"fsstate.rg_bounds"))
        except MissingObject as exc:
            raise corrupt_file(where, "is missing") from exc
        except SizeMismatch as exc:
            raise corrupt_file(
                where, f"has {exc.actual} bytes, the manifest recorded {ref.size_bytes}"
            ) from exc
        except StorageError:
            raise  # storage failed: not a damaged file
        except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
            raise corrupt_file(where, f"cannot be decoded ({exc})") from exc
        if md.num_rows != ref.rows:
            raise corrupt_file(where, f"has {md.num_rows} rows, the manifest recorded {ref.rows}")
        ctx.tally.read(md.serialized_size)
        firsts, lasts = bounds if bounds else ([], [])
        return cls(path, where, ref.size_bytes, bloom, firsts, lasts, md.num_row_groups, md)

    @property
    def nbytes(self) -> int:
        """Memory held (filter and bounds)."""
        return (self.bloom.nbytes if self.bloom else 0) + 160 * len(self.firsts)

    def candidate_groups(self, key: tuple[Any, ...]) -> range:
        """Row groups whose key bounds include ``key`` (all of them if keys don't compare)."""
        if not self.firsts:
            return range(self.num_row_groups)
        try:
            hi = bisect.bisect_right(self.firsts, key)
            lo = bisect.bisect_left(self.lasts, key)
        except TypeError:
            return range(self.num_row_groups)
        return range(lo, hi)

    def groups_in_range(self, lo: Bound, hi: Bound) -> range:
        """Row groups whose key bounds may hold keys in ``[lo, hi)`` (all if keys don't compare)."""
        if not self.firsts:
            return range(self.num_row_groups)
        try:
            start = (
                0
                if lo is None
                else bisect.bisect_left([sort_key(k) for k in self.lasts], sort_key(lo))
            )
            end = self.num_row_groups
            if hi is not None:
                end = bisect.bisect_left([sort_key(k) for k in self.firsts], sort_key(hi))
        except TypeError:
            return range(self.num_row_groups)
        return range(start, max(start, end))

    def groups_between(self, first: tuple[Any, ...], last: tuple[Any, ...]) -> range:
        """Row groups whose key bounds may hold keys in ``[first, last]``, both ends included
        and compared in :func:`sort_key` order (all groups if keys don't compare)."""
        if not self.firsts:
            return range(self.num_row_groups)
        try:
            start = bisect.bisect_left([sort_key(k) for k in self.lasts], sort_key(first))
            end = bisect.bisect_right([sort_key(k) for k in self.firsts], sort_key(last))
        except TypeError:
            return range(self.num_row_groups)
        return range(start, max(start, end))

    def read_group(self, spec: TableSpec, ctx: RunContext, i: int) -> Segment:
        """Decode row group ``i`` (page checksums verified)."""
        try:
            pf = ctx.fileio.open_parquet(self.path, self.size, self.metadata)
            self.metadata = pf.metadata
            table = pf.read_row_group(i, use_threads=False)
            group = pf.metadata.row_group(i)
            size = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
            ctx.tally.read(size, files=0)
        except MissingObject as exc:
            raise corrupt_file(self.where, "is missing") from exc
        except StorageError:
            raise  # storage failed: not a damaged file
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise corrupt_file(self.where, f"row group {i} cannot be decoded ({exc})") from exc
        return segment_of(spec, table, self.where)


def encode_bounds(spec: TableSpec, firsts: list[Any], lasts: list[Any]) -> bytes:
    assert spec.key_schema is not None
    key_type = pa.struct(list(spec.key_schema))
    names = spec.key_schema.names
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([dict(zip(names, k)) for k in firsts], type=key_type),
            pa.array([dict(zip(names, k)) for k in lasts], type=key_type),
        ],
        names=["first", "last"],
    )
    text = encode_batch(batch)
    return (text or "").encode()


def decode_bounds(raw: bytes | None) -> tuple[list[Any], list[Any]] | None:
    if not raw:
        return None
    batch = decode_batch(raw.decode())
    if batch is None:
        return None
    firsts = [tuple(d.values()) for d in batch.column("first").to_pylist()]
    lasts = [tuple(d.values()) for d in batch.column("last").to_pylist()]
    return firsts, lasts
