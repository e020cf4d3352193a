"""Declaring a partition store's state tables: value, list and map tables by name, the kind and
shape checks, and the allowed schema evolutions.

:class:`TableDeclarations` is the part of :class:`fsstate.store.partition.PartitionStore` that
hands out tables; the store holds the attributes it works on.

Invariants:

* A name is one table: declaring it again with the same shape returns the table loaded (or
  loads it from the store's version); another kind raises
  :class:`fsstate.errors.StateKindError`; another shape is an allowed evolution
  (:mod:`fsstate.format.evolution`: older files projected) or
  :class:`fsstate.errors.SchemaEvolutionError`, and a table with uncommitted changes in its
  old schema is never evolved.
* A table dropped and declared again is a new *incarnation* (the sequence number consumed when
  it was created): none of the dropped table's copies ever match it.
* Every method raises :class:`fsstate.errors.StoreClosedError` on a closed store.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pyarrow as pa

from fsstate.errors import (
    SchemaEvolutionError,
    StateKindError,
    StoreClosedError,
    UnknownStateError,
)
from fsstate.format.evolution import evolve
from fsstate.format.schema import KIND_LIST, KIND_MAP, KIND_VALUE, TableSpec, UserKeyOrder
from fsstate.storage.manifest import TableEntry
from fsstate.store.commit import table_entry
from fsstate.tables import ListTable, MapTable, TableBase, ValueTable
from fsstate.tables.core import StoreHost

__all__ = ["TableDeclarations"]


class TableDeclarations:
    """The tables of a store, by name (see the module docstring)."""

    _closed: bool
    _dropped: bool
    _tables: dict[str, TableBase]
    _entries: dict[str, TableEntry]
    next_seq: int
    now_ms: int
    store_dir: str
    summaries: Any

    def _host(self) -> StoreHost:
        """This store as its tables see it (the store is one: :mod:`fsstate.store.partition`)."""
        return cast("StoreHost", self)

    def check_open(self) -> None:
        """Raise :class:`fsstate.errors.StoreClosedError` if the store was closed."""
        if self._closed:
            raise StoreClosedError(
                f"store {self.store_dir} is closed; open it again with PartitionStore.open"
            )

    def _declare(self, spec: TableSpec) -> TableBase:
        self.check_open()
        existing = self._tables.get(spec.name)
        old_spec = existing.spec if existing else None
        entry = self._entries.get(spec.name)
        if old_spec is None and entry is not None:
            old_spec = entry.spec
        if old_spec is not None:
            if old_spec.kind != spec.kind:
                raise StateKindError(
                    f"state {spec.name!r} exists as {old_spec.kind} state, declared now as "
                    f"{spec.kind} state; use another name or drop it first (deleteIfExists)"
                )
            evolved = (
                None
                if old_spec.same_shape(spec)
                else evolve(spec.name, old_spec, spec, self.next_seq)
            )
            if evolved is not None:  # an allowed change (fsstate.format.evolution)
                spec = evolved  # older files are projected to it
                if existing is not None:
                    entry = self._unload(existing, spec)
                    existing = None
                elif entry is not None:
                    entry = dataclasses.replace(entry, spec=spec)
        if existing is None:
            if entry is None:
                seq = self.next_seq  # a new incarnation: a dropped table's copies never match
                self.next_seq = seq + 1
                entry = TableEntry(spec, incarnation=seq)
            elif spec.key_schema is not None and entry.spec.key_schema is None:
                removed = entry.spec.removed_fields
                entry = dataclasses.replace(
                    entry, spec=dataclasses.replace(spec, removed_fields=removed)
                )
            if spec.kind == KIND_VALUE:
                existing = ValueTable(self._host(), entry)
            elif spec.kind == KIND_LIST:
                existing = ListTable(self._host(), entry)
            else:
                existing = MapTable(self._host(), entry)
            existing.now_ms = self.now_ms
            self.summaries.start_table(existing, len(entry.runs))
            self._tables[spec.name] = existing
            self._entries.pop(spec.name, None)
        if existing.ttl_ms != spec.ttl_ms:
            existing.ttl_ms = spec.ttl_ms
            existing.spec = dataclasses.replace(existing.spec, ttl_ms=spec.ttl_ms)
        return existing

    def _unload(self, t: TableBase, spec: TableSpec) -> TableEntry:
        """Drop the loaded table ``t`` and return its committed state as an entry of
        ``spec`` (its schema evolved: it is loaded again, its files projected)."""
        if t.dirty or (t.ttl_loaded and t.ttl_index().dirty):
            raise SchemaEvolutionError(
                f"state {spec.name!r} has uncommitted changes in its old schema; commit them "
                "before declaring it with the new schema"
            )
        entry = table_entry(t, spec, list(t.ttl_refs))
        t.release_all()
        del self._tables[spec.name]
        return entry

    def value_table(
        self,
        name: str,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
    ) -> ValueTable:
        """Declare (or get) a value state table; see :class:`fsstate.interfaces.ValueTableAPI`."""
        t = self._declare(TableSpec(name, KIND_VALUE, value_schema, key_schema, None, ttl_ms))
        assert isinstance(t, ValueTable)
        return t

    def list_table(
        self,
        name: str,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
    ) -> ListTable:
        """Declare (or get) a list state table; see :class:`fsstate.interfaces.ListTableAPI`."""
        t = self._declare(TableSpec(name, KIND_LIST, value_schema, key_schema, None, ttl_ms))
        assert isinstance(t, ListTable)
        return t

    def map_table(
        self,
        name: str,
        user_key_schema: pa.Schema,
        value_schema: pa.Schema,
        key_schema: pa.Schema | None = None,
        ttl_ms: int | None = None,
        user_key_order: UserKeyOrder | None = None,
    ) -> MapTable:
        """Declare (or get) a map state table; see :class:`fsstate.interfaces.MapTableAPI`.

        ``user_key_order`` is the sort key of its entries' iteration (None: natural user-key
        order); it is not stored, every declaration sets it.
        """
        spec = TableSpec(name, KIND_MAP, value_schema, key_schema, user_key_schema, ttl_ms)
        t = self._declare(spec)
        assert isinstance(t, MapTable)
        t.user_key_order = user_key_order
        return t

    def table(self, name: str) -> TableBase:
        """An existing table by name.

        Raises:
            UnknownStateError: no state of that name was declared or stored.
        """
        self.check_open()
        t = self._tables.get(name)
        if t is not None:
            return t
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownStateError(
                f"state {name!r} is unknown in store {self.store_dir} (known: "
                f"{sorted(self.table_names())}); declare it first with value_table / "
                "list_table / map_table"
            )
        return self._declare(entry.spec)

    def table_names(self) -> list[str]:
        """Names of every declared or stored table."""
        return sorted({*self._tables, *self._entries})

    def drop_table(self, name: str) -> bool:
        """Delete a state table (its files go once no retained version needs them)."""
        self.check_open()
        found = self._tables.pop(name, None) is not None
        found = self._entries.pop(name, None) is not None or found
        self._dropped = self._dropped or found
        return found
