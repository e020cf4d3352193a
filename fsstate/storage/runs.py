"""Runs: sealed segments of one table, in memory, on disk as a run file
(:mod:`fsstate.storage.runfile`), or both.

A run starts as an in-memory Arrow segment (sealed memtable or batched write). It is written
once as a Parquet file with a unique name, by a spill or by a commit, whichever comes first;
the commit reuses what a spill wrote. After that the in-memory copy may be released.

Invariants:

* Runs of a table are ordered by sequence number: every row of run ``i`` has a smaller
  ``_seq`` than every row of run ``i + 1``.
* Every run file is written by :func:`write_run_stream`, one row group at a time, with only
  one part in memory; its footer (:class:`fsstate.storage.runfile.DiskRun`) is known without
  reading the file back.
* Write-through: a file written in one part and small enough to be read whole enters this
  process's block cache as the segment it was written from (the rows the file decodes to), so
  the next epoch's reads of what the last one wrote do not read it back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from fsstate.format.keyfilter import BloomFilter
from fsstate.format.keyorder import Bound
from fsstate.format.refs import FileRef
from fsstate.format.schema import TableSpec
from fsstate.format.segment import OpRow, Segment
from fsstate.storage.runfile import (
    FOOTER,
    WHOLE,
    WHOLE_FILE_BYTES_MAX,
    DiskRun,
    RunContext,
    cached_segment,
    encode_bounds,
    file_metadata,
    read_table_file,
    segment_of,
)


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
        return segment_of(spec, table, ctx.fileio.describe(f"{ctx.store_dir}/{self.ref.path}"))

    def _whole(self, spec: TableSpec, ctx: RunContext) -> Segment:
        assert self.ref is not None
        path = f"{ctx.store_dir}/{self.ref.path}"
        return cached_segment(ctx, (path, WHOLE), spec, lambda: self._read_segment(spec, ctx))

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
            group = cached_segment(ctx, cache_key, spec, lambda i=i: disk.read_group(spec, ctx, i))  # type: ignore[misc]
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
            yield cached_segment(
                ctx,
                (disk.path, i),
                spec,
                lambda i=i: disk.read_group(spec, ctx, i),  # type: ignore[misc]
            )

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
                b"fsstate.rg_bounds": encode_bounds(spec, t.firsts, t.lasts),
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
