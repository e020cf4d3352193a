"""Abstract interfaces of the fsstate engine: the contract every tier configuration honours.

This module holds only abstract classes; the concrete engine lives in ``tables``, ``store`` and
the tier modules. The Spark adapter and the tests program against these interfaces.

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
* Bad input raises a subclass of :class:`fsstate.errors.FsStateError` before anything is
  written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

Key = tuple[Any, ...]
Value = tuple[Any, ...]


class StateTable(ABC):
    """Common part of the three table kinds: a named, typed state variable of one store."""

    name: str
    kind: str
    ttl_ms: int | None

    @abstractmethod
    def exists(self, key: Key) -> bool:
        """Whether the grouping key holds any live (unexpired) state in this table."""

    @abstractmethod
    def clear(self, key: Key) -> None:
        """Remove all state of the grouping key in this table (a whole-key tombstone)."""

    @abstractmethod
    def delete_range(self, lo: Key, hi: Key) -> None:
        """Remove every grouping key ``k`` with ``lo <= k < hi`` (a range tombstone).

        Meant for time-window cleanup (keys that start with a window start). Keys compare as
        tuples; keys holding nulls are never in a range.
        """

    @abstractmethod
    def keys(self) -> Iterator[Key]:
        """Every grouping key with live state in this table (a full scan; not a hot path)."""

    @abstractmethod
    def expire(self) -> int:
        """Remove the rows expired at the store's current time; returns the rows removed."""


class ValueTableAPI(StateTable):
    """One value per grouping key (Spark's ValueState)."""

    @abstractmethod
    def get(self, key: Key) -> Value | None:
        """The live value of the key, or None."""

    @abstractmethod
    def update(self, key: Key, value: Value) -> None:
        """Set the key's value; with a TTL, its expiry becomes now + ttl."""

    @abstractmethod
    def get_many(self, keys: pa.Table) -> pa.Table:
        """Values for a table of keys (columns named as the key schema), in input order.

        Returns a table with the value schema's columns plus a boolean ``_found`` column; a key
        without a live value gives nulls and ``_found = False``.
        """

    @abstractmethod
    def put_many(self, keys: pa.Table, values: pa.Table) -> None:
        """Set values for many keys at once; later rows win over earlier rows of the same key."""


class ListTableAPI(StateTable):
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

    @abstractmethod
    def append_many(self, keys: pa.Table, values: pa.Table) -> None:
        """Append row i of ``values`` to the list of key row i, for every row, in row order."""


class MapTableAPI(StateTable):
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
        """Live (user key, value) pairs of the key, in user-key insertion order."""

    @abstractmethod
    def user_keys(self, key: Key) -> Iterator[Key]:
        """Live user keys of the key."""

    @abstractmethod
    def values(self, key: Key) -> Iterator[Value]:
        """Live values of the key."""

    @abstractmethod
    def get_many(self, keys: pa.Table, user_keys: pa.Table) -> pa.Table:
        """Values for (key row i, user key row i) pairs; same shape as ValueTable.get_many."""

    @abstractmethod
    def put_many(self, keys: pa.Table, user_keys: pa.Table, values: pa.Table) -> None:
        """Set many entries at once; later rows win."""
