"""A plain-dict reference model of a :class:`fsstate.PartitionStore`, for model-based tests.

The model holds, per state table, every *physical* row (expired rows included, until a cleanup
pass removes them) so that it can predict not only what reads return but also what a cleanup
pass removes and what the TTL index must hold:

* value tables: ``key -> (value, expiry)``
* list tables: ``key -> [(value, expiry), ...]`` in append order
* map tables: ``key -> {user key: (value, expiry)}``; reads return entries in natural
  user-key order (ascending field by field, nulls last), whatever the order of writes

``expiry`` is ``now + ttl_ms`` at the time of the write, or None for a table without TTL. A row
is expired iff ``expiry <= now``; expired rows are never returned by reads.

Versions: :meth:`ModelStore.commit` keeps a deep copy of every table per committed version and
keeps only the newest ``retain_versions`` version numbers; :meth:`ModelStore.open` restores one
of them (uncommitted changes are lost), like reopening a store at a version.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from fsstate.format.tombstones import ABSENT, cell_expiry
from fsstate.tables.base import TableBase

Key = tuple[Any, ...]
Value = tuple[Any, ...]

VALUE = "value"
LIST = "list"
MAP = "map"


def is_live(expiry: int | None, now: int) -> bool:
    """Whether a row with ``expiry`` is visible at processing time ``now``."""
    return expiry is None or expiry > now


def _order(key: Key) -> tuple[tuple[int, Any], ...]:
    """A key's place in the stored order: per field the values, then NaN, then null."""
    return tuple(
        (2, 0) if v is None else (1, 0) if isinstance(v, float) and v != v else (0, v) for v in key
    )


def in_range(key: Key, lo: Key, hi: Key) -> bool:
    """``lo <= key < hi`` in the stored order (the range-delete predicate)."""
    return bool(_order(lo) <= _order(key) < _order(hi))


@dataclass
class ModelTable:
    """One state table of the model: its kind, current TTL and physical rows."""

    name: str
    kind: str
    ttl_ms: int | None
    rows: dict[Key, Any] = field(default_factory=dict)

    def expiry(self, now: int) -> int | None:
        """Expiry of a row written now."""
        return None if self.ttl_ms is None else now + self.ttl_ms


