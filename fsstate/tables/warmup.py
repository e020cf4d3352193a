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

A value table whose newest run holds a row of every live key (a running aggregate that
rewrites every key each batch, the shape where runs pile up between compactions: up to
``compaction_max_runs + 1`` runs, each holding every key) loads that run only: the older runs
hold nothing a view needs, and reading them all made a reopened store's first batch cost grow
with the run count. The table is then not *complete* (:attr:`fsstate.tables.base.TableBase.
complete`): a key without a view still takes a point lookup, so the live-row count that makes
the choice (``live_rows``, :mod:`fsstate.tables.counts`) is a cost hint, never a source of
answers.

Invariants:

* Only tables whose decoded runs fit in a sixteenth of the memory budget are loaded; a larger
  table is left to point lookups and nothing changes.
* A load that leaves any key with rows and no view (the newest run only) does not mark the
  table complete.
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
from fsstate.format.tombstones import ABSENT
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
        True if every key with rows now has a view (the table is complete); False if it is too
        large (then nothing changed) or only its newest run was loaded (module docstring).
    """
    runs = table.runs
    decoded = sum(r.ref.decoded_bytes if r.ref is not None else r.memory_bytes for r in runs)
    if decoded * 4 > table._ctl.config.memory_limit_bytes // 4:
        return False
    with gc_paused():
        if table.kind == KIND_VALUE and not table.ranges:
            return _warm_up_values(table)
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


def _warm_up_values(table: TableCore) -> bool:
    """Value tables: the newest row of each key, run by run, vectorized
    (:mod:`fsstate.tables.newest`; oldest run first so that newer runs overwrite); only the
    newest run when its live keys are as many as the table's live rows. True if whole."""
    runs = older = table.runs
    live_rows = table.live_rows
    newest = None
    if len(runs) > 1 and live_rows is not None and not table.uncounted:
        newest = newest_values(runs[-1].segments(table.spec, table.ctx))
        dead = {k for k in newest.absent if newest.views.get(k) is ABSENT}
        if len(newest.views) - len(dead) >= live_rows:  # every live key's newest row is here
            install(table, newest, overwrite=False)
            return False
        older = runs[:-1]  # the newest run is read once: its rows go over the older runs'
    out = newest_values(seg for run in older for seg in run.segments(table.spec, table.ctx))
    if newest is not None:
        out.views.update(newest.views)
        out.absent.extend(newest.absent)
    install(table, out, overwrite=False)
    return True
