"""Abstract interfaces of the fsstate engine: the contract every store and table honours.

This module holds only abstract classes and the shared aliases; it imports nothing of fsstate.
The concrete engine lives in :mod:`fsstate.tables` and :mod:`fsstate.store`; the Spark adapter's
in-memory store (``fsstate_spark.tiered.transient``) implements the per-key part, and the adapter's
handles are typed against these classes only.

Two levels:

* **per-key** (:class:`KeyedStore` and the ``Keyed*Table`` classes): what a stateful processor
  calls for the grouping key it works on (Spark's ValueState / ListState / MapState). Every
  store implements it.
* **engine** (:class:`StateTable`, :class:`ValueTableAPI`, :class:`ListTableAPI`,
  :class:`MapTableAPI`): the per-key API plus whole-table operations (range deletes, scans,
  TTL cleanup) and batched Arrow reads and writes; implemented by the persistent tables.

Conventions (invariants of every implementation):

* A grouping key, a map user key and a value are Python tuples whose arity and element types
  match the table's Arrow schema. Reads always return plain tuples (never Rows, never numpy
  scalars).
* Every write takes the next sequence number of its store. Reads resolve by sequence number,
  newest first, across every tier (hot dict, in-memory Arrow segments, Parquet runs), so a
  delete followed by a re-put in one epoch is correct whatever was sealed or spilled between.
* With a TTL, a row written at processing time ``t`` expires at ``t + ttl_ms``; a row is
  expired when ``expires_at_ms <= now_ms`` (Spark's ``StateTTL.isExpired``). Expired rows are
  never returned, whether or not a cleanup pass removed them yet.
* Map entries iterate in the order documented by :meth:`KeyedMapTable.items`; list elements in
  append order.
* Bad input raises a subclass of :class:`fsstate.errors.FsStateError` before anything is
  written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import Any

import pyarrow as pa

Key = tuple[Any, ...]
"""A grouping key or a map user key: a tuple of plain Python scalars."""
Value = tuple[Any, ...]
"""A value: a tuple of plain Python scalars matching the value schema."""


class StateKind(str, Enum):
    """The three kinds of state variable (stored by name in manifests and file metadata)."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"

    def __str__(self) -> str:
        return self.value


# -- per-key API ------------------------------------------------------------------------------
class KeyedTable(ABC):
    """A named, typed state variable of one store, used one grouping key at a time."""

    name: str
    kind: StateKind
    ttl_ms: int | None

    @abstractmethod
    def exists(self, key: Key) -> bool:
        """Whether the grouping key holds any live (unexpired) state in this table."""

    @abstractmethod
    def clear(self, key: Key) -> None:
        """Remove all state of the grouping key in this table (a whole-key tombstone)."""


class KeyedValueTable(KeyedTable):
    """One value per grouping key (Spark's ValueState)."""

    @abstractmethod
    def get(self, key: Key) -> Value | None:
        """The live value of the key, or None."""

    @abstractmethod
    def update(self, key: Key, value: Value) -> None:
        """Set the key's value; with a TTL, its expiry becomes now + ttl."""


class KeyedListTable(KeyedTable):
    """An ordered list of values per grouping key (Spark's ListState); TTL per element."""

    @abstractmethod
    def get(self, key: Key) -> list[Value]:
        """The live elements of the key's list, in append order (empty if none)."""

    @abstractmethod
    def put(self, key: Key, values: Sequence[Value]) -> None:
        """Replace the key's list."""

    @abstractmethod
    def append(self, key: Key, value: Value) -> None:
        """Append one element."""

    @abstractmethod
    def extend(self, key: Key, values: Sequence[Value]) -> None:
        """Append several elements, in order."""


