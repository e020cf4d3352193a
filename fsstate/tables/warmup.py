"""Bulk loading of a table's views: on the first cold miss, a small table is loaded whole.

A store restored in another worker process (the common case under Spark, where a partition
rarely returns to the same Python worker) would otherwise pay one point lookup per key when
its keys come back one by one; one sequential pass over the runs costs a few microseconds per
row, and a vectorized pass over a value table about 0.3 µs.
:meth:`fsstate.tables.base.TableBase._load` calls :func:`warm_up` once per table, on its first
cold miss, and again after the memory budget evicted its views
(:meth:`~fsstate.tables.base.TableBase.evict_clean`), on the first cold miss at a later store
version: a reclaim in a worker that holds other queries' stores too must not leave a
partition's table to one point lookup per key for the rest of the process (measured: a running
aggregate's task at 500k rows went from ~0.55 to 1.7-2.2 s of CPU after one reclaim), and a
budget too tight for the table must not evict and reload it over and over within one epoch
(at most one whole load per version after an eviction).

Invariants:

* Only tables whose decoded runs fit in a sixteenth of the memory budget are loaded; a larger
  table is left to point lookups and nothing changes.
* Views are authoritative: a key that already has a view keeps it; only keys without one get
  a view, and each loaded view equals what a point lookup of the key would replay.
* The controller's growth counter drops by one per view added, as for a point lookup.
* A table that counts rows (:mod:`fsstate.tables.counts`) gets the sealed count of every view
  loaded.
* The cyclic garbage collector is paused during the load (:func:`fsstate.osmem.gc_paused`).
"""

from __future__ import annotations

from fsstate.format.schema import KIND_VALUE
from fsstate.format.segment import OpRow, gather_key_rows
from fsstate.interfaces import Key
from fsstate.osmem import gc_paused
from fsstate.tables.core import TableCore
from fsstate.tables.counts import view_count
from fsstate.tables.newest import install, newest_values


def warm_up(table: TableCore) -> bool:
    """Load a small table's views whole in one pass (called on its first cold miss).

    Args:
        table: The table; it has sealed runs and got its first cold miss.

    Returns:
        True if the table was loaded, False if it is too large (then nothing changed).
    """
    runs = table.runs
    decoded = sum(r.ref.decoded_bytes if r.ref is not None else r.memory_bytes for r in runs)
    if decoded * 4 > table._ctl.config.memory_limit_bytes // 4:
        return False
    with gc_paused():
        if table.kind == KIND_VALUE and not table.ranges:
            _warm_up_values(table)
        else:
            _warm_up_rows(table)
    return True


def _warm_up_rows(table: TableCore) -> None:
    """Any table: replay every key's rows from one sequential pass over the runs."""
    runs = table.runs
    rows_by_key: dict[Key, list[OpRow]] = {}
    for run in runs:
        for seg in run.segments(table.spec, table.ctx):
            gather_key_rows(seg, rows_by_key)
    views = table._views
    replay = table._replay
    loaded = 0
    sealed = table.sealed_rows if table.counting else None
    for k, rows in rows_by_key.items():
        if k not in views:
            view = views[k] = replay(k, rows)
            loaded += 1
            if sealed is not None:
                sealed[k] = view_count(table.kind, view)
    table._ctl.growth -= loaded


def _warm_up_values(table: TableCore) -> None:
    """Value tables: the newest row of each key, run by run, vectorized
    (:mod:`fsstate.tables.newest`; oldest run first so that newer runs overwrite)."""
    segments = (seg for run in table.runs for seg in run.segments(table.spec, table.ctx))
    install(table, newest_values(segments), overwrite=False)
