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
  :func:`fsstate.format.schema.fast_check_source` (so the checker would return it unchanged). In a
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
from string import Template
from typing import Any, Protocol

import pyarrow as pa

from fsstate.codegen import compile_source
from fsstate.format.schema import fast_check_source
from fsstate.format.tombstones import Timed
from fsstate.interfaces import Key, Value
from fsstate.tables.core import TableCore
from fsstate.tables.cursor_templates import LIST_ACCESSORS, MAP_ACCESSORS, VALUE_ACCESSORS

Getter = Callable[..., "Value | None"]  # get() (or get(self) with method=True)
Updater = Callable[..., None]  # update(value) (or update(self, value))


class KeyCursor(Protocol):
    """Holds the grouping key the accessors act on (None: no key bound)."""

    key: Key | None


def value_cursor_ops(
    table: TableCore,
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
    ops: tuple[Getter, Updater] = _build(
        VALUE_ACCESSORS, "value-accessors", table, cursor, method, Timed, get_slow, update_slow
    )
    return ops


def map_cursor_ops(
    table: TableCore,
    cursor: KeyCursor,
    get_slow: Callable[..., Value | None],
    contains_slow: Callable[..., bool],
    update_slow: Callable[..., None],
    method: bool = False,
) -> tuple[Callable[..., Value | None], Callable[..., bool], Callable[..., None]]:
    """Generate ``get_value(u)`` / ``contains_key(u)`` / ``update_value(u, v)`` at ``cursor.key``.

    The fast paths are the paths of :class:`fsstate.tables.lists.MapTable`'s ``get``,
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
        MAP_ACCESSORS,
        "map-accessors",
        table,
        cursor,
        method,
        table._ctl,
        Timed,
        get_slow,
        contains_slow,
        update_slow,
    )
    return ops


def list_cursor_ops(
    table: TableCore, cursor: KeyCursor, append_slow: Callable[..., None], method: bool = False
) -> Callable[..., None]:
    """Generate ``append_value(v)`` at ``cursor.key``.

    The fast path is the hit path of :meth:`fsstate.tables.lists.ListTable.append`: the
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
    append: Callable[..., None] = _build(
        LIST_ACCESSORS, "list-accessors", table, cursor, method, table._ctl, append_slow
    )
    return append


def render(template: Template, table: TableCore, method: bool) -> tuple[str, dict[str, Any]]:
    """The source of ``template`` for the table's exact-type tests, and the tests' types.

    ``${cond}`` becomes the value test of ``v``, ``${ucond}`` the user-key test of ``u`` (map
    tables; ``False`` elsewhere); see :mod:`fsstate.tables.cursor_templates`.
    """
    cond, types = _exact_test(table.spec.value_schema, "v", "_t", key=False)
    ucond = "False"
    if table.spec.user_key_schema is not None:
        ucond, utypes = _exact_test(table.spec.user_key_schema, "u", "_u", key=True)
        types = {**types, **utypes}
    source = template.substitute(
        types="".join(f", {t}" for t in types),
        cond=cond,
        ucond=ucond,
        self_arg="self" if method else "",
        self_="self, " if method else "",
    )
    return source, types


@functools.lru_cache(maxsize=64)  # one per distinct source (schema test and method flag)
def _factory(source: str, what: str) -> Callable[..., Any]:
    make: Callable[..., Any] = compile_source(source, what, {})["make"]
    return make


def _build(
    template: Template, what: str, table: TableCore, cursor: KeyCursor, method: bool, *cells: Any
) -> Any:
    """Render and compile ``template`` for the table (once per distinct source) and call its
    ``make``.

    Every ``make`` takes the table's views, dirty state, store, the table and the cursor, then
    ``cells`` (the kind's own: sentinels, controller, slow callables), then the builtins and
    the tests' types. With ``method`` the accessors take a leading ``self`` (ignored, passed
    on to the slow callables), so a class can hold them as its methods.
    """
    source, types = render(template, table, method)
    make = _factory(source, what)
    builtins = (type, len, tuple)
    return make(
        table._views, table._dirty, table._store, table, cursor, *cells, *builtins, *types.values()
    )


def _exact_test(schema: pa.Schema, var: str, prefix: str, key: bool) -> tuple[str, dict[str, Any]]:
    """The exact-type test of ``var`` (``False`` when the checker must always run)."""
    fast = fast_check_source(schema, var, prefix, key)
    return fast if fast is not None else ("False", {})
