"""Ordered and batched reads over a table's runs: key ranges, key prefixes, a map's entries.

These reads never build per-key views: pending per-key changes are sealed into a run first
(clean views mirror the runs, so the runs then answer alone), candidate op rows are cut from
each run and resolved with Arrow (:mod:`fsstate.tables.resolve`).

Invariants:

* A read returns exactly what per-key reads of the same keys would (sequence order, range
  tombstones, clears, expiry at the table's clock), in key order (user-key order for a map's
  entries), ascending unless ``reverse``.
* Work is proportional to the rows of the requested range, not to the table: each sorted run
  is cut by two binary searches (row groups of files by their key bounds first, through the
  block cache); with a ``limit`` the runs are merged in growing chunks and the read stops
  once ``limit`` live entries are certain (every run has passed them), so the first or last
  N entries of a large map cost about N rows per run.
* Prefix lookups (:meth:`ScanTable.scan_prefixes`) hash-join every run with the requested
  prefixes (null fields match nulls), the batched counterpart of many point reads.
* A chunked scan (:meth:`ScanTable.scan_chunks`) yields the rows of :meth:`ScanTable.scan`
  in consecutive pieces, cut at row-group starts of the table's files (positions in the
  stored order, so keys with null fields land in exactly one piece); it holds one piece's
  stored rows at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import SchemaError
from fsstate.format.keyorder import Bound, bisect_rows, sort_key
from fsstate.format.schema import EXPIRES, KIND_LIST, KIND_MAP, OP, OP_CLEAR, OP_PUT, SEQ
from fsstate.format.segment import Segment, key_tuples
from fsstate.format.tombstones import in_range
from fsstate.interfaces import Key
from fsstate.tables.base import TableBase
from fsstate.tables.counts import NEVER_MS, view_count
from fsstate.tables.resolve import first_of_group, out_schema, resolve, semi_join_rows

FIRST_CHUNK_ROWS = 64  # rows taken per run in the first round of a limited read (doubling)


def _row_unit(cols: Sequence[pa.Array]) -> Callable[[int], tuple[Any, ...]]:
    return lambda i: tuple(c[i].as_py() for c in cols)


def _between(part: pa.RecordBatch, a: Bound, b: Bound) -> pa.RecordBatch:
    """The rows of sorted op rows whose key sorts in ``[a, b)`` (:func:`sort_key` order,
    full keys; None: unbounded)."""
    unit = _row_unit(part.column("key").flatten())
    n = part.num_rows
    start = 0 if a is None else bisect_rows(n, unit, a)
    end = n if b is None else bisect_rows(n, unit, b)
    return part.slice(start, max(0, end - start))


def merge_limited(
    sources: list[pa.RecordBatch],
    unit_cols: Callable[[pa.RecordBatch], list[pa.Array]],
    resolve_parts: Callable[[list[pa.RecordBatch]], pa.Table],
    out_unit_width: int,
    reverse: bool,
    limit: int,
) -> pa.Table:
    """The first ``limit`` resolved entries of sorted sources, reading them in growing chunks.

    Args:
        sources: op rows per run, each sorted by unit (then sequence number).
        unit_cols: the columns of a source batch that make its resolution unit (the key, or
            the user key of one map).
        resolve_parts: resolves collected op rows into a table sorted by unit, ascending, whose
            first ``out_unit_width`` columns are the unit.
        out_unit_width: see ``resolve_parts``.
        reverse: read from the end.
        limit: entries wanted (> 0).
    """
    chunk = max(FIRST_CHUNK_ROWS, limit)
    taken = [0] * len(sources)
    collected: list[pa.RecordBatch] = []
    while True:
        frontier: tuple[Any, ...] | None = None
        for i, src in enumerate(sources):
            n, t = src.num_rows, taken[i]
            if t >= n:
                continue
            k = min(chunk, n - t)
            part = src.slice(n - t - k, k) if reverse else src.slice(t, k)
            taken[i] += k
            collected.append(part)
            if taken[i] < n:  # the run goes on: its boundary unit may continue past the chunk
                edge = _row_unit(unit_cols(part))(0 if reverse else k - 1)
                if frontier is None:
                    frontier = edge
                else:
                    pick = max if reverse else min
                    frontier = pick(frontier, edge, key=sort_key)
        table = resolve_parts(collected)
        if frontier is not None:  # only units strictly before the frontier are complete
            unit = _row_unit([table.column(j) for j in range(out_unit_width)])
            cut = bisect_rows(table.num_rows, unit, frontier, right=reverse)
            table = table.slice(cut) if reverse else table.slice(0, cut)
        if reverse:
            table = table.take(pa.array(np.arange(table.num_rows - 1, -1, -1, dtype=np.int64)))
        if table.num_rows >= limit or frontier is None:
            return table.slice(0, limit)
        chunk *= 2


class ScanTable(TableBase):
    """Range scans, prefix lookups and ordered map entries (see the module docstring)."""

    def delete_range(self, lo: Key | None, hi: Key | None) -> None:
        """See :meth:`fsstate.tables.base.TableBase.delete_range`; a counting table first
        counts the rows the range removes (:meth:`_count_range`)."""
        if self.counting:
            lo_b, hi_b = self._bounds(lo, hi)
            self._count_range(lo_b, hi_b)
        super().delete_range(lo, hi)

    def _count_range(self, lo: Bound, hi: Bound) -> None:
        """Account a range delete of ``[lo, hi)``: the sealed live rows in the range leave
        ``live_rows`` (the keys' pending changes are dropped with them), and the rows live now
        (views as they are, other keys as the runs hold them) count as removed. Reads the runs
        that overlap the range (their rows in it), as a scan of it would."""
        parts = []
        for seg in self._segments(lo, hi):
            part = seg.slice_range(lo, hi)
            if part.num_rows:
                parts.append(part)
        in_runs: dict[Key, int] = {}
        total = 0
        if parts:
            live = resolve(self.spec, parts, self.ranges, NEVER_MS)
            total = live.num_rows
            assert self.spec.key_schema is not None
            width = len(self.spec.key_schema)
            cols = [live.column(i).combine_chunks() for i in range(width)]
            for k in key_tuples(cols):
                in_runs[k] = in_runs.get(k, 0) + 1
        removed = total
        kind, dirty, partial = self.kind, self._dirty, self._partial
        for k, view in self._views.items():
            if not in_range(k, lo, hi):
                continue
            now = view_count(kind, view)
            if k in partial:  # the runs' elements and the appends not sealed yet
                d = dirty.get(k)
                now = in_runs.get(k, 0) + (sum(e == s for e, s in d[1].items()) if d else 0)
            removed += now - in_runs.get(k, 0)
        if self.live_rows is not None:
            self.live_rows -= total
        self.row_tally.removed += removed

    def count_live_rows(self) -> int:
        """Live rows of the table, counted by reading it whole (seals pending changes first;
        rows past their expiry that expiry has not removed count, as in ``live_rows``)."""
        self._batch_ready()
        if self.spec.key_schema is None or not self.runs:
            return 0
        parts = self._range_parts(None, None, None, None)
        return resolve(self.spec, parts, self.ranges, NEVER_MS).num_rows if parts else 0

    def _batch_ready(self) -> None:
        """Seal pending per-key changes so that the runs answer batched reads alone."""
        if self._dirty:
            self.seal()

    def _segments(self, lo: Bound = None, hi: Bound = None, point: bool = False) -> list[Segment]:
        """Segments of every run that may hold keys in ``[lo, hi)`` (or the key ``lo``)."""
        spec, ctx = self.spec, self.ctx
        return [
            seg for run in list(self.runs) for seg in run.cached_segments(spec, ctx, lo, hi, point)
        ]

    def _bounds(self, lo: Any, hi: Any) -> tuple[Bound, Bound]:
        return (
            None if lo is None else self._check_prefix(lo),
            None if hi is None else self._check_prefix(hi),
        )

    def scan(
        self,
        lo: Any = None,
        hi: Any = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
        with_expiry: bool = False,
        with_seq: bool = False,
    ) -> pa.Table:
        """Live rows whose grouping key is in ``[lo, hi)``, in key order.

        Args:
            lo: lower bound (inclusive): a key, a prefix of one (its first fields) or None.
            hi: upper bound (exclusive), as ``lo``.
            reverse: descending key order.
            limit: at most this many keys (the first ones in the scan's order).
            with_expiry: add the ``_expires_at_ms`` column.
            with_seq: add the ``_seq`` column (the sequence number that wrote each entry).

        Returns:
            Key columns then value columns (map state: key, user key, value columns; list
            state: one row per element, in append order within a key); see
            :func:`fsstate.tables.resolve.out_schema`.
        """
        if self.spec.key_schema is None:
            return pa.table({})
        parts = self._range_parts(lo, hi, None, None)
        spec, ranges, now = self.spec, self.ranges, self.now_ms

        def resolve_parts(ps: list[pa.RecordBatch]) -> pa.Table:
            return resolve(spec, ps, ranges, now, with_expiry=with_expiry, with_seq=with_seq)

        if limit is None:
            table = resolve_parts(parts)
            if reverse:
                idx = np.arange(table.num_rows - 1, -1, -1, dtype=np.int64)
                table = table.take(pa.array(idx))
            return table
        if limit <= 0:
            return out_schema(spec, with_expiry, with_seq).empty_table()
        if self.kind in (KIND_MAP, KIND_LIST):  # several rows per key: resolve whole keys
            table = resolve_parts(parts)
            if reverse:
                table = table.take(pa.array(np.arange(table.num_rows - 1, -1, -1)))
            width = len(self.spec.key_schema)
            starts = np.flatnonzero(
                first_of_group([table.column(i).combine_chunks() for i in range(width)])
            )
            return table if len(starts) <= limit else table.slice(0, int(starts[limit]))
        width = len(self.spec.key_schema)
        return merge_limited(
            parts,
            lambda b: b.column("key").flatten(),
            resolve_parts,
            width,
            reverse,
            limit,
        )

    def cut_points(
        self, lo: Any = None, hi: Any = None, *, chunk_bytes: int
    ) -> list[tuple[Any, ...]]:
        """Where to cut the rows of ``[lo, hi)`` into pieces of about ``chunk_bytes`` stored rows.

        Cuts are first keys of row groups of the table's files (read from their footers;
        files read whole and runs in memory offer none), ascending and distinct. They are
        positions in the stored order, not range bounds: :meth:`scan_between` of two
        consecutive cuts (None before the first and after the last) takes every row of a key
        exactly once, keys with null fields included.

        Args:
            lo: lower bound (inclusive), as in :meth:`scan`.
            hi: upper bound (exclusive), as in :meth:`scan`.
            chunk_bytes: stored (decoded) bytes per piece to aim at (> 0).
        """
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes={chunk_bytes} must be > 0")
        if self.spec.key_schema is None:
            return []
        lo_b, hi_b = self._bounds(lo, hi)
        self._batch_ready()
        starts = sorted(
            (g for run in list(self.runs) for g in run.group_starts(self.ctx, lo_b, hi_b)),
            key=lambda g: sort_key(g[0]),
        )
        cuts: list[tuple[Any, ...]] = []
        held = 0
        for first, size in starts:
            cut = tuple(first)
            if held >= chunk_bytes and (lo_b is None or sort_key(cut) > sort_key(lo_b)):
                if hi_b is not None and sort_key(cut) >= sort_key(hi_b):
                    break
                if not cuts or sort_key(cut) > sort_key(cuts[-1]):
                    cuts.append(cut)
                    held = 0
            held += size
        return cuts

    def scan_between(
        self,
        start: tuple[Any, ...] | None,
        stop: tuple[Any, ...] | None,
        lo: Any = None,
        hi: Any = None,
        *,
        with_expiry: bool = False,
        with_seq: bool = False,
    ) -> pa.Table:
        """The rows of :meth:`scan` of ``[lo, hi)`` whose key sorts in ``[start, stop)``.

        Args:
            start: a position in the stored order (a full key, as :meth:`cut_points` gives)
                or None for the beginning.
            stop: a position after ``start``, or None for the end.
            lo: lower bound (inclusive), as in :meth:`scan`.
            hi: upper bound (exclusive), as in :meth:`scan`.
            with_expiry: add the ``_expires_at_ms`` column.
            with_seq: add the ``_seq`` column.
        """
        if self.spec.key_schema is None:
            return pa.table({})
        parts = self._range_parts(lo, hi, start, stop)
        return resolve(
            self.spec, parts, self.ranges, self.now_ms, with_expiry=with_expiry, with_seq=with_seq
        )

    def _range_parts(self, lo: Any, hi: Any, start: Bound, stop: Bound) -> list[pa.RecordBatch]:
        """Non-empty op rows of every run for keys in ``[lo, hi)`` (range semantics) that sort
        in ``[start, stop)`` (positions in the stored order; None: unbounded)."""
        lo_b, hi_b = self._bounds(lo, hi)
        self._batch_ready()
        # a key with a null field compares with no range bound, yet sorts at one place: the
        # positions cut the stored order, the bounds select by range
        parts = []
        for seg in self._segments(lo_b if start is None else start, hi_b if stop is None else stop):
            part = seg.slice_range(lo_b, hi_b)
            if part.num_rows and (start is not None or stop is not None):
                part = _between(part, start, stop)
            if part.num_rows:
                parts.append(part)
        return parts

    def scan_chunks(
        self,
        lo: Any = None,
        hi: Any = None,
        *,
        chunk_bytes: int,
        with_expiry: bool = False,
        with_seq: bool = False,
    ) -> Iterator[pa.Table]:
        """Live rows whose grouping key is in ``[lo, hi)``, as consecutive tables in key order.

        The range is cut at row-group starts of the table's files (:meth:`cut_points`) so that
        each piece resolves about ``chunk_bytes`` of stored rows: the read holds one piece's
        rows at a time, not the range's. Every row of a key is in one piece, so the pieces
        concatenated equal :meth:`scan` of the range.

        Args:
            lo: lower bound (inclusive), as in :meth:`scan`.
            hi: upper bound (exclusive), as in :meth:`scan`.
            chunk_bytes: stored (decoded) bytes per piece to aim at (> 0).
            with_expiry: add the ``_expires_at_ms`` column.
            with_seq: add the ``_seq`` column.

        Yields:
            Non-empty tables in the layout of :meth:`scan`.
        """
        cuts = self.cut_points(lo, hi, chunk_bytes=chunk_bytes)
        if self.spec.key_schema is None:
            return
        edges: list[tuple[Any, ...] | None] = [None, *cuts, None]
        for a, b in pairwise(edges):
            table = self.scan_between(a, b, lo, hi, with_expiry=with_expiry, with_seq=with_seq)
            if table.num_rows:
                yield table

    def scan_prefixes(self, prefixes: pa.Table) -> pa.Table:
        """Live rows of every grouping key that starts with one of ``prefixes``' rows.

        Args:
            prefixes: a table of the key's first ``m`` fields (by position; cast to the key
                schema's types).

        Returns:
            As :meth:`scan`, sorted by key.
        """
        spec = self.spec
        if spec.key_schema is None:
            return pa.table({})
        m = prefixes.num_columns
        if not 1 <= m <= len(spec.key_schema):
            raise SchemaError(
                f"state {self.name!r}: a prefix table has 1 to {len(spec.key_schema)} columns "
                f"(the key's first fields), got {prefixes.num_columns}"
            )
        want: list[pa.Array] = []
        for col, field in zip(prefixes.columns, spec.key_schema):
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            try:
                want.append(arr.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaError(
                    f"state {self.name!r}: prefix column {field.name!r} has type {arr.type}, "
                    f"expected {field.type} ({exc})"
                ) from None
        self._batch_ready()
        parts: list[pa.RecordBatch] = []
        if len(want[0]):
            distinct = pa.Table.from_arrays(want, names=[f"p{i}" for i in range(m)])
            distinct = distinct.group_by(distinct.column_names).aggregate([])
            for seg in self._segments():
                rows = seg.rows_any_order
                if rows.num_rows:
                    hit = _prefix_rows(rows, distinct, m)
                    if hit.num_rows:
                        parts.append(hit)
        return resolve(spec, parts, self.ranges, self.now_ms)

    def entries(
        self,
        key: Any,
        lo: Any = None,
        hi: Any = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> pa.Table:
        """A map's live entries in user-key order, without loading the whole map.

        Args:
            key: the grouping key.
            lo: lower user-key bound (inclusive; a user key, a prefix of one, or None).
            hi: upper user-key bound (exclusive), as ``lo``.
            reverse: descending user-key order.
            limit: at most this many entries (first or last N).

        Returns:
            User-key columns then value columns (see :func:`fsstate.tables.resolve.out_schema`,
            without the key columns).
        """
        if self.kind != KIND_MAP:
            raise SchemaError(f"state {self.name!r}: entries() reads map state")
        k = self._check_key(key)
        spec = self.spec
        assert spec.ukey_schema is not None
        ukey_names = spec.ukey_schema.names
        value_names = [f.name for f in out_schema(spec)][len(k) + len(ukey_names) :]
        schema = pa.schema(
            [f.with_nullable(True) for f in spec.ukey_schema]
            + [f.with_nullable(True).with_name(n) for f, n in zip(spec.value_schema, value_names)]
        )
        if limit is not None and limit <= 0:
            return schema.empty_table()
        lo_u = None if lo is None else self._check_ukey_bound(lo)
        hi_u = None if hi is None else self._check_ukey_bound(hi)
        self._batch_ready()
        floor = self.ranges.floor(k) if self.ranges else -1
        sources: list[pa.RecordBatch] = []
        for seg in self._segments(k, point=True):
            rng = seg.key_range(k)
            if rng is None:
                continue
            block = seg.batch.slice(rng[0], rng[1] - rng[0])
            ops = block.column(OP).to_numpy(zero_copy_only=False)
            clears = ops == OP_CLEAR
            if clears.any():  # clear rows (null user key) sort last in the key's block
                floor = max(floor, int(block.column(SEQ).to_numpy()[clears].max()))
                block = block.filter(pa.array(~clears))
            ucols = block.column("ukey").flatten()
            at = _row_unit(ucols)
            start = 0 if lo_u is None else bisect_rows(block.num_rows, at, lo_u)
            end = block.num_rows if hi_u is None else bisect_rows(block.num_rows, at, hi_u)
            if end > start:
                sources.append(block.slice(start, end - start))
        now = self.now_ms

        def resolve_parts(ps: list[pa.RecordBatch]) -> pa.Table:
            return _resolve_entries(ps, floor, now, schema)

        if limit is None:
            table = resolve_parts(sources)
            if reverse:
                table = table.take(pa.array(np.arange(table.num_rows - 1, -1, -1)))
            return table
        return merge_limited(
            sources,
            lambda b: b.column("ukey").flatten(),
            resolve_parts,
            len(ukey_names),
            reverse,
            limit,
        )

    def _check_ukey_bound(self, bound: Any) -> Key:
        schema = self.spec.ukey_schema
        assert schema is not None
        items = tuple(bound) if isinstance(bound, (tuple, list)) else (bound,)
        if not 1 <= len(items) <= len(schema) or any(v is None for v in items):
            raise SchemaError(
                f"state {self.name!r}: a user-key bound is 1 to {len(schema)} of the user "
                f"key's first fields ({', '.join(schema.names)}), no nulls; got {bound!r}"
            )
        return items


def _prefix_rows(rows: pa.RecordBatch, distinct: pa.Table, m: int) -> pa.RecordBatch:
    """The rows of a segment whose key's first ``m`` fields are one of ``distinct``'s rows."""
    want = [distinct.column(i).combine_chunks() for i in range(m)]
    return semi_join_rows(rows, rows.column("key").flatten()[:m], want)


def _resolve_entries(
    parts: list[pa.RecordBatch], floor: int, now_ms: int, schema: pa.Schema
) -> pa.Table:
    """Live entries of one map key from its non-clear op rows (sorted by user key per part)."""
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return schema.empty_table()
    batch = pa.Table.from_batches(parts).combine_chunks()
    seqs = batch.column(SEQ).to_numpy()
    if floor >= 0:
        batch = batch.filter(pa.array(seqs > floor))
    ucols = batch.column("ukey").combine_chunks().flatten()
    names = [f"u{i}" for i in range(len(ucols))]
    order = pc.sort_indices(
        pa.Table.from_arrays([*ucols, batch.column(SEQ)], [*names, SEQ]),
        sort_keys=[*((n, "ascending") for n in names), (SEQ, "descending")],
    )
    batch = batch.take(order)
    ucols = [c.take(order) for c in ucols]
    rows = batch.take(pa.array(np.flatnonzero(first_of_group(ucols)), type=pa.int64()))
    expires = rows.column(EXPIRES)
    live = pc.fill_null(
        pc.and_kleene(
            pc.equal(rows.column(OP), OP_PUT),
            pc.or_kleene(pc.is_null(expires), pc.greater(expires, now_ms)),
        ),
        False,
    )
    rows = rows.filter(live)
    cols = [*rows.column("ukey").combine_chunks().flatten()]
    cols += rows.column("value").combine_chunks().flatten()
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(cols, schema)], schema=schema)
