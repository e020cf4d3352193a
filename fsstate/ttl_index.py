"""The TTL secondary index: entries ordered by expiry, never larger than the primary data.

Following SPARK-50302:

* value and map state are one-to-one: one entry per row (entry = grouping key, or
  (grouping key, user key)); writing a row replaces its entry, deleting it removes it.
* list state is one-to-many: one entry per grouping key holding the *minimum* expiry of its
  elements and the element count; a cleanup pass rewrites the list and re-inserts the next
  minimum.

In memory the index is ``entry -> expiry`` plus buckets ``expiry -> entries`` and a heap of
bucket expiries, so a cleanup pass pops exactly the expired entries (work proportional to what
expired; a bucket emptied by updates costs one heap pop, once).

On disk (index runs, format version 1), one Parquet file per commit holds the changes since the
previous snapshot, sorted by expiry:

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

from fsstate.schema import EXPIRES, KIND_LIST, KIND_MAP, OP, OP_DELETE, OP_PUT, TableSpec

COUNT = "_count"


class TtlIndex:
    """In-memory TTL index of one table, with a change log since the last snapshot."""

    __slots__ = ("_buckets", "_count", "_exp", "_heap", "_orig", "lookups")

    def __init__(self) -> None:
        self._exp: dict[Hashable, int] = {}
        self._count: dict[Hashable, int] = {}
        self._buckets: dict[int, dict[Hashable, None]] = {}
        self._heap: list[int] = []
        self._orig: dict[Hashable, int | None] = {}
        self.lookups = 0  # primary lookups made by cleanup passes (for tests and stats)

    def __len__(self) -> int:
        return len(self._exp)

    def get(self, entry: Hashable) -> int | None:
        """Expiry of an entry, or None."""
        return self._exp.get(entry)

    def count(self, entry: Hashable) -> int | None:
        """Element count stored with a one-to-many entry."""
        return self._count.get(entry)

    def _log(self, entry: Hashable) -> None:
        if entry not in self._orig:
            self._orig[entry] = self._exp.get(entry)

    def _unlink(self, entry: Hashable, exp: int) -> None:
        bucket = self._buckets.get(exp)
        if bucket is not None:
            bucket.pop(entry, None)
            if not bucket:
                del self._buckets[exp]

    def set(self, entry: Hashable, exp: int, count: int | None = None, log: bool = True) -> None:
        """Insert or move an entry to ``exp`` (and store ``count`` for list entries)."""
        old = self._exp.get(entry)
        if log:
            self._log(entry)
        if count is not None:
            self._count[entry] = count
        if old == exp:
            return
        if old is not None:
            self._unlink(entry, old)
        self._exp[entry] = exp
        bucket = self._buckets.get(exp)
        if bucket is None:
            self._buckets[exp] = {entry: None}
            heapq.heappush(self._heap, exp)
        else:
            bucket[entry] = None

    def discard(self, entry: Hashable, log: bool = True) -> None:
        """Remove an entry if present."""
        old = self._exp.get(entry)
        if old is None:
            return
        if log:
            self._log(entry)
        del self._exp[entry]
        self._count.pop(entry, None)
        self._unlink(entry, old)

    def pop_expired(self, now_ms: int) -> list[tuple[int, Hashable]]:
        """Remove and return every entry with ``expiry <= now_ms``, oldest first."""
        out: list[tuple[int, Hashable]] = []
        heap = self._heap
        while heap and heap[0] <= now_ms:
            exp = heapq.heappop(heap)
            bucket = self._buckets.pop(exp, None)
            if not bucket:
                continue
            for entry in bucket:
                self._log(entry)
                del self._exp[entry]
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
        return 200 * len(self._exp) + 64 * len(self._heap)

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
    key_cols = [c.to_pylist() for c in key_struct.flatten()]
    keys: Iterable[tuple[Any, ...]] = zip(*key_cols)
    counts: list[Any] = (
        table.column(COUNT).to_pylist() if spec.kind == KIND_LIST else [None] * len(exps)
    )
    if spec.kind == KIND_MAP:
        ukey_cols = [c.to_pylist() for c in table.column("ukey").combine_chunks().flatten()]
        for op, exp, key, ukey, cnt in zip(ops, exps, keys, zip(*ukey_cols), counts):
            yield op, exp, (key, ukey), cnt
    else:
        for op, exp, key, cnt in zip(ops, exps, keys, counts):
            yield op, exp, key, cnt
