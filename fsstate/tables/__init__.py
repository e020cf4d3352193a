"""State tables: value, list and map state over hot views, Arrow segments and Parquet runs.

Modules, bottom up: :mod:`~fsstate.tables.ttl_index` (TTL secondary index),
:mod:`~fsstate.tables.core` (the fields of a table; the Protocols through which it sees its
store and the memory budget), :mod:`~fsstate.tables.memtable` (views, dirt and sealing),
:mod:`~fsstate.tables.warmup` (bulk loading of views), :mod:`~fsstate.tables.cursor` and its
:mod:`~fsstate.tables.cursor_templates` (generated one-frame accessors),
:mod:`~fsstate.tables.base` (the machinery shared by the kinds),
:mod:`~fsstate.tables.batched` (Arrow batch reads and writes), then one module per kind:
:mod:`~fsstate.tables.value`, :mod:`~fsstate.tables.lists`, :mod:`~fsstate.tables.maps`.
"""

from __future__ import annotations

from fsstate.tables.base import TableBase
from fsstate.tables.lists import ListTable
from fsstate.tables.maps import MapTable
from fsstate.tables.value import ValueTable

__all__ = ["ListTable", "MapTable", "TableBase", "ValueTable"]
