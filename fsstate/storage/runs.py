"""Runs: sealed segments of one table, in memory, on disk as Parquet, or both.

A run starts as an in-memory Arrow segment (sealed memtable or batched write). It is written
once as a Parquet file with a unique name, by a spill or by a commit, whichever comes first;
the commit reuses what a spill wrote. After that the in-memory copy may be released.

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

* Runs of a table are ordered by sequence number: every row of run ``i`` has a smaller
  ``_seq`` than every row of run ``i + 1``.
* A run file is written once and never modified. Small files are read whole and checked
  against their CRC-32; large ones are read one row group at a time (the Bloom filter and the
  row-group key bounds prune a point lookup to at most the row groups that can hold the key),
  with Parquet page checksums verified.
* Every decode failure is a :class:`fsstate.errors.DataFileCorruptError` naming the file.
* Decoding runs on the calling thread (``use_threads=False``, and no dataset scan): no Arrow
  pool thread ever holds a reference to a buffer or file Python owns (the bytes of a file read
  whole, an object store's file object). Releasing one takes the GIL; a pool thread that asks
  for it while the interpreter exits is ended by ``pthread_exit``, which aborts the process
  (``terminate called without an active exception``, exit 134, seen after a CLI error right
  after reads: issue 45). In a Spark worker the other cores run other tasks anyway.
* Write-through: a file written in one part and small enough to be read whole enters this
  process's block cache as the segment it was written from (the rows the file decodes to), so
  the next epoch's reads of what the last one wrote do not read it back.
"""

from __future__ import annotations

import bisect
import contextlib
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
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
from fsstate.format.segment import OpRow, Segment
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


def _corrupt(where: str, what: str) -> DataFileCorruptError:
    return DataFileCorruptError(f"state file {where} {what}; {DAMAGE_REMEDY}", where)


def read_table_file(fileio: FileIO, store_dir: str, ref: FileRef) -> pa.Table:
    """Read a whole state file after checking its size and CRC-32."""
    full = f"{store_dir}/{ref.path}"
    where = fileio.describe(full)
    try:
        data = fileio.read_bytes(full)
    except StorageNotFoundError as exc:
        raise _corrupt(where, "is missing") from exc
    if len(data) != ref.size_bytes:
        raise _corrupt(where, f"has {len(data)} bytes, the manifest recorded {ref.size_bytes}")
    if ref.crc32 is not None and zlib.crc32(data) != ref.crc32:
        raise _corrupt(where, "fails its checksum (corrupted on storage)")
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _corrupt(where, f"cannot be decoded ({exc})") from exc
    if table.num_rows != ref.rows:
        raise _corrupt(where, f"has {table.num_rows} rows, the manifest recorded {ref.rows}")
    return table


def _segment_of(spec: TableSpec, table: pa.Table, where: str) -> Segment:
    batches = table.combine_chunks().to_batches()
    rb = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=spec.row_schema())
    rb = rb.replace_schema_metadata(None)
    if projects(rb.schema, spec):
        projected = project_rows(rb, spec)  # written before the state's schema evolved
        if projected is None:
            raise _corrupt(
                where, f"has columns {rb.schema.names} that do not match state {spec.name!r}"
            )
        rb = projected
    return Segment(spec, rb)


