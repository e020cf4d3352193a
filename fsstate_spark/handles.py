"""Spark-shaped state handles over fsstate tables, bound to the current grouping key.

The user's processor receives a :class:`TieredHandle` in ``init`` instead of Spark's handle.
Its ``getValueState`` / ``getListState`` / ``getMapState`` take Spark's arguments and return
objects with exactly the API of Spark's ``ValueState`` / ``ListState`` / ``MapState`` (they
subclass them, so ``isinstance`` checks keep working), backed by engine tables. Timers go to
Spark's real handle.

Invariants:

* Spark's camelCase API stops here: every call is forwarded to one snake_case table method with
  the bound key; schemas were converted once at declaration (:mod:`fsstate_spark.schemas`).
* The grouping key lives in one shared :class:`KeyBinding` that the processor proxy sets before
  it runs user code for a key; a state call with no key bound (outside ``handleInputRows``,
  ``handleExpiredTimer`` or ``handleInitialState``) raises :class:`NoGroupingKeyError`, as
  Spark's own handles refuse calls without an implicit key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import MethodType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import (
    ListState,
    MapState,
    StatefulProcessorHandle,
    ValueState,
)
from pyspark.sql.types import StructType

from fsstate.errors import FsStateError
from fsstate_spark.schemas import SparkSchema, to_arrow

if TYPE_CHECKING:
    from fsstate_spark.lifecycle import AnyStore

Key = tuple[Any, ...]
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


class NoGroupingKeyError(FsStateError, RuntimeError):
    """A state variable was used while no grouping key is bound."""


class EmptyListError(FsStateError, ValueError):
    """An empty list was written to list state (Spark rejects it the same way)."""


def _no_key(name: str) -> NoGroupingKeyError:
    return NoGroupingKeyError(
        f"state {name!r} was used with no grouping key bound: state variables can only be read "
        "or written inside handleInputRows, handleExpiredTimer or handleInitialState (and "
        "while the iterator they return is consumed), not in init or close"
    )


def _plain(v: Any) -> Any:
    """A Python scalar for numpy / pandas scalars; anything else unchanged."""
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        return v.item()
    return v


def normalize_key(key: Any) -> Key:
    """Spark's grouping key as a tuple of plain Python scalars (numpy scalars converted)."""
    items: tuple[Any, ...] = (
        key if type(key) is tuple else (tuple(key) if isinstance(key, (tuple, list)) else (key,))
    )
    for v in items:
        if type(v) not in _PLAIN:
            return tuple(_plain(x) for x in items)
    return items


