"""List and map state tables (Spark's ListState and MapState) with per-element TTL.

Invariants (besides those of :mod:`fsstate.tables`):

* A list element is identified by the sequence number that appended it; elements are returned
  in append order. ``put`` is a clear followed by appends.
* Map entries are returned in the order of their last write (an update moves the entry to the
  end), the order a reload from the sealed tiers reproduces. A map view holds one cell per
  user key (the value tuple, or a ``Timed`` pair when it expires; see
  :class:`fsstate.tombstones.Timed`).
* TTL index: list state keeps one entry per grouping key holding the minimum expiry of its
  elements and the element count; map state keeps one entry per (grouping key, user key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fsstate import interfaces
from fsstate.cursor import KeyCursor, list_cursor_ops, map_cursor_ops
from fsstate.errors import SchemaError
from fsstate.schema import KIND_LIST, KIND_MAP, LIST_UKEY_SCHEMA, make_checker
from fsstate.tables import Key, TableBase
from fsstate.tables_batched import _struct_of, _values_table
from fsstate.tombstones import Timed, cell, cell_value

if TYPE_CHECKING:
    from fsstate.manifest import TableEntry
    from fsstate.store import PartitionStore


def _touch(dirty: dict[Key, Any], key: Key) -> dict[Any, int]:
    d = dirty.get(key)
    if d is None:
        d = dirty[key] = [None, {}]
    touched: dict[Any, int] = d[1]
    return touched


class ListTable(TableBase, interfaces.ListTableAPI):
    """An ordered list of values per grouping key."""

    kind = KIND_LIST

    def get(self, key: Key) -> list[tuple[Any, ...]]:
        """Live elements in append order (a new list; mutating it changes nothing)."""
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None or (self._partial and key in self._partial):
            view = self._view(key)[1]
            self._after_growth()
        if not self.indexed:
            return [e[0] for e in view]
        now = self.now_ms
        return [e[0] for e in view if e[1] is None or e[1] > now]

    def _reindex(self, key: Key, view: list[Any]) -> None:
        idx = self.ttl_index()
        exps = [e[1] for e in view if e[1] is not None]
        if exps:
            idx.set(key, min(exps), len(view))
        else:
            idx.discard(key)

    def put(self, key: Key, values: Sequence[tuple[Any, ...]]) -> None:
        """Replace the list of the key."""
        check = self._value_check
        checked = [check(v) for v in _as_sequence(self.name, values)]
        key, _ = self._view(key)
        clear_seq = self._next_seq()
        exp = self._expiry()
        view = []
        touched: dict[Any, int] = {}
        for v in checked:
            seq = self._next_seq()
            view.append((v, exp, seq))
            touched[seq] = seq
        self._views[key] = view
        self._dirty[key] = [clear_seq, touched]
        if self.indexed:
            self._reindex(key, view)
        self._ctl.growth -= len(view)
        self._after_growth()

    def append(self, key: Key, value: tuple[Any, ...]) -> None:
        """Append one element."""
        value = self._value_check(value)
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            key, view = self._blind_view(key)
        st = self._store
        seq = st.next_seq
        st.next_seq = seq + 1
        exp = self._expiry()
        view.append((value, exp, seq))
        _touch(self._dirty, key)[seq] = seq
        if self.indexed:
            self._after_append(key, view, exp)
        ctl = self._ctl
        ctl.growth -= 1
        if ctl.growth <= 0:
            ctl.check()

    def cursor_ops(
        self, cursor: KeyCursor, append_slow: Callable[..., None], method: bool = False
    ) -> Callable[..., None]:
        """One-frame ``append_value(v)`` at ``cursor.key``; see
        :func:`fsstate.cursor.list_cursor_ops`."""
        return list_cursor_ops(self, cursor, append_slow, method)

    def _blind_view(self, key: Any) -> tuple[Key, list[Any]]:
        """The view to append to: without TTL, a cold key's list is not loaded.

        Appending needs none of the existing elements, so a cold key gets a *partial* view that
        holds only the new elements; the first operation that needs the whole list merges it
        with the sealed elements (see ``TableBase._complete``). A list larger than the memory
        budget can so keep growing without ever being loaded.
        """
        if self.indexed or not self.runs:
            return self._view(key)
        key = self._check_key(key)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = []
            self._partial.add(key)
            self._ctl.growth -= 1
        return key, view

    def _after_append(self, key: Key, view: list[Any], exp: int | None) -> None:
        idx = self.ttl_index()
        cur = idx.get(key)
        if exp is not None and (cur is None or exp < cur):
            idx.set(key, exp, len(view))
        elif cur is not None:
            idx.set(key, cur, len(view))

    def extend(self, key: Key, values: Sequence[tuple[Any, ...]]) -> None:
        """Append several elements in order."""
        check = self._value_check
        checked = [check(v) for v in _as_sequence(self.name, values)]
        if not checked:
            return
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            key, view = self._blind_view(key)
        exp = self._expiry()
        touched = _touch(self._dirty, key)
        for v in checked:
            seq = self._next_seq()
            view.append((v, exp, seq))
            touched[seq] = seq
        if self.indexed:
            self._after_append(key, view, exp)
        self._ctl.growth -= len(checked)
        self._after_growth()

    def clear(self, key: Key) -> None:
        """Remove the whole list."""
        key, view = self._view(key)
        if not view and key not in self._dirty:
            return
        seq = self._next_seq()
        self._views[key] = []
        self._dirty[key] = [seq, {}]
        if self.indexed:
            self.ttl_index().discard(key)
        self._after_growth()

    def expire(self) -> int:
        """Remove expired elements; re-index each cleaned list at its next minimum expiry."""
        if not self.indexed:
            return 0
        idx = self.ttl_index()
        now = self.now_ms
        removed = 0
        for _exp, key in idx.pop_expired(now):
            idx.lookups += 1
            k, view = self._view(key)
            keep = [e for e in view if e[1] is None or e[1] > now]
            gone = len(view) - len(keep)
            if gone:
                seq = self._next_seq()
                touched = _touch(self._dirty, k)
                for e in view:
                    if not (e[1] is None or e[1] > now):
                        touched[e[2]] = seq
                self._views[k] = keep
                removed += gone
            self._reindex(k, keep)
        self._after_growth()
        return removed

    def append_many(self, keys: pa.Table, values: pa.Table) -> None:
        """Append value row i to the list of key row i, in row order."""
        key_struct, key_list, value_struct = self._keys_and_values(keys, values)
        if not key_list:
            return
        if self.indexed:
            for k, v in zip(key_list, value_struct.to_pylist()):
                self.append(k, tuple(v.values()))
            return
        # seal first: _append_batch then numbers the rows from next_seq, as these element ids
        self.seal()
        start = self._store.next_seq
        elems = pa.array(range(start, start + len(key_list)), type=pa.int64())
        ukey = pa.StructArray.from_arrays([elems], fields=list(LIST_UKEY_SCHEMA))
        self._append_batch(key_struct, ukey, value_struct, key_list)


class MapTable(TableBase, interfaces.MapTableAPI):
    """A map from user key to value per grouping key."""

    kind = KIND_MAP

    def __init__(self, store: PartitionStore, entry: TableEntry) -> None:
        super().__init__(store, entry)
        assert entry.spec.user_key_schema is not None
        self._ukey_check = make_checker(self.name, "user key", entry.spec.user_key_schema)

    def cursor_ops(
        self,
        cursor: KeyCursor,
        get_slow: Callable[..., tuple[Any, ...] | None],
        contains_slow: Callable[..., bool],
        update_slow: Callable[..., None],
        method: bool = False,
    ) -> tuple[Callable[..., tuple[Any, ...] | None], Callable[..., bool], Callable[..., None]]:
        """One-frame ``get_value(u)`` / ``contains_key(u)`` / ``update_value(u, v)`` at
        ``cursor.key``; see :func:`fsstate.cursor.map_cursor_ops`."""
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
        if c is None:
            self._ukey_check(user_key)  # a miss still refuses a bad user key
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
        _touch(self._dirty, key)[user_key] = seq
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
        _touch(self._dirty, key)[user_key] = self._next_seq()
        if self.indexed:
            self.ttl_index().discard((key, user_key))
        self._after_growth()

    def clear(self, key: Key) -> None:
        """Remove every entry of the key."""
        key, view = self._view(key)
        if not view and key not in self._dirty:
            return
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
            return [(u, cell_value(c)) for u, c in view.items()]
        now = self.now_ms
        return [
            (u, c[0] if type(c) is Timed else c)
            for u, c in view.items()
            if type(c) is not Timed or c[1] > now
        ]

    def items(self, key: Key) -> Iterator[tuple[Key, tuple[Any, ...]]]:
        """Live (user key, value) pairs in last-write order."""
        return iter(self._live_items(key))

    def user_keys(self, key: Key) -> Iterator[Key]:
        """Live user keys."""
        return iter([u for u, _ in self._live_items(key)])

    def values(self, key: Key) -> Iterator[tuple[Any, ...]]:
        """Live values."""
        return iter([v for _, v in self._live_items(key)])

    def expire(self) -> int:
        """Remove expired entries; returns how many were removed."""
        if not self.indexed:
            return 0
        idx = self.ttl_index()
        now = self.now_ms
        removed = 0
        for _exp, entry in idx.pop_expired(now):
            idx.lookups += 1
            pair: tuple[Key, Key] = entry  # type: ignore[assignment]
            key, ukey = pair
            k, view = self._view(key)
            c = view.get(ukey)
            if type(c) is not Timed:
                continue  # gone, or rewritten without an expiry since
            if c[1] <= now:
                del view[ukey]
                _touch(self._dirty, k)[ukey] = self._next_seq()
                removed += 1
            else:
                idx.set(entry, c[1])
        self._after_growth()
        return removed

    def get_many(self, keys: pa.Table, user_keys: pa.Table) -> pa.Table:
        """Values for (key row i, user key row i), in order, with a ``_found`` column."""
        _, key_list = self._keys_from_table(keys)
        assert self.spec.user_key_schema is not None
        ustruct = _struct_of(self.name, "user key", user_keys, self.spec.user_key_schema)
        ukeys = list(zip(*[c.to_pylist() for c in ustruct.flatten()]))
        get = self.get
        return _values_table(self.spec.value_schema, [get(k, u) for k, u in zip(key_list, ukeys)])

    def put_many(self, keys: pa.Table, user_keys: pa.Table, values: pa.Table) -> None:
        """Set many entries; later rows win."""
        key_struct, key_list = self._keys_from_table(keys)
        assert self.spec.user_key_schema is not None
        ustruct = _struct_of(self.name, "user key", user_keys, self.spec.user_key_schema)
        vstruct = _struct_of(self.name, "value", values, self.spec.value_schema)
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


def _as_sequence(state: str, values: Any) -> Sequence[Any]:
    if isinstance(values, (list, tuple)):
        return values
    try:
        return list(values)
    except TypeError:
        raise SchemaError(
            f"state {state!r}: expected a list of value tuples, got {type(values).__name__}"
        ) from None
