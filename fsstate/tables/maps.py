"""Map state tables (Spark's MapState) with per-entry TTL.

Invariants (besides those of :mod:`fsstate.tables.base`):

* A view is ``{user key: cell}`` (the value tuple, or a ``Timed`` pair when it expires; see
  :class:`fsstate.format.tombstones.Timed`).
* Map entries are returned in user-key order: the table's ``user_key_order`` (a sort key
  given at declaration, e.g. Spark's MapState order) or, without one, natural user-key order
  (field by field ascending, nulls last: the order of the rows in every segment and run). The
  order never depends on the history of writes or on the tier a view was loaded from.
* TTL index: one entry per (grouping key, user key) with an expiry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fsstate import interfaces
from fsstate.errors import SchemaError
from fsstate.format.schema import (
    KIND_MAP,
    OP,
    OP_CLEAR,
    OP_DELETE,
    UserKeyOrder,
    make_checker,
    sort_entries,
)
from fsstate.format.tombstones import Timed, cell, cell_value
from fsstate.interfaces import Key
from fsstate.storage.manifest import TableEntry
from fsstate.tables.batched import BatchedTable, struct_of, values_table
from fsstate.tables.core import StoreHost
from fsstate.tables.cursor import KeyCursor, map_cursor_ops
from fsstate.tables.memtable import touch
from fsstate.tables.resolve import lookup_back, resolve, semi_join_rows
from fsstate.tables.ttl_index import TtlIndex


class MapTable(BatchedTable, interfaces.MapTableAPI):
    """A map from user key to value per grouping key."""

    kind = KIND_MAP

    def __init__(self, store: StoreHost, entry: TableEntry) -> None:
        super().__init__(store, entry)
        assert entry.spec.user_key_schema is not None
        self._ukey_check = make_checker(self.name, "user key", entry.spec.user_key_schema)
        self.user_key_order: UserKeyOrder | None = None  # set at declaration (not stored)

    def cursor_ops(
        self,
        cursor: KeyCursor,
        get_slow: Callable[..., tuple[Any, ...] | None],
        contains_slow: Callable[..., bool],
        update_slow: Callable[..., None],
        method: bool = False,
    ) -> tuple[Callable[..., tuple[Any, ...] | None], Callable[..., bool], Callable[..., None]]:
        """One-frame ``get_value(u)`` / ``contains_key(u)`` / ``update_value(u, v)`` at
        ``cursor.key``; see :func:`fsstate.tables.cursor.map_cursor_ops`."""
        return map_cursor_ops(self, cursor, get_slow, contains_slow, update_slow, method)

    def get(self, key: Key, user_key: Key) -> tuple[Any, ...] | None:
        """The live value under ``user_key``, or None."""
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            view = self._view(key)[1]
            self._after_growth()
        try:
            c = view.get(user_key)
        except TypeError:  # an unhashable user key (a list): normalized or refused
            user_key = self._ukey_check(user_key)
            c = view.get(user_key)
        if type(c) is tuple:
            return c
        if c is None:  # a miss still refuses a bad user key; a NaN in it becomes NAN
            checked = self._ukey_check(user_key)
            if checked is user_key:
                return None
            c = view.get(checked)
            if c is None:
                return None
        if type(c) is Timed:
            return None if c[1] <= self.now_ms else c[0]
        return c  # type: ignore[no-any-return]

    def contains(self, key: Key, user_key: Key) -> bool:
        """Whether ``user_key`` holds a live value."""
        return self.get(key, user_key) is not None

    def update(self, key: Key, user_key: Key, value: tuple[Any, ...]) -> None:
        """Set the value under ``user_key``."""
        value = self._value_check(value)
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            key, view = self._view(key)
        try:
            known = user_key in view
        except TypeError:  # an unhashable user key (a list): checked below
            known = False
        if known:
            del view[user_key]
        else:
            user_key = self._ukey_check(user_key)
            view.pop(user_key, None)
            self._ctl.growth -= 1
        st = self._store
        seq = st.next_seq
        st.next_seq = seq + 1
        exp = self._expiry()
        view[user_key] = cell(value, exp)
        touch(self._dirty, key)[user_key] = seq
        if self.indexed:
            idx = self.ttl_index()
            if exp is None:
                idx.discard((key, user_key))
            else:
                idx.set((key, user_key), exp)
        ctl = self._ctl
        if ctl.growth <= 0:
            ctl.check()

    def remove(self, key: Key, user_key: Key) -> None:
        """Remove ``user_key`` (no-op if absent)."""
        key, view = self._view(key)
        user_key = self._ukey_check(user_key)
        if view.pop(user_key, None) is None:
            return
        self.row_tally.removed += 1
        touch(self._dirty, key)[user_key] = self._next_seq()
        if self.indexed:
            self.ttl_index().discard((key, user_key))
        self._after_growth()

    def clear(self, key: Key) -> None:
        """Remove every entry of the key."""
        key, view = self._view(key)
        if not view and key not in self._dirty:
            return
        self.row_tally.removed += len(view)
        seq = self._next_seq()
        self._views[key] = {}
        self._dirty[key] = [seq, {}]
        if self.indexed:
            idx = self.ttl_index()
            for u in view:
                idx.discard((key, u))
        self._after_growth()

    def _live_items(self, key: Key) -> list[tuple[Key, tuple[Any, ...]]]:
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            view = self._view(key)[1]
            self._after_growth()
        if not self.indexed:
            items = [(u, cell_value(c)) for u, c in view.items()]
        else:
            now = self.now_ms
            items = [
                (u, c[0] if type(c) is Timed else c)
                for u, c in view.items()
                if type(c) is not Timed or c[1] > now
            ]
        return sort_entries(items, self.user_key_order)

    def items(self, key: Key) -> Iterator[tuple[Key, tuple[Any, ...]]]:
        """Live (user key, value) pairs in user-key order (see the module docstring)."""
        return iter(self._live_items(key))

    def user_keys(self, key: Key) -> Iterator[Key]:
        """Live user keys, in the order of :meth:`items`."""
        return iter([u for u, _ in self._live_items(key)])

    def values(self, key: Key) -> Iterator[tuple[Any, ...]]:
        """Live values, in the order of :meth:`items`."""
        return iter([v for _, v in self._live_items(key)])

    def _expire_entry(self, idx: TtlIndex, entry: Any, now: int) -> int:
        """Remove the map entry ``entry`` (grouping key, user key) if it expired at ``now``,
        else index it again."""
        key, ukey = entry
        k, view = self._view(key)
        c = view.get(ukey)
        if type(c) is not Timed:
            return 0  # gone, or rewritten without an expiry since
        if c[1] > now:
            idx.set(entry, c[1])
            return 0
        del view[ukey]
        touch(self._dirty, k)[ukey] = self._next_seq()
        return 1

    def get_many(self, keys: pa.Table, user_keys: pa.Table) -> pa.Table:
        """Values for (key row i, user key row i), in order, with a ``_found`` column."""
        key_struct, key_list = self._keys_from_table(keys)
        assert self.spec.user_key_schema is not None
        ustruct = struct_of(self.name, "user key", user_keys, self.spec.user_key_schema)
        if len(key_struct) != len(ustruct):
            raise SchemaError(
                f"state {self.name!r}: {len(key_struct)} keys but {len(ustruct)} user keys"
            )
        if self._arrow_lookup_pays(len(key_struct)):
            return self._get_entries_arrow(key_struct, ustruct)
        ukeys = list(zip(*[c.to_pylist() for c in ustruct.flatten()]))
        get = self.get
        return values_table(self.spec.value_schema, [get(k, u) for k, u in zip(key_list, ukeys)])

    def put_many(self, keys: pa.Table, user_keys: pa.Table, values: pa.Table) -> None:
        """Set many entries; later rows win."""
        key_struct, key_list = self._keys_from_table(keys)
        assert self.spec.user_key_schema is not None
        ustruct = struct_of(self.name, "user key", user_keys, self.spec.user_key_schema)
        vstruct = struct_of(self.name, "value", values, self.spec.value_schema)
        if not len(key_list) == len(ustruct) == len(vstruct):
            raise SchemaError(
                f"state {self.name!r}: {len(key_list)} keys, {len(ustruct)} user keys and "
                f"{len(vstruct)} values must have the same length"
            )
        if not key_list:
            return
        if self.indexed:
            ulist = list(zip(*[c.to_pylist() for c in ustruct.flatten()]))
            for k, u, v in zip(key_list, ulist, vstruct.to_pylist()):
                self.update(k, u, tuple(v.values()))
            return
        self._append_batch(key_struct, ustruct, vstruct, key_list)

    def delete_many(self, keys: pa.Table, user_keys: pa.Table) -> None:
        """Remove many entries (one delete row each, written as one run)."""
        key_struct, key_list = self._keys_from_table(keys)
        assert self.spec.user_key_schema is not None
        ustruct = struct_of(self.name, "user key", user_keys, self.spec.user_key_schema)
        if len(key_list) != len(ustruct):
            raise SchemaError(
                f"state {self.name!r}: {len(key_list)} keys but {len(ustruct)} user keys"
            )
        if not key_list:
            return
        if self.indexed:
            ulist = list(zip(*[c.to_pylist() for c in ustruct.flatten()]))
            for k, u in zip(key_list, ulist):
                self.remove(k, u)
            return
        self._append_batch(key_struct, ustruct, None, key_list, op=OP_DELETE)

    def _get_entries_arrow(self, key_struct: pa.StructArray, ustruct: pa.StructArray) -> pa.Table:
        """Vectorized map lookup: per run, the rows of the requested (key, user key) pairs
        and the clear rows of the requested keys (hash joins, nulls matching nulls), resolved
        together (:func:`fsstate.tables.resolve.resolve`), then joined back to the requests."""
        kcols, ucols = key_struct.flatten(), ustruct.flatten()
        nk = len(kcols)
        parts: list[pa.RecordBatch] = []
        for seg in self._segments():
            rows = seg.rows_any_order
            if not rows.num_rows:
                continue
            parts += _entry_rows(rows, kcols, ucols)
        found = resolve(self.spec, parts, self.ranges, self.now_ms)
        return lookup_back(found, [*kcols, *ucols], nk + len(ucols), self.spec.value_schema)


def _entry_rows(
    rows: pa.RecordBatch, kcols: list[pa.Array], ucols: list[pa.Array]
) -> list[pa.RecordBatch]:
    """Op rows of one segment that decide the requested (key, user key) pairs: their own rows
    and the clear rows of their keys."""
    out = []
    pairs = semi_join_rows(
        rows, [*rows.column("key").flatten(), *rows.column("ukey").flatten()], [*kcols, *ucols]
    )
    if pairs.num_rows:
        out.append(pairs)
    clear_mask = pc.equal(rows.column(OP), OP_CLEAR)
    if pc.any(clear_mask).as_py():
        clears = rows.filter(clear_mask)
        clears = semi_join_rows(clears, clears.column("key").flatten(), kcols)
        if clears.num_rows:
            out.append(clears)
    return out
