"""Memory and the operating system: bulk builds without the cyclic GC, freed memory handed back.

* :func:`gc_paused`: loading a table's views builds hundreds of thousands of small tuples in one
  go. CPython's cyclic GC runs a young-generation pass every 700 allocations and, as the heap
  grows, full passes over every tracked object; during a bulk load that is 40 % of the time
  (measured on a 200k-key restore: 300 ms with the GC, 180 ms without). The objects built are
  acyclic tuples of keys and values, so pausing the collector loses nothing: reference
  counting frees them, and the next regular collection untracks them.
* :func:`gc_relaxed`: a Spark task of fsstate's (the keyed loop's, an operator stage's) makes
  and keeps alive hundreds of thousands of objects at 500k rows per batch (input rows, views,
  output rows): with CPython's default young-generation threshold (a collection per 700 net
  allocations), the old generation's pending share passes its trigger every few young
  collections and full passes over every tracked object ran ~3 times per task, 2.3-2.5 s of
  a worker's ~30 s in a 12-task run (measured with ``gc.callbacks``). A young collection per
  100,000 net allocations keeps cycles collected (user code may make them) with at most that
  many objects of garbage waiting, and cut those passes to the one PySpark's daemon runs
  after each task.
* :func:`freeze_survivors`: PySpark's daemon runs a full collection after every task of a
  reused worker; each walks every tracked object of the process: the modules' (pyspark,
  pyarrow, pandas, numpy, fsstate: ~85k objects, 25-80 ms a pass on a 2-core machine) and
  the state the worker keeps between tasks (the views of its cached stores: their dicts are
  walked entry by entry). At 200 partitions that was ~500 passes and 41 s of each worker's
  ~70 s over four batches with the modules alone; with the stores of five queries kept (a
  worker holding ~700 idle stores at 200 partitions) a pass grew to ~50 ms, 128 s of the
  busier worker's eight minutes (measured with ``gc.callbacks``). Every fsstate task starts
  (in :func:`task_collector`: fsstate's keyed loop, the flow driver's stage tasks; a
  ``tiered()`` task on PySpark's own loop, from its ``init``) by moving what is alive then
  into the permanent generation, which collections skip: what survived the daemon's last
  collection is what the worker keeps, and the collections during and after the task walk
  only the objects made since. Frozen objects are still freed by reference counting; a
  reference cycle among them that becomes garbage waits for the next thaw: once every
  ``THAW_EVERY_S`` a task starts by thawing everything and collecting the whole process once
  (one full pass a minute instead of one per task), then freezes. A closed store is no such
  cycle (it is freed by reference counting alone, tested).
* :func:`return_memory_to_os`: after a spill, a commit or a compaction round, Arrow's pool
  and glibc's heap keep freed pages; handing them back makes the process's RSS follow what
  the engine holds.

Invariants:

* The collector is re-enabled on exit (also on an exception) only if it was enabled on entry,
  so nested pauses and a user's own ``gc.disable()`` are respected.
* :func:`gc_relaxed` only ever raises the young threshold (a user's higher threshold is kept,
  a threshold of 0, automatic collection off, stays off) and restores the thresholds it found
  on exit. :func:`task_collector` is the two together, what every fsstate Spark task runs in.
* :func:`freeze_survivors` thaws and collects at the first task of a process that starts
  ``THAW_EVERY_S`` or more after its last thaw (a forked child counts from its own first
  task: its pid differs), so a cycle of frozen objects that became garbage waits at most
  until then. Every task runs with what was alive at its start frozen.
* Returning memory never fails: without glibc's ``malloc_trim`` only Arrow's pool is trimmed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the duration of a bulk build."""
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


YOUNG_OBJECTS_MAX = 100_000  # gc_relaxed: net allocations between young collections


@contextlib.contextmanager
def gc_relaxed(young_objects_max: int = YOUNG_OBJECTS_MAX) -> Iterator[None]:
    """Collect the young generation every ``young_objects_max`` net allocations (instead of
    CPython's 700) for the duration of a task that builds many long-lived objects."""
    old = gc.get_threshold()
    if not 0 < old[0] < young_objects_max:
        yield
        return
    gc.set_threshold(young_objects_max, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


THAW_EVERY_S = 60.0  # freeze_survivors: seconds between two thaws of a process (at least)

_THAWED: list[tuple[int, float]] = []  # (pid, monotonic time of its first freeze or last thaw)


def freeze_survivors(thaw_every_s: float = THAW_EVERY_S) -> None:
    """Move every object tracked now into the permanent generation; if the process last
    thawed ``thaw_every_s`` ago or more, first thaw every frozen object and collect the whole
    process once (see the module).

    Args:
        thaw_every_s: seconds between two thaws of this process.
    """
    pid = os.getpid()
    now = time.monotonic()
    if not _THAWED or _THAWED[0][0] != pid:  # this process's first task (a forked child's too)
        _THAWED[:] = [(pid, now)]
    elif now - _THAWED[0][1] >= thaw_every_s:
        _THAWED[:] = [(pid, now)]
        gc.unfreeze()
        gc.collect()  # cycles among what was frozen, garbage since
    gc.freeze()


@contextlib.contextmanager
def task_collector() -> Iterator[None]:
    """The collector settings of one fsstate Spark task: what the process keeps frozen
    (:func:`freeze_survivors`), young collections relaxed for the task (:func:`gc_relaxed`)."""
    freeze_survivors()
    with gc_relaxed():
        yield


def _load_malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    return fn


_malloc_trim = _load_malloc_trim()


def return_memory_to_os() -> None:
    """Hand freed memory back to the OS (Arrow's pool, then glibc's heap), so RSS follows usage."""
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)
