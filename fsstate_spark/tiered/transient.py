"""In-memory state for runs without micro-batches: bounded (batch) input and the driver.

A ``transformWithState`` over a batch DataFrame has no batch id: every grouping key arrives
once, grouped, so state only needs to live while that key is processed (FLIP-140's bounded
mode). On the driver (Spark calls ``init``/``close`` there to collect schemas) and in local
test harnesses there is no TaskContext at all; state then lives in memory for the process.

Invariants:

* Nothing here touches storage: no file is ever written or read.
* With ``per_key=True`` binding a different grouping key drops every table's content first, so
  memory is bounded by the state of one key.
* Values, keys and user keys are validated with the engine's checkers, so bad input raises the
  same typed :mod:`fsstate.errors` as the persistent path, before anything changes.
* TTL durations are validated but nothing expires: processing time does not advance while one
  key of a bounded input is processed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from fsstate import interfaces
from fsstate.errors import StateKindError
from fsstate.format.schema import (
    Checker,
    UserKeyOrder,
    check_ttl,
    infer_key_schema,
    make_checker,
    sort_entries,
)
from fsstate.interfaces import Key, StateKind, Value


class _MemTable(interfaces.KeyedTable):
    """Shared part: checkers and the per-key dict."""

    kind: StateKind

    def __init__(
        self,
        name: str,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None,
        ttl_ms: int | None,
        user_key_schema: pa.Schema | None = None,
    ) -> None:
        check_ttl(name, ttl_ms)
        self.name = name
        self.ttl_ms = ttl_ms
        self.value_schema = value_schema
        self.user_key_schema = user_key_schema
        self._value = make_checker(name, "value", value_schema)
        self._ukey: Checker | None = (
            make_checker(name, "user key", user_key_schema) if user_key_schema is not None else None
        )
        self._key: Checker | None = (
            make_checker(name, "grouping key", key_schema) if key_schema is not None else None
        )
        self.data: dict[Key, Any] = {}

    def _k(self, key: Any) -> Key:
        if self._key is None:
            self._key = make_checker(self.name, "grouping key", infer_key_schema(self.name, key))
        return self._key(key)

    def exists(self, key: Key) -> bool:
        """Whether the key holds state."""
        return bool(self.data.get(self._k(key)))

    def clear(self, key: Key) -> None:
        """Remove the key's state."""
        self.data.pop(self._k(key), None)


class MemValueTable(_MemTable, interfaces.KeyedValueTable):
    """Value state held in a dict."""

    kind = StateKind.VALUE

    def get(self, key: Key) -> Value | None:
        """The key's value or None."""
        out: Value | None = self.data.get(self._k(key))
        return out

    def exists(self, key: Key) -> bool:
        """Whether the key has a value."""
        return self._k(key) in self.data

    def update(self, key: Key, value: Value) -> None:
        """Set the key's value."""
        v = self._value(value)
        self.data[self._k(key)] = v


class MemListTable(_MemTable, interfaces.KeyedListTable):
    """List state held in a dict of lists."""

    kind = StateKind.LIST

    def get(self, key: Key) -> list[Value]:
        """A copy of the key's list."""
        return list(self.data.get(self._k(key), ()))

    def put(self, key: Key, values: Sequence[Value]) -> None:
        """Replace the key's list."""
        checked = [self._value(v) for v in values]
        k = self._k(key)
        if checked:
            self.data[k] = checked
        else:
            self.data.pop(k, None)

    def append(self, key: Key, value: Value) -> None:
        """Append one element."""
        v = self._value(value)
        self.data.setdefault(self._k(key), []).append(v)

    def extend(self, key: Key, values: Sequence[Value]) -> None:
        """Append several elements."""
        checked = [self._value(v) for v in values]
        if checked:
            self.data.setdefault(self._k(key), []).extend(checked)


