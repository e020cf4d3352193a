"""The TTL secondary index: entries ordered by expiry, never larger than the primary data.

Following SPARK-50302:

* value and map state are one-to-one: one entry per row (entry = grouping key, or
  (grouping key, user key)); writing a row replaces its entry, deleting it removes it.
* list state is one-to-many: one entry per grouping key holding the *minimum* expiry of its
  elements and the element count; a cleanup pass rewrites the list and re-inserts the next
  minimum.

In memory the index is ``entry -> expiry`` (the truth) plus buckets ``expiry -> [entries]`` and
a heap of bucket expiries, so a cleanup pass visits only buckets that expired. Buckets are
lazy: moving or removing an entry appends it to its new bucket (if any) and leaves its old
occurrence in place, *stale*; a cleanup pass skips an occurrence whose entry no longer has that
bucket's expiry. An update is therefore two dict writes and a list append, no unlinking
(under Spark's processing time every update of a batch lands in the same bucket). Invariants:

* every live entry has an occurrence in the bucket of its expiry; occurrences = live + stale;
* stale occurrences never exceed ``max(live, STALE_MIN)``: past that the buckets are rebuilt
  from ``entry -> expiry`` (O(live), paid for by at least as many cheap updates), so memory
  stays within twice the live entries and a cleanup pass's work is proportional to what
  expired plus what went stale.

On disk (index runs, format version 1), one Parquet file per commit holds the changes since the
previous snapshot, sorted by expiry. The chain is bounded: when the change files after the first
hold as many rows as it does, or the chain would pass :data:`INDEX_RUNS_MAX` files, the commit
writes one file of the whole index (:meth:`TtlIndex.snapshot_rows`) in place of the chain
(:func:`needs_snapshot`). Loading an index so reads at most ``INDEX_RUNS_MAX`` files, and the
rows written stay within about twice the changes (each rewrite is paid by as many changed
rows).

=====================  =====================================================================
column                 meaning
=====================  =====================================================================
``_expires_at_ms``     int64 expiry of the entry (for deletes: the expiry being removed)
``key``                struct of the grouping-key fields
``ukey``               struct of the user-key fields (map state only)
``_count``             int64 number of elements of the list (list state only)
``_op``                int8: 0 put, 1 delete (applied only if the stored expiry matches)
=====================  =====================================================================

Replaying the runs of a manifest in order rebuilds the index of that version exactly.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from fsstate.format.schema import (
    EXPIRES,
    KIND_LIST,
    KIND_MAP,
    OP,
    OP_DELETE,
    OP_PUT,
    TableSpec,
    py_list,
)

COUNT = "_count"


STALE_MIN = 1024  # stale bucket occurrences always tolerated before a rebuild
INDEX_RUNS_MAX = 16  # index files a table's chain holds at most (see needs_snapshot)


def needs_snapshot(runs_after: int, base_rows: int, delta_rows: int) -> bool:
    """Whether a commit writes the whole index instead of one more change file.

    Args:
        runs_after: files the chain would hold with this commit's change file.
        base_rows: rows of the chain's first file (the last whole-index file, or the oldest).
        delta_rows: rows of the later files, this commit's changes included.
    """
    return runs_after > INDEX_RUNS_MAX or (runs_after > 1 and delta_rows >= max(base_rows, 1024))


class TtlIndex:
    """In-memory TTL index of one table, with a change log since the last snapshot."""

    __slots__ = ("_buckets", "_count", "_exp", "_heap", "_orig", "_stale", "lookups")

    def __init__(self) -> None:
        self._exp: dict[Hashable, int] = {}
        self._count: dict[Hashable, int] = {}
        self._buckets: dict[int, list[Hashable]] = {}
        self._heap: list[int] = []
        self._orig: dict[Hashable, int | None] = {}
        self._stale = 0  # bucket occurrences whose entry has moved or gone
        self.lookups = 0  # primary lookups made by cleanup passes (for tests and stats)

    def __len__(self) -> int:
        return len(self._exp)

    def get(self, entry: Hashable) -> int | None:
        """Expiry of an entry, or None."""
        return self._exp.get(entry)

    def count(self, entry: Hashable) -> int | None:
        """Element count stored with a one-to-many entry."""
        return self._count.get(entry)

    def set(self, entry: Hashable, exp: int, count: int | None = None, log: bool = True) -> None:
        """Insert or move an entry to ``exp`` (and store ``count`` for list entries)."""
        old = self._exp.get(entry)
        if log:
            orig = self._orig
            if entry not in orig:
                orig[entry] = old
        if count is not None:
            self._count[entry] = count
        if old == exp:
            return
        self._exp[entry] = exp
        bucket = self._buckets.get(exp)
        if bucket is None:
            self._buckets[exp] = [entry]
            heapq.heappush(self._heap, exp)
        else:
            bucket.append(entry)
        if old is not None:
            stale = self._stale = self._stale + 1
            if stale > STALE_MIN and stale > len(self._exp):
                self._rebuild()

    def discard(self, entry: Hashable, log: bool = True) -> None:
        """Remove an entry if present."""
        old = self._exp.pop(entry, None)
        if old is None:
            return
        if log:
            orig = self._orig
            if entry not in orig:
                orig[entry] = old
        self._count.pop(entry, None)
        stale = self._stale = self._stale + 1
        if stale > STALE_MIN and stale > len(self._exp):
            self._rebuild()

    def _rebuild(self) -> None:
        """Buckets from ``entry -> expiry`` alone (no stale occurrence)."""
        buckets: dict[int, list[Hashable]] = {}
        for entry, exp in self._exp.items():
            bucket = buckets.get(exp)
            if bucket is None:
                buckets[exp] = [entry]
            else:
                bucket.append(entry)
        self._buckets = buckets
        self._heap = list(buckets)
        heapq.heapify(self._heap)
        self._stale = 0

    def pop_expired(self, now_ms: int) -> list[tuple[int, Hashable]]:
        """Remove and return every entry with ``expiry <= now_ms``, oldest first."""
        out: list[tuple[int, Hashable]] = []
        heap = self._heap
        exps = self._exp
        orig = self._orig
        while heap and heap[0] <= now_ms:
            exp = heapq.heappop(heap)
            for entry in self._buckets.pop(exp, ()):
                if exps.get(entry) != exp:
                    self._stale -= 1  # moved or removed since it was put here
                    continue
                if entry not in orig:
                    orig[entry] = exp
                del exps[entry]
                self._count.pop(entry, None)
                out.append((exp, entry))
        return out

    def entries(self) -> list[tuple[int, Hashable]]:
        """All (expiry, entry) pairs sorted by expiry (for tests and stats)."""
        return sorted(((e, k) for k, e in self._exp.items()), key=lambda p: p[0])

    def entries_where(self, pred: Any) -> list[Hashable]:
        """Entries whose key satisfies ``pred`` (a full scan of the index)."""
        return [k for k in self._exp if pred(k)]

    @property
    def nbytes_estimate(self) -> int:
        """Rough bytes held (Python objects), for memory stats."""
        return 200 * len(self._exp) + 64 * len(self._heap) + 8 * self._stale

    # -- persistence -------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """Whether entries changed since the last snapshot."""
        return bool(self._orig)

    def changes(self) -> list[tuple[int, int, Hashable, int | None]]:
        """The (op, expiry, entry, count) rows changed since the last snapshot.

        The log is kept until :meth:`mark_snapshotted`, so a failed commit can be retried.
        """
        rows: list[tuple[int, int, Hashable, int | None]] = []
        for entry, orig in self._orig.items():
            new = self._exp.get(entry)
            if orig is not None and orig != new:
                rows.append((OP_DELETE, orig, entry, None))
            if new is not None:
                rows.append((OP_PUT, new, entry, self._count.get(entry)))
        return rows

    def snapshot_rows(self) -> list[tuple[int, int, Hashable, int | None]]:
        """Every entry as a put row: replaying these alone rebuilds the index."""
        count = self._count
        return [(OP_PUT, exp, entry, count.get(entry)) for entry, exp in self._exp.items()]

    def mark_snapshotted(self) -> None:
        """Forget the change log: the current entries are in a published snapshot."""
        self._orig = {}

    def apply_row(self, op: int, exp: int, entry: Hashable, count: int | None) -> None:
        """Replay one persisted row (no change logging)."""
        if op == OP_PUT:
            self.set(entry, exp, count, log=False)
        elif self._exp.get(entry) == exp:
            self.discard(entry, log=False)


def _entry_parts(spec: TableSpec, entry: Hashable) -> tuple[Any, Any]:
    if spec.kind == KIND_MAP:
        pair: tuple[Any, Any] = entry  # type: ignore[assignment]
        return pair
    return entry, None


def encode_changes(spec: TableSpec, rows: list[tuple[int, int, Hashable, int | None]]) -> pa.Table:
    """Encode index change rows as a table in the index-run layout, sorted by expiry."""
    assert spec.key_schema is not None
    rows = sorted(rows, key=lambda r: r[1])
    keys: list[Any] = []
    ukeys: list[Any] = []
    for _, _, entry, _ in rows:
        k, u = _entry_parts(spec, entry)
        keys.append(k)
        ukeys.append(u)
    cols: dict[str, pa.Array] = {EXPIRES: pa.array([r[1] for r in rows], type=pa.int64())}
    key_cols = list(zip(*keys)) if keys else [() for _ in spec.key_schema]
    cols["key"] = pa.StructArray.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(key_cols, spec.key_schema)],
        fields=list(spec.key_schema),
    )
    if spec.kind == KIND_MAP:
        assert spec.user_key_schema is not None
        ucols = list(zip(*ukeys)) if ukeys else [() for _ in spec.user_key_schema]
        cols["ukey"] = pa.StructArray.from_arrays(
            [pa.array(list(c), type=f.type) for c, f in zip(ucols, spec.user_key_schema)],
            fields=list(spec.user_key_schema),
        )
    if spec.kind == KIND_LIST:
        cols[COUNT] = pa.array([r[3] for r in rows], type=pa.int64())
    cols[OP] = pa.array([r[0] for r in rows], type=pa.int8())
    return pa.table(cols)


def decode_rows(
    spec: TableSpec, table: pa.Table
) -> Iterator[tuple[int, int, Hashable, int | None]]:
    """Inverse of :func:`encode_changes`: (op, expiry, entry, count) rows in file order."""
    exps = table.column(EXPIRES).to_pylist()
    ops = table.column(OP).to_pylist()
    key_struct = table.column("key").combine_chunks()
    key_cols = [py_list(c) for c in key_struct.flatten()]
    keys: Iterable[tuple[Any, ...]] = zip(*key_cols)
    counts: list[Any] = (
        table.column(COUNT).to_pylist() if spec.kind == KIND_LIST else [None] * len(exps)
    )
    if spec.kind == KIND_MAP:
        ukey_cols = [py_list(c) for c in table.column("ukey").combine_chunks().flatten()]
        for op, exp, key, ukey, cnt in zip(ops, exps, keys, zip(*ukey_cols), counts):
            yield op, exp, (key, ukey), cnt
    else:
        for op, exp, key, cnt in zip(ops, exps, keys, counts):
            yield op, exp, key, cnt
