"""List state tables (Spark's ListState) with per-element TTL.

Invariants (besides those of :mod:`fsstate.tables.base`):

* A list element is identified by the sequence number that appended it; elements are returned
  in append order. ``put`` is a clear followed by appends.
* A view is ``[(value, expires_at_ms | None, elem_seq)]``; a cold key appended to without TTL
  gets a *partial* view of the new elements only (merged with the sealed ones on the first
  read), so a list larger than the budget can grow without ever being loaded.
* TTL index: one entry per grouping key holding the minimum expiry of its elements and the
  element count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from fsstate import interfaces
from fsstate.errors import SchemaError
from fsstate.format.schema import KIND_LIST, LIST_UKEY_SCHEMA
from fsstate.interfaces import Key
from fsstate.tables.batched import BatchedTable
from fsstate.tables.cursor import KeyCursor, list_cursor_ops
from fsstate.tables.memtable import touch
from fsstate.tables.ttl_index import TtlIndex


class ListTable(BatchedTable, interfaces.ListTableAPI):
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
        key, old = self._view(key)
        self.row_tally.removed += len(old)
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
        touch(self._dirty, key)[seq] = seq
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
        :func:`fsstate.tables.cursor.list_cursor_ops`."""
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
        touched = touch(self._dirty, key)
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
        self.row_tally.removed += len(view)
        seq = self._next_seq()
        self._views[key] = []
        self._dirty[key] = [seq, {}]
        if self.indexed:
            self.ttl_index().discard(key)
        self._after_growth()

    def _expire_entry(self, idx: TtlIndex, entry: Any, now: int) -> int:
        """Remove the elements of key ``entry``'s list expired at ``now``; index the list at
        its next minimum expiry."""
        k, view = self._view(entry)
        keep = [e for e in view if e[1] is None or e[1] > now]
        gone = len(view) - len(keep)
        if gone:
            seq = self._next_seq()
            touched = touch(self._dirty, k)
            for e in view:
                if not (e[1] is None or e[1] > now):
                    touched[e[2]] = seq
            self._views[k] = keep
        self._reindex(k, keep)
        return gone

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
        elems = pa.array(np.arange(start, start + len(key_list), dtype=np.int64))
        ukey = pa.StructArray.from_arrays([elems], fields=list(LIST_UKEY_SCHEMA))
        self._append_batch(key_struct, ukey, value_struct, key_list)


def _as_sequence(state: str, values: Any) -> Sequence[Any]:
    if isinstance(values, (list, tuple)):
        return values
    try:
        return list(values)
    except TypeError:
        raise SchemaError(
            f"state {state!r}: expected a list of value tuples, got {type(values).__name__}"
        ) from None
