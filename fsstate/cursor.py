"""Key-cursor accessors: a table's hottest calls bound to a "current key" cell.

An adapter that serves one grouping key at a time (Spark's implicit key) keeps that key in a
cursor object and calls ``get()`` / ``update(value)`` (value state), ``append_value(v)`` (list
state) or ``get_value(u)`` / ``contains_key(u)`` / ``update_value(u, v)`` (map state) without
passing it. Forwarding each call to ``table.get(cursor.key)`` costs two Python frames, and in
a worker that does heavy work between calls (pandas, Arrow, sockets) every frame, code object
and attribute touched is a cache miss: measured in Spark's pandas worker, a value call through
the handle method cost 5.6 µs, the accessor 4.1 µs, a bare dict doing the same work 1.7 µs.
The accessors generated here are one frame each, with the table's dicts, store, controller and
value test held in closure cells (``LOAD_DEREF`` is one code unit, ``LOAD_GLOBAL`` six).
With ``method=True`` they take a leading ``self`` so that a class can hold them as methods.

Invariants:

* Fast path = the hit path of the table method, exactly. Value ``get`` returns a view that
  is a plain value tuple, or the value of an unexpired ``Timed`` pair; ``update`` stores the
  value as the view and marks the key dirty with the store's next sequence number, only when
  the key already has a view and the value passes the exact-type test of
  :func:`fsstate.schema.fast_check_source` (so the checker would return it unchanged). In a
  TTL-indexed table it does so only with a TTL set and the index in memory, and then stores
  a ``Timed`` pair expiring at now + TTL and moves the key's index entry there, as the
  method does. Map and list accessors follow their methods the same way (see their docs).
* Everything else (no key bound, a key not in memory, a tombstone or expired view, an index
  not loaded, a value that needs normalizing or is wrong) goes to the caller's slow
  callables, which are the reference path: results and errors are the slow path's.
* The accessors hold the table's ``_views`` and ``_dirty`` dicts: the table never replaces
  them (it clears and refills in place), so they stay valid for the table's life.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from fsstate.schema import fast_check_source
from fsstate.tombstones import Timed

if TYPE_CHECKING:
    from fsstate.tables import TableBase, ValueTable
    from fsstate.tables_collections import ListTable, MapTable

Key = tuple[Any, ...]
Value = tuple[Any, ...]
Getter = Callable[..., "Value | None"]  # get() (or get(self) with method=True)
Updater = Callable[..., None]  # update(value) (or update(self, value))


class KeyCursor(Protocol):
    """Holds the grouping key the accessors act on (None: no key bound)."""

    key: Key | None


# Generated once per accessor pair. Everything the accessors use is a closure cell (builtins
# included): LOAD_DEREF is one code unit where LOAD_GLOBAL carries a five-unit inline cache,
# and in a cache-cold worker every line of bytecode read is a miss.
_SRC = """
def make(
    views, dirty, store, table, cursor, Timed, get_slow, update_slow, type, len, tuple{types}
):
    def get({s0}):
        e = views.get(cursor.key)
        if type(e) is tuple:
            return e
        if type(e) is Timed and e[1] > table.now_ms:
            return e[0]
        return get_slow({s0})

    def update({s}v):
        key = cursor.key
        if {cond} and key in views:
            if not table.indexed:
                seq = store.next_seq
                store.next_seq = seq + 1
                views[key] = v
                dirty[key] = seq
                return
            idx = table._ttl
            ttl = table._ttl_ms
            if idx is not None and ttl is not None:
                seq = store.next_seq
                store.next_seq = seq + 1
                exp = table.now_ms + ttl
                views[key] = Timed((v, exp))
                dirty[key] = seq
                idx.set(key, exp)
                return
        update_slow({s}v)

    return get, update
