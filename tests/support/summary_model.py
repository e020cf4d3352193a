"""A reference model of the row figures of version summaries (:mod:`fsstate.store.summary`).

Tables are plain dicts: value ``{key: expiry}``, map ``{key: {ukey: expiry}}``, list
``{key: [expiry, ...]}`` (values do not matter to the counts). The model counts rows written
since the table's last seal (``pending``: the rows whose last operation was a write), rows the
user removed and rows TTL expiry removed, as the engine defines them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelTable:
    """One table of the model."""

    kind: str
    ttl_ms: int | None
    rows: dict[Any, Any] = field(default_factory=dict)
    pending: set[Any] = field(default_factory=set)  # rows written since the last seal
    updated: int = 0
    removed: int = 0
    expired: int = 0
    next_elem: int = 0

    def count(self) -> int:
        """Live rows."""
        if self.kind == "value":
            return len(self.rows)
        return sum(len(v) for v in self.rows.values())

    def seal(self) -> None:
        """The table sealed: its pending rows count as written."""
        self.updated += len(self.pending)
        self.pending.clear()

    def reset_epoch(self) -> None:
        """A commit: the epoch's tallies start again."""
        self.seal()
        self.updated = self.removed = self.expired = 0

    def put(self, key: Any, ukey: Any, exp: int | None) -> None:
        """A value update, a map put or a list append (``ukey`` ignored for value/list)."""
        if self.kind == "value":
            self.rows[key] = exp
            self.pending.add(key)
        elif self.kind == "map":
            self.rows.setdefault(key, {})[ukey] = exp
            self.pending.add((key, ukey))
        else:
            self.next_elem += 1
            self.rows.setdefault(key, {})[self.next_elem] = exp
            self.pending.add((key, self.next_elem))

    def remove(self, key: Any, ukey: Any = None) -> None:
        """A value clear, a map remove (``ukey``) or clear (None), a list clear."""
        if self.kind == "value":
            if key in self.rows:
                self.removed += 1
                del self.rows[key]
            self.pending.discard(key)
            return
        entries = self.rows.get(key, {})
        doomed = list(entries) if ukey is None or self.kind == "list" else [ukey]
        for u in doomed:
            if u in entries:
                self.removed += 1
                del entries[u]
            self.pending.discard((key, u))
        if not entries:
            self.rows.pop(key, None)

    def expire(self, now: int) -> None:
        """TTL expiry at ``now``."""
        if self.kind == "value":
            for k in [k for k, e in self.rows.items() if e is not None and e <= now]:
                del self.rows[k]
                self.pending.discard(k)
                self.expired += 1
            return
        for k in list(self.rows):
            entries = self.rows[k]
            for u in [u for u, e in entries.items() if e is not None and e <= now]:
                del entries[u]
                self.pending.discard((k, u))
                self.expired += 1
            if not entries:
                del self.rows[k]