class MemMapTable(_MemTable, interfaces.KeyedMapTable):
    """Map state held in a dict of dicts, iterated in user-key order (as the engine's)."""

    kind = StateKind.MAP

    user_key_order: UserKeyOrder | None = None

    def _u(self, user_key: Any) -> Key:
        assert self._ukey is not None
        return self._ukey(user_key)

    def get(self, key: Key, user_key: Key) -> Value | None:
        """The value under the user key, or None."""
        m = self.data.get(self._k(key))
        if not m:
            return None
        out: Value | None = m.get(self._u(user_key))
        return out

    def contains(self, key: Key, user_key: Key) -> bool:
        """Whether the user key is present."""
        m: dict[Key, Value] | None = self.data.get(self._k(key))
        return m is not None and self._u(user_key) in m

    def update(self, key: Key, user_key: Key, value: Value) -> None:
        """Set the value under the user key."""
        u, v = self._u(user_key), self._value(value)
        self.data.setdefault(self._k(key), {})[u] = v

    def remove(self, key: Key, user_key: Key) -> None:
        """Remove the user key."""
        k = self._k(key)
        m = self.data.get(k)
        if m is not None:
            m.pop(self._u(user_key), None)
            if not m:
                del self.data[k]

    def _sorted(self, key: Key) -> list[tuple[Key, Value]]:
        items = list(self.data.get(self._k(key), {}).items())
        return sort_entries(items, self.user_key_order)

    def items(self, key: Key) -> Iterator[tuple[Key, Value]]:
        """(user key, value) pairs, in user-key order (the engine's rule)."""
        return iter(self._sorted(key))

    def user_keys(self, key: Key) -> Iterator[Key]:
        """User keys, in the order of :meth:`items`."""
        return iter([u for u, _ in self._sorted(key)])

    def values(self, key: Key) -> Iterator[Value]:
        """Values, in the order of :meth:`items`."""
        return iter([v for _, v in self._sorted(key)])


class TransientStore(interfaces.KeyedStore):
    """A store-shaped object holding state in memory only (see the module docstring).

    Args:
        per_key: drop all state whenever a different grouping key is bound (bounded input).
    """

    def __init__(self, per_key: bool) -> None:
        self.per_key = per_key
        self.version: int | None = None
        self._tables: dict[str, _MemTable] = {}
        self._bound: Key | None = None

    @property
    def dirty(self) -> bool:
        """Always False: nothing here is ever committed."""
        return False

    def bind(self, key: Key) -> None:
        """Note the grouping key about to be processed (drops older keys' state if per_key)."""
        if self.per_key and key != self._bound:
            for t in self._tables.values():
                t.data.clear()
            self._bound = key

    def _declare(self, table: _MemTable) -> Any:
        old = self._tables.get(table.name)
        if old is not None:
            if old.kind != table.kind:
                raise StateKindError(
                    f"state {table.name!r} exists as {old.kind} state, declared now as "
                    f"{table.kind} state; use another name or drop it first (deleteIfExists)"
                )
            table.data = old.data
        self._tables[table.name] = table
        return table

    def value_table(
        self,
        name: str,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
    ) -> MemValueTable:
        """Declare a value table."""
        t: MemValueTable = self._declare(MemValueTable(name, value_schema, key_schema, ttl_ms))
        return t

    def list_table(
        self,
        name: str,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
    ) -> MemListTable:
        """Declare a list table."""
        t: MemListTable = self._declare(MemListTable(name, value_schema, key_schema, ttl_ms))
        return t

    def map_table(
        self,
        name: str,
        user_key_schema: pa.Schema,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
        user_key_order: UserKeyOrder | None = None,
    ) -> MemMapTable:
        """Declare a map table (``user_key_order``: the sort key of its iteration)."""
        table = MemMapTable(name, value_schema, key_schema, ttl_ms, user_key_schema)
        table.user_key_order = user_key_order
        t: MemMapTable = self._declare(table)
        return t

    def drop_table(self, name: str) -> bool:
        """Forget a table."""
        return self._tables.pop(name, None) is not None

    def set_time(self, now_ms: int) -> None:
        """No-op: nothing expires in memory-only mode."""

    def expire(self) -> int:
        """No-op: nothing expires in memory-only mode."""
        return 0

    def close(self) -> None:
        """Drop all state."""
        self._tables.clear()