class ModelStore:
    """Reference model of one partition store (see the module docstring).

    Args:
        retain_versions: how many committed versions stay restorable.
        now: initial processing time in milliseconds.
    """

    def __init__(self, retain_versions: int, now: int = 0) -> None:
        self.retain_versions = retain_versions
        self.now = now
        self.tables: dict[str, ModelTable] = {}
        self.snapshots: dict[int, dict[str, dict[Key, Any]]] = {}
        self.version: int | None = None

    # -- declaration and time ------------------------------------------------------------------
    def declare(self, name: str, kind: str, ttl_ms: int | None) -> None:
        """Declare a table (or change the TTL of an existing one; rows keep their expiry)."""
        t = self.tables.get(name)
        if t is None:
            self.tables[name] = ModelTable(name, kind, ttl_ms)
        else:
            assert t.kind == kind
            t.ttl_ms = ttl_ms

    def drop(self, name: str) -> None:
        """Drop a table's rows (it stays declared; committed versions keep their copy)."""
        self.tables[name].rows = {}

    def set_time(self, now: int) -> None:
        """Set the processing time."""
        self.now = now

    def _live(self, expiry: int | None) -> bool:
        return is_live(expiry, self.now)

    # -- common --------------------------------------------------------------------------------
    def clear(self, name: str, key: Key) -> None:
        """Remove all state of ``key``."""
        self.tables[name].rows.pop(key, None)

    def exists(self, name: str, key: Key) -> bool:
        """Whether ``key`` holds live state."""
        t = self.tables[name]
        row = t.rows.get(key)
        if row is None:
            return False
        if t.kind == VALUE:
            return self._live(row[1])
        entries = row.values() if t.kind == MAP else row
        return any(self._live(e[1]) for e in entries)

    def keys(self, name: str) -> set[Key]:
        """Grouping keys with live state."""
        return {k for k in self.tables[name].rows if self.exists(name, k)}

    def delete_range(self, name: str, lo: Key, hi: Key) -> None:
        """Remove every grouping key ``k`` with ``lo <= k < hi``."""
        rows = self.tables[name].rows
        for k in [k for k in rows if in_range(k, lo, hi)]:
            del rows[k]

    # -- value state ---------------------------------------------------------------------------
    def value_get(self, name: str, key: Key) -> Value | None:
        """The live value of ``key`` or None."""
        row = self.tables[name].rows.get(key)
        if row is None or not self._live(row[1]):
            return None
        value: Value = row[0]
        return value

    def value_update(self, name: str, key: Key, value: Value) -> None:
        """Set the value of ``key`` (expiry now + ttl)."""
        t = self.tables[name]
        t.rows[key] = (value, t.expiry(self.now))

    # -- list state ----------------------------------------------------------------------------
    def list_get(self, name: str, key: Key) -> list[Value]:
        """Live elements of ``key`` in append order."""
        return [v for v, exp in self.tables[name].rows.get(key, []) if self._live(exp)]

    def list_put(self, name: str, key: Key, values: list[Value]) -> None:
        """Replace the list of ``key``."""
        t = self.tables[name]
        exp = t.expiry(self.now)
        t.rows[key] = [(v, exp) for v in values]

    def list_extend(self, name: str, key: Key, values: list[Value]) -> None:
        """Append elements to the list of ``key`` (append is a one-element extend)."""
        if not values:
            return
        t = self.tables[name]
        exp = t.expiry(self.now)
        t.rows.setdefault(key, []).extend((v, exp) for v in values)

    # -- map state -----------------------------------------------------------------------------
    def map_get(self, name: str, key: Key, ukey: Key) -> Value | None:
        """The live value under ``ukey`` or None."""
        e = self.tables[name].rows.get(key, {}).get(ukey)
        if e is None or not self._live(e[1]):
            return None
        value: Value = e[0]
        return value

    def map_items(self, name: str, key: Key) -> list[tuple[Key, Value]]:
        """Live (user key, value) pairs in natural user-key order (ascending, nulls last)."""
        m = self.tables[name].rows.get(key, {})
        live = [(u, e[0]) for u, e in m.items() if self._live(e[1])]
        return sorted(live, key=lambda kv: [(0, v) if v is not None else (1, 0) for v in kv[0]])

    def map_update(self, name: str, key: Key, ukey: Key, value: Value) -> None:
        """Set the value under ``ukey`` (moves the entry to the end)."""
        t = self.tables[name]
        m = t.rows.setdefault(key, {})
        m.pop(ukey, None)
        m[ukey] = (value, t.expiry(self.now))

    def map_remove(self, name: str, key: Key, ukey: Key) -> None:
        """Remove ``ukey``."""
        m = self.tables[name].rows.get(key)
        if m is not None:
            m.pop(ukey, None)

    # -- TTL -----------------------------------------------------------------------------------
    def expected_ttl_index(self, name: str) -> set[tuple[int, Any]]:
        """The (expiry, entry) pairs the TTL index must hold.

        Value: one per row with an expiry; map: one per (key, user key) with an expiry; list:
        one per grouping key holding the minimum expiry of its elements.
        """
        t = self.tables[name]
        out: set[tuple[int, Any]] = set()
        for k, row in t.rows.items():
            if t.kind == VALUE:
                if row[1] is not None:
                    out.add((row[1], k))
            elif t.kind == MAP:
                out.update((e[1], (k, u)) for u, e in row.items() if e[1] is not None)
            else:
                exps = [e[1] for e in row if e[1] is not None]
                if exps:
                    out.add((min(exps), k))
        return out

    def expiries(self) -> list[tuple[str, Key, int]]:
        """(table, grouping key, expiry) of every row with an expiry, for boundary tests."""
        out: list[tuple[str, Key, int]] = []
        for t in self.tables.values():
            for k, row in t.rows.items():
                if t.kind == VALUE:
                    entries = [row]
                else:
                    entries = list(row.values()) if t.kind == MAP else row
                out.extend((t.name, k, e[1]) for e in entries if e[1] is not None)
        return out

    def rows_with_ttl(self, name: str) -> int:
        """Primary rows carrying an expiry (list: grouping keys with such an element)."""
        t = self.tables[name]
        if t.kind == VALUE:
            return sum(1 for row in t.rows.values() if row[1] is not None)
        if t.kind == MAP:
            return sum(1 for m in t.rows.values() for e in m.values() if e[1] is not None)
        return sum(1 for lst in t.rows.values() if any(e[1] is not None for e in lst))

    def expire(self) -> int:
        """Physically remove every expired row of every table; returns the rows removed."""
        removed = 0
        now = self.now
        for t in self.tables.values():
            for k in list(t.rows):
                row = t.rows[k]
                if t.kind == VALUE:
                    if not is_live(row[1], now):
                        del t.rows[k]
                        removed += 1
                elif t.kind == MAP:
                    for u in [u for u, e in row.items() if not is_live(e[1], now)]:
                        del row[u]
                        removed += 1
                else:
                    keep = [e for e in row if is_live(e[1], now)]
                    removed += len(row) - len(keep)
                    t.rows[k] = keep
        return removed

    # -- versions ------------------------------------------------------------------------------
    def commit(self, version: int) -> None:
        """Snapshot every table as ``version`` and drop versions beyond the retention."""
        self.snapshots[version] = {n: copy.deepcopy(t.rows) for n, t in self.tables.items()}
        self.version = version
        for v in sorted(self.snapshots)[: -self.retain_versions]:
            del self.snapshots[v]

    def retained(self) -> list[int]:
        """Restorable versions, ascending."""
        return sorted(self.snapshots)

    def open(self, version: int) -> None:
        """Restore ``version`` (uncommitted changes are lost)."""
        snap = self.snapshots[version]
        for name, t in self.tables.items():
            t.rows = copy.deepcopy(snap.get(name, {}))
        self.version = version


def engine_rows_with_ttl(table: TableBase) -> int:
    """Rows carrying an expiry across every live key of an engine table (a full scan).

    Value and map state count rows; list state counts keys with any expiring element (its TTL
    index holds one minimum entry per key).
    """
    total = 0
    for k in table.all_keys():
        view = table._view_nocache(k)
        if table.kind == VALUE:
            total += 0 if view is ABSENT or cell_expiry(view) is None else 1
        elif table.kind == MAP:
            total += sum(1 for c in view.values() if cell_expiry(c) is not None)
        else:
            total += 1 if any(e[1] is not None for e in view) else 0
    return total