class KeyedMapTable(KeyedTable):
    """A map from user key to value per grouping key (Spark's MapState); TTL per entry."""

    @abstractmethod
    def get(self, key: Key, user_key: Key) -> Value | None:
        """The live value under ``user_key``, or None."""

    @abstractmethod
    def contains(self, key: Key, user_key: Key) -> bool:
        """Whether ``user_key`` holds a live value."""

    @abstractmethod
    def update(self, key: Key, user_key: Key, value: Value) -> None:
        """Set the value under ``user_key``; with a TTL, the entry's expiry becomes now + ttl."""

    @abstractmethod
    def remove(self, key: Key, user_key: Key) -> None:
        """Remove ``user_key`` (a point tombstone)."""

    @abstractmethod
    def items(self, key: Key) -> Iterator[tuple[Key, Value]]:
        """Live (user key, value) pairs of the key, in user-key order.

        The order is the table's user-key order (a sort key given when the table is declared,
        e.g. Spark's MapState order) or natural user-key order (ascending field by field,
        nulls last); it never depends on the order of writes.
        """

    @abstractmethod
    def user_keys(self, key: Key) -> Iterator[Key]:
        """Live user keys of the key, in the order of :meth:`items`."""

    @abstractmethod
    def values(self, key: Key) -> Iterator[Value]:
        """Live values of the key, in the order of :meth:`items`."""


class KeyedStore(ABC):
    """The state tables of one task's store: what a stateful processor's handle works on."""

    version: int | None

    @property
    @abstractmethod
    def dirty(self) -> bool:
        """Whether anything changed since the store was opened or last committed."""

    @abstractmethod
    def value_table(
        self,
        name: str,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
    ) -> KeyedValueTable:
        """Declare (or get) a value state table."""

    @abstractmethod
    def list_table(
        self,
        name: str,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
    ) -> KeyedListTable:
        """Declare (or get) a list state table."""

    @abstractmethod
    def map_table(
        self,
        name: str,
        user_key_schema: pa.Schema,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
        user_key_order: Callable[[Key], Any] | None = None,
    ) -> KeyedMapTable:
        """Declare (or get) a map state table; ``user_key_order`` sorts its entries."""

    @abstractmethod
    def drop_table(self, name: str) -> bool:
        """Delete a state table; returns whether it existed."""

    @abstractmethod
    def set_time(self, now_ms: int) -> None:
        """Set the processing time used for TTL expiry and visibility."""

    @abstractmethod
    def expire(self) -> int:
        """Remove every row expired at the current time; returns the rows removed."""

    @abstractmethod
    def close(self) -> None:
        """Release memory; uncommitted changes are discarded."""


# -- engine API: whole tables and Arrow batches ------------------------------------------------
class StateTable(KeyedTable):
    """Whole-table operations of a persistent table."""

    @abstractmethod
    def delete_range(self, lo: Key | None, hi: Key | None) -> None:
        """Remove every grouping key ``k`` with ``lo <= k < hi`` (a range tombstone).

        Meant for time-window cleanup (keys that start with a window start) and event-time
        deadlines. Keys compare as tuples; a bound may be a prefix (the key's first fields) or
        None (unbounded); keys holding nulls are never in a range.
        """

    @abstractmethod
    def keys(self) -> Iterator[Key]:
        """Every grouping key with live state in this table (a full scan; not a hot path)."""

    @abstractmethod
    def expire(self) -> int:
        """Remove the rows expired at the store's current time; returns the rows removed."""


class ValueTableAPI(StateTable, KeyedValueTable):
    """Value state with batched Arrow reads and writes."""

    @abstractmethod
    def get_many(self, keys: pa.Table) -> pa.Table:
        """Values for a table of keys (columns named as the key schema), in input order.

        Returns a table with the value schema's columns plus a boolean ``_found`` column; a key
        without a live value gives nulls and ``_found = False``.
        """

    @abstractmethod
    def put_many(self, keys: pa.Table, values: pa.Table) -> None:
        """Set values for many keys at once; later rows win over earlier rows of the same key."""


class ListTableAPI(StateTable, KeyedListTable):
    """List state with batched Arrow appends."""

    @abstractmethod
    def append_many(self, keys: pa.Table, values: pa.Table) -> None:
        """Append row i of ``values`` to the list of key row i, for every row, in row order."""


class MapTableAPI(StateTable, KeyedMapTable):
    """Map state with batched Arrow reads and writes."""

    @abstractmethod
    def get_many(self, keys: pa.Table, user_keys: pa.Table) -> pa.Table:
        """Values for (key row i, user key row i) pairs; same shape as ValueTable.get_many."""

    @abstractmethod
    def put_many(self, keys: pa.Table, user_keys: pa.Table, values: pa.Table) -> None:
        """Set many entries at once; later rows win."""