"""


@functools.lru_cache(maxsize=64)  # one per distinct value-schema test
def _factory(source: str) -> Callable[..., Any]:
    env: dict[str, Any] = {}
    exec(source, env)
    make: Callable[..., Any] = env["make"]
    return make


_MAP_SRC = """
def make(
    views, dirty, store, table, cursor, ctl, Timed, get_slow, contains_slow, update_slow,
    type, len, tuple{types}
):
    def get_value({s}u):
        view = views.get(cursor.key)
        if view is not None:
            try:
                c = view.get(u)
            except TypeError:  # an unhashable user key: the method normalizes or refuses it
                return get_slow({s}u)
            if type(c) is tuple:
                return c
            if c is None:
                if {ucond}:
                    return None
            elif type(c) is Timed and c[1] > table.now_ms:
                return c[0]
        return get_slow({s}u)

    def contains_key({s}u):
        view = views.get(cursor.key)
        if view is not None:
            try:
                c = view.get(u)
            except TypeError:  # an unhashable user key: the method normalizes or refuses it
                return contains_slow({s}u)
            if type(c) is tuple:
                return True
            if c is None:
                if {ucond}:
                    return False
            elif type(c) is Timed and c[1] > table.now_ms:
                return True
        return contains_slow({s}u)

    def update_value({s}u, v):
        key = cursor.key
        view = views.get(key)
        if view is None or not ({cond}):
            update_slow({s}u, v)
            return
        idx = None
        if table.indexed:
            idx = table._ttl
            ttl = table._ttl_ms
            if idx is None or ttl is None:
                update_slow({s}u, v)
                return
        try:
            known = u in view
        except TypeError:  # an unhashable user key: the method normalizes or refuses it
            update_slow({s}u, v)
            return
        if known:
            del view[u]  # re-inserted last: maps iterate in last-write order
            grew = False
        elif {ucond}:
            grew = True
        else:
            update_slow({s}u, v)
            return
        seq = store.next_seq
        store.next_seq = seq + 1
        if idx is None:
            view[u] = v
        else:
            exp = table.now_ms + ttl
            view[u] = Timed((v, exp))
            idx.set((key, u), exp)
        d = dirty.get(key)
        if d is None:
            d = dirty[key] = [None, {{}}]
        d[1][u] = seq
        if grew:
            ctl.growth -= 1
            if ctl.growth <= 0:
                ctl.check()

    return get_value, contains_key, update_value
"""


_LIST_SRC = """
def make(views, dirty, store, table, cursor, ctl, append_slow, type, len, tuple{types}):
    def append_value({s}v):
        key = cursor.key
        view = views.get(key)
        if view is not None and {cond} and not table.indexed:
            seq = store.next_seq
            store.next_seq = seq + 1
            view.append((v, None, seq))
            d = dirty.get(key)
            if d is None:
                d = dirty[key] = [None, {{}}]
            d[1][seq] = seq
            ctl.growth -= 1
            if ctl.growth <= 0:
                ctl.check()
        else:
            append_slow({s}v)

    return append_value