def _cached(
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
            bounds = _decode_bounds(kv.get(b"fsstate.rg_bounds"))
        except MissingObject as exc:
            raise _corrupt(where, "is missing") from exc
        except SizeMismatch as exc:
            raise _corrupt(
                where, f"has {exc.actual} bytes, the manifest recorded {ref.size_bytes}"
            ) from exc
        except StorageError:
            raise  # storage failed: not a damaged file
        except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
            raise _corrupt(where, f"cannot be decoded ({exc})") from exc
        if md.num_rows != ref.rows:
            raise _corrupt(where, f"has {md.num_rows} rows, the manifest recorded {ref.rows}")
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
            raise _corrupt(self.where, "is missing") from exc
        except StorageError:
            raise  # storage failed: not a damaged file
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise _corrupt(self.where, f"row group {i} cannot be decoded ({exc})") from exc
        return _segment_of(spec, table, self.where)


def _encode_bounds(spec: TableSpec, firsts: list[Any], lasts: list[Any]) -> bytes:
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


def _decode_bounds(raw: bytes | None) -> tuple[list[Any], list[Any]] | None:
    if not raw:
        return None
    batch = decode_batch(raw.decode())
    if batch is None:
        return None
    firsts = [tuple(d.values()) for d in batch.column("first").to_pylist()]
    lasts = [tuple(d.values()) for d in batch.column("last").to_pylist()]
    return firsts, lasts


class Run:
    """A sealed run of one table: an in-memory segment, a Parquet file, or both.

    Args:
        segment: the in-memory segment (None if only on disk).
        ref: the file reference (None until written).
    """

    __slots__ = ("_disk", "_segment", "max_seq", "min_seq", "ref", "replaces", "rows")

    def __init__(self, segment: Segment | None, ref: FileRef | None) -> None:
        if segment is None and ref is None:
            raise ValueError("a run needs a segment or a file")
        self._segment = segment
        self.replaces: tuple[str, ...] = ()  # a compaction output: the runs it merged
        self._disk: DiskRun | None = None
        self.ref = ref
        if ref is not None:
            self.rows, self.min_seq, self.max_seq = ref.rows, ref.min_seq, ref.max_seq
        else:
            assert segment is not None
            self.rows = segment.num_rows
            self.min_seq, self.max_seq = segment.min_max_seq()

    @property
    def in_memory(self) -> bool:
        """Whether the decoded segment is pinned in memory."""
        return self._segment is not None

    @property
    def memory_bytes(self) -> int:
        """Bytes pinned by this run (segment, plus filter and bounds once on disk)."""
        pinned = self._segment.nbytes if self._segment is not None else 0
        return pinned + (self._disk.nbytes if self._disk is not None else 0)

    def _disk_run(self, ctx: RunContext) -> DiskRun:
        disk = self._disk
        if disk is None:
            assert self.ref is not None
            path = f"{ctx.store_dir}/{self.ref.path}"
            # footers are immutable: one read per process while the cache holds it
            ref = self.ref
            disk = self._disk = ctx.cache.get((path, FOOTER), lambda: DiskRun.from_footer(ctx, ref))
        return disk

    def _read_segment(self, spec: TableSpec, ctx: RunContext) -> Segment:
        """The whole file as one segment (read and checked, not cached)."""
        assert self.ref is not None
        table = read_table_file(ctx.fileio, ctx.store_dir, self.ref)
        ctx.tally.read(self.ref.size_bytes)
        return _segment_of(spec, table, ctx.fileio.describe(f"{ctx.store_dir}/{self.ref.path}"))

    def _whole(self, spec: TableSpec, ctx: RunContext) -> Segment:
        assert self.ref is not None
        path = f"{ctx.store_dir}/{self.ref.path}"
        return _cached(ctx, (path, WHOLE), spec, lambda: self._read_segment(spec, ctx))

    def _read_whole(self, ctx: RunContext) -> bool:
        assert self.ref is not None
        return (
            self.ref.size_bytes <= WHOLE_FILE_BYTES_MAX
            and self.ref.decoded_bytes * 8 <= ctx.cache.capacity_bytes
        )

    def lookup(self, spec: TableSpec, ctx: RunContext, key: tuple[Any, ...], h: int) -> list[OpRow]:
        """Op rows of ``key`` (stable hash ``h``) in this run, touching as little as possible."""
        seg = self._segment
        if seg is not None:
            return seg.rows_for(key)
        disk = self._disk_run(ctx)
        if disk.bloom is not None and not disk.bloom.may_contain(h):
            return []
        groups = disk.candidate_groups(key)
        if not groups:
            return []
        if self._read_whole(ctx):
            seg = self._whole(spec, ctx)
            built = seg.has_index
            rows = seg.rows_for(key)
            if not built:
                ctx.cache.refresh((disk.path, WHOLE))
            return rows
        out: list[OpRow] = []
        for i in groups:
            cache_key = (disk.path, i)
            group = _cached(ctx, cache_key, spec, lambda i=i: disk.read_group(spec, ctx, i))  # type: ignore[misc]
            built = group.has_index
            out.extend(group.rows_for(key))
            if not built:
                ctx.cache.refresh(cache_key)
        return out

    def segments(self, spec: TableSpec, ctx: RunContext) -> Iterator[Segment]:
        """Every row of the run as segments in key order (a full scan)."""
        if self._segment is not None:
            yield self._segment
            return
        assert self.ref is not None
        small = self.ref.size_bytes <= 64 * 1024 and self.ref.decoded_bytes <= WHOLE_FILE_BYTES_MAX
        if self._read_whole(ctx) or small:  # (a tiny file may decode to much: compression)
            yield self._whole(spec, ctx)  # through the block cache: files never change
            return
        disk = self._disk_run(ctx)
        for i in range(disk.num_row_groups):
            yield disk.read_group(spec, ctx, i)

    def cached_segments(
        self,
        spec: TableSpec,
        ctx: RunContext,
        lo: Bound = None,
        hi: Bound = None,
        point: bool = False,
        last: tuple[Any, ...] | None = None,
    ) -> Iterator[Segment]:
        """The segments that may hold keys in ``[lo, hi)`` (with ``point``: the key ``lo``;
        with ``last``: the keys from ``lo`` through ``last`` included, both whole keys), in key
        order, through the block cache (a batched read of a file this process read before
        costs no request)."""
        if self._segment is not None:
            yield self._segment
            return
        assert self.ref is not None
        if self._read_whole(ctx):
            yield self._whole(spec, ctx)
            return
        disk = self._disk_run(ctx)
        if last is not None and lo is not None:
            groups: range | None = disk.groups_between(lo, last)
        else:
            groups = disk.candidate_groups(lo) if point and lo is not None else None
        for i in groups if groups is not None else disk.groups_in_range(lo, hi):
            yield _cached(ctx, (disk.path, i), spec, lambda i=i: disk.read_group(spec, ctx, i))  # type: ignore[misc]

    def group_starts(self, ctx: RunContext, lo: Bound, hi: Bound) -> list[tuple[Any, int]]:
        """(first key, decoded bytes) of each row group that may hold keys in ``[lo, hi)``, in
        key order, from the footer alone: where a chunked scan may cut. Empty for a run held
        in memory or read whole (nothing to bound there) and for files without key bounds."""
        if self._segment is not None:
            return []
        assert self.ref is not None
        if self._read_whole(ctx):
            return []
        disk = self._disk_run(ctx)
        if not disk.firsts or not disk.num_row_groups:
            return []
        each = max(1, self.ref.decoded_bytes // disk.num_row_groups)
        return [(disk.firsts[i], each) for i in disk.groups_in_range(lo, hi)]

    def load_pinned(self, spec: TableSpec, ctx: RunContext) -> Segment:
        """Read the whole file and keep it pinned in memory (released like any written run)."""
        seg = self._segment
        if seg is None:
            seg = self._segment = self._read_segment(spec, ctx)
        return seg

    def write(self, spec: TableSpec, ctx: RunContext, prefix: str) -> FileRef:
        """Write the in-memory segment as a Parquet file (once); returns its reference."""
        if self.ref is not None:
            return self.ref
        seg = self._segment
        assert seg is not None and seg.num_rows, "a run holds rows"
        written = write_run_stream(spec, ctx, prefix, iter([seg.batch]))
        assert written is not None and written.ref is not None
        self._disk, self.ref = written._disk, written.ref
        return self.ref

    def lead_span(self) -> tuple[Any, Any] | None:
        """The smallest and largest first key field of the run's rows, from what is already
        in memory (the pinned segment, or the footer's row-group bounds once loaded), or None
        if unknown without a read or a sort (a batched write not sorted yet), or if that field
        holds a null or NaN (they do not compare).
        """
        seg = self._segment
        if seg is not None:
            n = seg.num_rows
            if not n or seg.spec.key_schema is None or not seg.is_sorted:
                return None
            lo, hi = seg.key_at(0), seg.key_at(n - 1)  # sorted: NaN, then nulls, come last
        else:
            disk = self._disk
            if disk is None or not disk.firsts:
                return None
            lo, hi = disk.firsts[0], disk.lasts[-1]
        if not lo or not hi:
            return None
        a, b = lo[0], hi[0]
        for v in (a, b):
            if v is None or (isinstance(v, float) and v != v):
                return None
        return a, b

    def release(self) -> int:
        """Drop the pinned in-memory copy if the run is on disk; returns the bytes freed."""
        if self._segment is None or self.ref is None:
            return 0
        freed = self._segment.nbytes
        self._segment = None
        return freed


@dataclass
class _StreamTally:
    """What the parts of one run file add up to, for its footer and its :class:`FileRef`."""

    hashes: list[np.ndarray[Any, Any]] = field(default_factory=list)  # distinct key hashes
    firsts: list[Any] = field(default_factory=list)  # first key of each row group
    lasts: list[Any] = field(default_factory=list)  # last key of each row group
    rows: int = 0
    arrow_bytes: int = 0
    min_seq: int = -1  # -1: no part yet
    max_seq: int = -1
    only: Segment | None = None  # the file's one part, while it has only one

    def add(self, seg: Segment, nbytes: int, group_rows: int) -> list[int]:
        """Count in one non-empty part of ``nbytes``; returns its row groups' first rows."""
        n = seg.num_rows
        self.only = None if self.hashes else seg
        self.hashes.append(seg.distinct_key_hashes())
        lo, hi = seg.min_max_seq()
        self.min_seq = lo if self.min_seq < 0 else min(self.min_seq, lo)
        self.max_seq = max(self.max_seq, hi)
        starts = list(range(0, n, group_rows))
        self.firsts += seg.keys_at(starts)
        self.lasts += seg.keys_at([min(st + group_rows, n) - 1 for st in starts])
        self.rows += n
        self.arrow_bytes += nbytes
        return starts


def write_run_stream(
    spec: TableSpec, ctx: RunContext, prefix: str, parts: Iterator[pa.RecordBatch]
) -> Run | None:
    """Write sorted op rows arriving in parts as one run file, row group by row group.

    Every grouping key must have all its rows in one part and parts must come in key order
    (one sorted segment, :func:`fsstate.tables.memtable.dirty_batches` or
    :func:`fsstate.compaction.merge_stream`); the footer gets the Bloom filter and row-group
    key bounds at the end, so only one part is in memory at a time. Every run file is written
    here (:meth:`Run.write` too). Returns the run, on disk only, or None if no row came (no
    file is left).
    """
    cfg = ctx.config
    path = ctx.new_path(prefix)
    full = f"{ctx.store_dir}/{path}"
    t = _StreamTally()
    with contextlib.ExitStack() as stack:
        stream = None
        for part in parts:
            n = part.num_rows
            if not n:
                continue
            if stream is None:
                stream = stack.enter_context(
                    ctx.fileio.parquet_stream(
                        full,
                        spec.row_schema().with_metadata(file_metadata(spec, "data")),
                        compression=None if cfg.compression == "none" else cfg.compression,
                        use_dictionary=False,
                    )
                )
            row_bytes = max(1, part.nbytes // n)
            group_rows = max(16, min(cfg.row_group_rows, cfg.row_group_bytes // row_bytes))
            for st in t.add(Segment(spec, part), part.nbytes, group_rows):
                stream.write_row_group(part.slice(st, group_rows))
        if stream is None:
            return None
        all_hashes = np.concatenate(t.hashes)
        bloom = BloomFilter.for_hashes(all_hashes, len(all_hashes))
        stream.add_metadata(  # known at the end: footer key-value metadata only
            {
                b"fsstate.bloom": bloom.to_text().encode(),
                b"fsstate.rg_bounds": _encode_bounds(spec, t.firsts, t.lasts),
            }
        )
    ref = FileRef(
        path, t.rows, stream.size_bytes, t.min_seq, t.max_seq, stream.crc32, t.arrow_bytes
    )
    ctx.tally.wrote(ref.size_bytes)
    run = Run(None, ref)
    bounds = (t.firsts, t.lasts, len(t.firsts))  # the footer, known without reading it
    run._disk = DiskRun(full, ctx.fileio.describe(full), ref.size_bytes, bloom, *bounds)
    ctx.cache.put((full, FOOTER), run._disk)  # a later open of the file in this process
    if (
        t.only is not None
        and ref.size_bytes <= WHOLE_FILE_BYTES_MAX
        and t.arrow_bytes * 8 <= ctx.cache.capacity_bytes
    ):  # written through: the next epoch's reads of a file just written do not decode it
        ctx.cache.put((full, WHOLE), t.only)
    return run
