"""Live-row counting of a table: what a version summary's ``rows_*`` figures are made of.

A table that counts (``StoreConfig.record_summary``) keeps ``live_rows``, its live rows as of
its last seal (value: 1 per key, list: 1 per element, map: 1 per entry; rows TTL expiry has not
removed yet included), and ``sealed_rows``, the same count per key for the keys whose views are
complete, taken where the prior state is known anyway: when a view is loaded or completed, and
at each seal for the keys it sealed. A seal adds, per dirty key once, the view's count minus
the key's sealed count (:func:`count_dirty`; a value table's in C-level passes over the dirty
keys, no per-key Python); a key without one (a blind write: a value set on a key that was never
loaded) is looked up in the runs once, in one batch per seal. Partial list
views (blind appends) add their new elements. Batched writes, range deletes, catch-up and
adoption keep the count in :mod:`fsstate.tables.base` and :mod:`fsstate.tables.batched`.

:class:`RowTally` counts the epoch's events: rows written (per seal), removed by the user (at
the operation, where the table knows the row), removed by TTL expiry.

Invariants:

* ``sealed_rows`` only holds keys with a complete view, and each entry equals the key's live
  rows in the table's runs (the sealed state).
* Counting is done per seal and per operation outside the key-cursor accessors: the hot paths
  of :mod:`fsstate.tables.cursor` are unchanged.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import eq, is_, not_
from typing import Any

from fsstate.format.schema import KIND_LIST, KIND_MAP, KIND_VALUE
from fsstate.format.tombstones import ABSENT
from fsstate.interfaces import Key

NEVER_MS = -(2**62)  # a clock at which nothing has expired: physical live rows
_BLIND = 1 << 48  # weighs a key without a sealed count in one summing pass (> any key count)


class RowTally:
    """Rows an epoch wrote, removed (user) and expired (TTL)."""

    __slots__ = ("expired", "removed", "updated")

    def __init__(self) -> None:
        self.updated = 0
        self.removed = 0
        self.expired = 0

    def reset(self) -> None:
        """A new epoch."""
        self.updated = self.removed = self.expired = 0


def view_count(kind: str, view: Any) -> int:
    """Live rows of a complete view (expired rows not yet removed included)."""
    if kind == KIND_VALUE:
        return 0 if view is ABSENT else 1
    return len(view)


def count_dirty(
    kind: str,
    views: dict[Key, Any],
    dirty: dict[Key, Any],
    partial: set[Key],
    sealed: dict[Key, int],
    states: list[Any] | None = None,
) -> tuple[int, int, dict[Key, int], list[Key]]:
    """What sealing ``dirty`` changes: (live-row delta, counting the keys without a sealed
    count as if they had none in the runs; rows written; the new sealed counts; those keys,
    whose runs' count the caller subtracts from the delta); nothing is changed. ``states``:
    a value table's views of the dirty keys in ``dirty``'s order, if the caller has them."""
    if kind == KIND_VALUE:
        if states is None:
            states = list(map(views.__getitem__, dirty))
        return _count_values(states, dirty, sealed)
    delta = written = 0
    after: dict[Key, int] = {}
    blind: list[Key] = []
    for k, (_clear, touched) in dirty.items():
        view = views[k]
        if kind == KIND_MAP:
            puts = sum(1 for u in touched if u in view)
        else:
            assert kind == KIND_LIST
            present = {e[2] for e in view} if touched else set()
            puts = sum(1 for e, s in touched.items() if e == s and e in present)
        written += puts
        if partial and k in partial:  # blind appends only: every put is a new element
            delta += puts
            continue
        n = len(view)
        before = sealed.get(k)
        if before is None:
            blind.append(k)
            before = 0
        delta += n - before
        after[k] = n
    return delta, written, after, blind


def _count_values(
    states: list[Any], dirty: dict[Key, Any], sealed: dict[Key, int]
) -> tuple[int, int, dict[Key, int], list[Key]]:
    """:func:`count_dirty` of a value table (``states``: the dirty keys' views, in order)
    without a per-key Python loop: C-level passes, and only one of them looks keys up (in
    the sealed counts, where a key without one weighs ``_BLIND``); the keys whose count
    changes are picked from that pass's list. Without blind or removed keys only the counts
    that change are rebuilt (keys new to the runs: none in a running aggregate's steady
    state). Each pass that hashes a key costs a few cache misses per key (a fresh key tuple
    against the stored one): at 50,000 dirty keys, ~20 ms a pass."""
    n = len(dirty)
    n_gone = states.count(ABSENT)
    written = n - n_gone
    counts = list(map(sealed.get, dirty, repeat(_BLIND)))
    blind_n, before = divmod(sum(counts), _BLIND)
    blind = list(compress(dirty, map(eq, counts, repeat(_BLIND)))) if blind_n else []
    after: dict[Key, int] = {}
    if not blind_n and not n_gone:
        if before != n:  # only the keys absent from the runs change (to 1)
            after = dict.fromkeys(compress(dirty, map(not_, counts)), 1)
    else:
        after = dict.fromkeys(dirty, 1)
        if n_gone:
            after.update(dict.fromkeys(compress(dirty, map(is_, states, repeat(ABSENT))), 0))
    return written - before, written, after, blind