"""


def value_cursor_ops(
    table: ValueTable,
    cursor: KeyCursor,
    get_slow: Callable[..., Value | None],
    update_slow: Callable[..., None],
    method: bool = False,
) -> tuple[Getter, Updater]:
    """Generate ``get()`` / ``update(value)`` for ``table`` at ``cursor.key``.

    Args:
        table: the value table.
        cursor: the object whose ``key`` attribute names the current grouping key.
        get_slow: the reference ``get()`` (called off the fast path; raises what it raises).
        update_slow: the reference ``update(value)``.
        method: generate methods: each accessor takes a leading ``self``, which it passes
            on to the slow callables (then plain functions of the class).

    Returns:
        ``(get, update)``, each one Python frame on the fast path.
    """
    ops: tuple[Getter, Updater] = _build(_SRC, table, cursor, method, Timed, get_slow, update_slow)
    return ops


def map_cursor_ops(
    table: MapTable,
    cursor: KeyCursor,
    get_slow: Callable[..., Value | None],
    contains_slow: Callable[..., bool],
    update_slow: Callable[..., None],
    method: bool = False,
) -> tuple[Callable[..., Value | None], Callable[..., bool], Callable[..., None]]:
    """Generate ``get_value(u)`` / ``contains_key(u)`` / ``update_value(u, v)`` at ``cursor.key``.

    The fast paths are the paths of :class:`fsstate.tables_collections.MapTable`'s ``get``,
    ``contains`` and ``update`` for a grouping key whose view is in memory: a user key whose
    cell is a plain value or an unexpired ``Timed`` pair (validated when it was first
    written), or absent and passing the user key's exact-type test (a miss answers None /
    False, an update inserts it and counts one unit of growth, as the methods do). An update
    also needs a value passing the exact-type test and, in a TTL-indexed table, a TTL set and
    the index in memory (it then writes a ``Timed`` pair and moves the entry's index entry).
    Anything else calls the slow callables.

    Args:
        table: the map table.
        cursor: the object whose ``key`` attribute names the current grouping key.
        get_slow: the reference ``get_value(u)``.
        contains_slow: the reference ``contains_key(u)``.
        update_slow: the reference ``update_value(u, v)``.
        method: as for :func:`value_cursor_ops`.

    Returns:
        ``(get_value, contains_key, update_value)``, each one Python frame on the fast path.
    """
    ops: tuple[Callable[..., Value | None], Callable[..., bool], Callable[..., None]] = _build(
        _MAP_SRC, table, cursor, method, table._ctl, Timed, get_slow, contains_slow, update_slow
    )
    return ops


def list_cursor_ops(
    table: ListTable, cursor: KeyCursor, append_slow: Callable[..., None], method: bool = False
) -> Callable[..., None]:
    """Generate ``append_value(v)`` at ``cursor.key``.

    The fast path is the hit path of :meth:`fsstate.tables_collections.ListTable.append`: the
    key has a view in memory (a whole list, or the partial view of blind appends), the value
    passes the exact-type test and the table has no TTL index; it appends, marks the element
    dirty and counts one unit of growth for the memory controller, as ``append`` does.
    Anything else calls ``append_slow``.

    Args:
        table: the list table.
        cursor: the object whose ``key`` attribute names the current grouping key.
        append_slow: the reference ``append_value(v)``.
        method: as for :func:`value_cursor_ops`.

    Returns:
        ``append_value``, one Python frame on the fast path.
    """
    append: Callable[..., None] = _build(_LIST_SRC, table, cursor, method, table._ctl, append_slow)
    return append


def _build(source: str, table: TableBase, cursor: KeyCursor, method: bool, *cells: Any) -> Any:
    """Compile ``source`` for the table's exact-type tests and call its ``make``.

    Every ``make`` takes the table's views, dirty state, store, the table and the cursor, then
    ``cells`` (the kind's own: sentinels, controller, slow callables), then the builtins and
    the tests' types. ``{cond}`` in ``source`` is the value test of ``v``; ``{ucond}`` the user
    key test of ``u`` (map tables).

    With ``method`` the accessors take a leading ``self`` (ignored, passed on to the slow
    callables), so a class can hold them as its methods.
    """
    cond, types = _exact_test(table.spec.value_schema, "v", "_t")
    ucond = "False"
    if table.spec.user_key_schema is not None:
        ucond, utypes = _exact_test(table.spec.user_key_schema, "u", "_u")
        types = {**types, **utypes}
    make = _factory(
        source.format(
            types="".join(f", {t}" for t in types),
            cond=cond,
            ucond=ucond,
            s0="self" if method else "",
            s="self, " if method else "",
        )
    )
    builtins = (type, len, tuple)
    return make(
        table._views, table._dirty, table._store, table, cursor, *cells, *builtins, *types.values()
    )


def _exact_test(schema: pa.Schema, var: str, prefix: str) -> tuple[str, dict[str, Any]]:
    """The exact-type test of ``var`` (``False`` when the checker must always run)."""
    fast = fast_check_source(schema, var, prefix)
    return fast if fast is not None else ("False", {})