class KeyBinding:
    """The grouping key the state objects of one task currently act on."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: Key | None = None


class _BoundState:
    """A state variable bound to the current grouping key of its handle."""

    def __init__(self, binding: KeyBinding, table: Any, state_name: str) -> None:
        self._binding = binding
        self._table = table
        self._stateName = state_name

    def _key(self) -> Key:
        key = self._binding.key
        if key is None:
            raise _no_key(self._stateName)
        return key


class TieredValueState(_BoundState, ValueState):
    """Spark's ValueState API over an fsstate value table.

    ``get`` and ``update`` are the hottest calls of a processor. When the table offers
    key-cursor accessors (:mod:`fsstate.cursor`), each instance's ``get`` / ``update`` are those
    one-frame accessors, which fall back to the methods below for anything but a plain hit.
    """

    def __init__(self, binding: KeyBinding, table: Any, state_name: str) -> None:
        super().__init__(binding, table, state_name)
        cursor_ops = getattr(table, "cursor_ops", None)
        if cursor_ops is not None:
            self.get, self.update = cursor_ops(  # type: ignore[method-assign]
                binding,
                MethodType(TieredValueState.get, self),
                MethodType(TieredValueState.update, self),
            )

    def exists(self) -> bool:
        """Whether the state holds a (live) value for the current key."""
        key = self._binding.key
        if key is None:
            raise _no_key(self._stateName)
        return bool(self._table.exists(key))

    def get(self) -> tuple[Any, ...] | None:
        """The value for the current key, or None."""
        key = self._binding.key
        if key is None:
            raise _no_key(self._stateName)
        value: tuple[Any, ...] | None = self._table.get(key)
        return value

    def update(self, newValue: tuple[Any, ...]) -> None:
        """Set the value for the current key (resets its TTL)."""
        key = self._binding.key
        if key is None:
            raise _no_key(self._stateName)
        self._table.update(key, newValue)

    def clear(self) -> None:
        """Remove the value of the current key."""
        key = self._binding.key
        if key is None:
            raise _no_key(self._stateName)
        self._table.clear(key)


class TieredListState(_BoundState, ListState):
    """Spark's ListState API over an fsstate list table."""

    def exists(self) -> bool:
        """Whether the current key's list has any live element."""
        return bool(self._table.exists(self._key()))

    def get(self) -> Iterator[tuple[Any, ...]]:
        """An iterator over the current key's list, in append order."""
        return iter(self._table.get(self._key()))

    def _non_empty(self, values: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        values = list(values)
        if not values:
            raise EmptyListError(
                f"state {self._stateName!r}: cannot write an empty list to list state (Spark's "
                "ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE); use clear() to empty it"
            )
        return values

    def put(self, newState: list[tuple[Any, ...]]) -> None:
        """Replace the current key's list (non-empty; use ``clear`` to empty it)."""
        self._table.put(self._key(), self._non_empty(newState))

    def appendValue(self, newState: tuple[Any, ...]) -> None:
        """Append one element."""
        self._table.append(self._key(), newState)

    def appendList(self, newState: list[tuple[Any, ...]]) -> None:
        """Append several elements (at least one), in order."""
        self._table.extend(self._key(), self._non_empty(newState))

    def clear(self) -> None:
        """Remove the current key's list."""
        self._table.clear(self._key())


class TieredMapState(_BoundState, MapState):
    """Spark's MapState API over an fsstate map table.

    As for :class:`TieredValueState`, ``getValue`` / ``containsKey`` / ``updateValue`` are
    per-instance key-cursor accessors when the table offers them, falling back to the methods
    below off their hit paths.
    """

    def __init__(self, binding: KeyBinding, table: Any, state_name: str) -> None:
        super().__init__(binding, table, state_name)
        cursor_ops = getattr(table, "cursor_ops", None)
        if cursor_ops is not None:
            self.getValue, self.containsKey, self.updateValue = (  # type: ignore[method-assign]
                cursor_ops(
                    binding,
                    MethodType(TieredMapState.getValue, self),
                    MethodType(TieredMapState.containsKey, self),
                    MethodType(TieredMapState.updateValue, self),
                )
            )

    def exists(self) -> bool:
        """Whether the current key's map has any live entry."""
        return bool(self._table.exists(self._key()))

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The value under a user key, or None."""
        value: tuple[Any, ...] | None = self._table.get(self._key(), key)
        return value

    def containsKey(self, key: tuple[Any, ...]) -> bool:
        """Whether the user key holds a live value."""
        return bool(self._table.contains(self._key(), key))

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        """Set the value under a user key (resets that entry's TTL)."""
        self._table.update(self._key(), key, value)

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        """(user key, value) pairs of the current key."""
        return iter(self._table.items(self._key()))

    def keys(self) -> Iterator[tuple[Any, ...]]:
        """User keys of the current key."""
        return iter(self._table.user_keys(self._key()))

    def values(self) -> Iterator[tuple[Any, ...]]:
        """Values of the current key."""
        return iter(self._table.values(self._key()))

    def removeKey(self, key: tuple[Any, ...]) -> None:
        """Remove a user key."""
        self._table.remove(self._key(), key)

    def clear(self) -> None:
        """Remove the current key's whole map."""
        self._table.clear(self._key())


class TieredHandle(StatefulProcessorHandle):
    """Spark's StatefulProcessorHandle API with state kept in an fsstate store.

    Args:
        spark_handle: Spark's real handle (timers are delegated to it).
        store: the partition store (or in-memory store) of this task.
        binding: the shared current-key binding.
    """

    def __init__(
        self, spark_handle: StatefulProcessorHandle, store: AnyStore, binding: KeyBinding
    ) -> None:
        self._spark_handle = spark_handle
        self._store = store
        self._binding = binding
        client = getattr(spark_handle, "_statefulProcessorApiClient", None)
        parse = getattr(client, "_parse_string_schema", None)
        self._ddl_fallback: Callable[[str], StructType] | None = parse
        self._key_schema = self._grouping_key_schema(client)

    @staticmethod
    def _grouping_key_schema(client: Any) -> pa.Schema | None:
        """Arrow schema of Spark's grouping key, when Spark's client exposes it."""
        spark_schema = getattr(client, "key_schema", None)
        if not isinstance(spark_schema, StructType) or not spark_schema.fields:
            return None
        try:
            return to_arrow("<grouping key>", spark_schema)
        except FsStateError:
            return None  # inferred from the first key by the engine

    @property
    def binding(self) -> KeyBinding:
        """The shared current-key binding of this task's state objects."""
        return self._binding

    @property
    def store(self) -> AnyStore:
        """The store behind this handle."""
        return self._store

    def getValueState(
        self, stateName: str, schema: SparkSchema, ttlDurationMs: int | None = None
    ) -> ValueState:
        """Declare (or get) a value state variable; see Spark's StatefulProcessorHandle."""
        value_schema = to_arrow(stateName, schema, self._ddl_fallback)
        table = self._store.value_table(stateName, value_schema, self._key_schema, ttlDurationMs)
        return TieredValueState(self._binding, table, stateName)

    def getListState(
        self, stateName: str, schema: SparkSchema, ttlDurationMs: int | None = None
    ) -> ListState:
        """Declare (or get) a list state variable; see Spark's StatefulProcessorHandle."""
        value_schema = to_arrow(stateName, schema, self._ddl_fallback)
        table = self._store.list_table(stateName, value_schema, self._key_schema, ttlDurationMs)
        return TieredListState(self._binding, table, stateName)

    def getMapState(
        self,
        stateName: str,
        userKeySchema: SparkSchema,
        valueSchema: SparkSchema,
        ttlDurationMs: int | None = None,
    ) -> MapState:
        """Declare (or get) a map state variable; see Spark's StatefulProcessorHandle."""
        user_key_schema = to_arrow(stateName, userKeySchema, self._ddl_fallback)
        value_schema = to_arrow(stateName, valueSchema, self._ddl_fallback)
        table = self._store.map_table(
            stateName, user_key_schema, value_schema, self._key_schema, ttlDurationMs
        )
        return TieredMapState(self._binding, table, stateName)

    def registerTimer(self, expiryTimestampMs: int) -> None:
        """Register a timer for the current key (Spark's timer service)."""
        self._spark_handle.registerTimer(expiryTimestampMs)

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        """Delete a timer of the current key (Spark's timer service)."""
        self._spark_handle.deleteTimer(expiryTimestampMs)

    def listTimers(self) -> Iterator[int]:
        """Timers of the current key (Spark's timer service)."""
        return self._spark_handle.listTimers()

    def deleteIfExists(self, stateName: str) -> None:
        """Drop a state variable and all its data from the fsstate store."""
        self._store.drop_table(stateName)
