"""Value state tables (Spark's ValueState): one value per grouping key.

Invariants (besides those of :mod:`fsstate.tables.base`):

* A view is the value's cell (the value tuple, or a ``Timed`` pair when it expires) or
  ``ABSENT``; the TTL index holds one entry per live value with an expiry.
* ``update`` on a key in memory writes in place (plain or TTL-indexed), the same path the
  key-cursor accessors of :mod:`fsstate.tables.cursor` take in one frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from fsstate import interfaces
from fsstate.format.schema import KIND_VALUE, OP_DELETE
from fsstate.format.tombstones import ABSENT, Timed
from fsstate.interfaces import Key, Value
from fsstate.tables.batched import BatchedTable, values_table
from fsstate.tables.cursor import Getter, KeyCursor, Updater, value_cursor_ops
from fsstate.tables.ttl_index import TtlIndex


class ValueTable(BatchedTable, interfaces.ValueTableAPI):
    """One value per grouping key (Spark's ValueState)."""

    kind = KIND_VALUE

    def cursor_ops(
        self,
        cursor: KeyCursor,
        get_slow: Callable[..., Value | None],
        update_slow: Callable[..., None],
        method: bool = False,
    ) -> tuple[Getter, Updater]:
        """One-frame ``get()`` / ``update(value)`` at ``cursor.key``; see
        :mod:`fsstate.tables.cursor`."""
        return value_cursor_ops(self, cursor, get_slow, update_slow, method)

    def get(self, key: Key) -> tuple[Any, ...] | None:
        """The live value of the key, or None."""
        try:
            e = self._views.get(key)
        except TypeError:
            key, e = self._checked_view(key)
        if e is None:
            e = self._view(key)[1]
            self._after_growth()
        if type(e) is tuple:
            return e
        if e is ABSENT:
            return None
        if type(e) is Timed:
            return None if e[1] <= self.now_ms else e[0]
        return e  # type: ignore[no-any-return]

    def exists(self, key: Key) -> bool:
        """Whether the key holds a live value."""
        return self.get(key) is not None

    def update(self, key: Key, value: tuple[Any, ...]) -> None:
        """Set the key's value; with a TTL its expiry becomes now + ttl."""
        value = self._value_check(value)
        views = self._views
        try:
            known = key in views
        except TypeError:  # an unhashable key (a list): checked below
            known = False
        if not self.indexed:
            st = self._store
            if not known:
                st.check_open()
                key = self._check_key(key)
                seq = st.next_seq
                st.next_seq = seq + 1
                views[key] = value
                self._dirty[key] = seq
                ctl = self._ctl
                ctl.growth -= 1
                if ctl.growth <= 0:
                    ctl.check()
                return
            seq = st.next_seq
            st.next_seq = seq + 1
            views[key] = value
            self._dirty[key] = seq
            return
        idx = self._ttl
        if idx is None or not known:  # first touch, or the index not loaded yet
            key, _ = self._view(key)
            idx = self.ttl_index()
        st = self._store
        seq = st.next_seq
        st.next_seq = seq + 1
        ttl = self._ttl_ms
        if ttl is None:
            views[key] = value
            self._dirty[key] = seq
            idx.discard(key)
        else:
            exp = self.now_ms + ttl
            views[key] = Timed((value, exp))
            self._dirty[key] = seq
            idx.set(key, exp)
        self._after_growth()

    def clear(self, key: Key) -> None:
        """Remove the key's value."""
        indexed = self.indexed
        try:
            view = self._views.get(key)
        except TypeError:
            key, view = self._checked_view(key)
        if view is None:
            if indexed or self.counting:  # counting: whether a row goes is known here
                key, view = self._view(key)
            else:
                key = self._check_key(key)
                view = self._views.get(key)
        if view is ABSENT:
            return
        if view is not None:
            self.row_tally.removed += 1
        seq = self._next_seq()
        self._views[key] = ABSENT
        self._dirty[key] = seq
        if indexed:
            self.ttl_index().discard(key)
        self._after_growth()

    def _expire_entry(self, idx: TtlIndex, entry: Any, now: int) -> int:
        """Remove the value of key ``entry`` if it expired at ``now``, else index it again."""
        view = self._views.get(entry)
        if view is None:
            view = self._load(entry)
        if type(view) is not Timed:
            return 0  # gone, or rewritten without an expiry since
        if view[1] > now:
            idx.set(entry, view[1])
            return 0
        self._views[entry] = ABSENT
        self._dirty[entry] = self._next_seq()
        return 1

    def get_many(self, keys: pa.Table) -> pa.Table:
        """Values for a table of keys, in input order, with a boolean ``_found`` column."""
        key_struct, key_list = self._keys_from_table(keys)
        if self._arrow_lookup_pays(len(key_struct)):
            return self._get_many_arrow(key_struct)
        get, view_of = self.get, self._views.get
        # a live, non-expiring view (a plain tuple) answers in place; anything else takes the
        # point-get path
        vals = [e if type(e) is tuple else get(k) for k in key_list for e in (view_of(k),)]
        return values_table(self.spec.value_schema, vals)

    def put_many(self, keys: pa.Table, values: pa.Table) -> None:
        """Set values for many keys; later rows win over earlier rows of the same key."""
        key_struct, key_list, value_struct = self._keys_and_values(keys, values)
        if not key_list:
            return
        if self.indexed:
            for k, v in zip(key_list, value_struct.to_pylist()):
                self.update(k, tuple(v.values()))
            return
        self._append_batch(key_struct, None, value_struct, key_list)

    def delete_many(self, keys: pa.Table) -> None:
        """Remove the values of many keys (one delete row each, written as one run)."""
        key_struct, key_list = self._keys_from_table(keys)
        if not key_list:
            return
        if self.indexed:
            for k in key_list:
                self.clear(k)
            return
        self._append_batch(key_struct, None, None, key_list, op=OP_DELETE)
