"""The processors of the Spark benchmarks (Spark's Python workers import them from here).

Every processor emits one row ``(k, n)`` per key; :class:`BenchProcessor` subclasses differ in
the state calls of :meth:`BenchProcessor.touch`. :func:`recorder` wraps a variant's processor
(:class:`Recorder` for native state, :class:`TieredRecorder` for ``tiered(...)``) and appends
one JSON line of figures per task.

Invariants:

* Nothing here runs on the driver but ``__init__`` and pickling: every figure is measured in
  the worker that ran the task and written to ``<stats_dir>/<pid>.jsonl``.
* The processors' state calls are the same in both API flavours (pandas, Row); only reading
  the input and building the output row differ.
* A ``tiered()`` variant's processor, as Spark sees it, is a ``TieredProcessor``
  (:class:`TieredRecorder`), so fsstate's keyed loop runs it wherever Spark's Python worker is
  fsstate's (``spark.python.worker.module``, in ``conf/spark-defaults.conf``), as it runs any
  ``tiered()`` processor; each stats line names the loop that ran the task.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from fsstate_spark.tiered import TieredProcessor

FLAVOURS = ("pandas", "row")
API = {"pandas": "transformWithStateInPandas", "row": "transformWithState (Row)"}
INPUT_SCHEMA = "k STRING, v BIGINT"
OUTPUT_SCHEMA = "k STRING, n BIGINT"


# -- processors (imported by Spark's Python workers as bench.harness.spark_procs) -----------------
class BenchProcessor(StatefulProcessor):
    """Base of the benchmark processors: one output row ``(k, n)`` per key, instrumented.

    Subclasses declare their state in :meth:`declare` and do their state calls in
    :meth:`touch`; ``flavour`` only changes how :meth:`handleInputRows` reads the key's input
    and builds its output row (pandas DataFrames or ``Row`` objects). The time spent in
    :meth:`touch` is accumulated per task; :class:`Recorder`, which Spark runs around the
    processor (or around ``tiered(processor)``), writes it with the rest of the task's stats.

    Args:
        tag: name of the variant (flavour included), copied into the stats lines.
        stats_dir: where stats lines go (None: no stats).
        flavour: ``"pandas"`` (``transformWithStateInPandas``) or ``"row"``
            (``transformWithState``).
    """

    calls_per_key = 0

    def __init__(
        self, tag: str = "", stats_dir: str | None = None, flavour: str = "pandas"
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {FLAVOURS}, got {flavour!r}")
        self.tag = tag
        self.stats_dir = stats_dir
        self.flavour = flavour
        self._state_s = 0.0
        self._keys = 0
        self._store = ""

    def declare(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variables (none here)."""

    def touch(self, n: int, v: int) -> int:
        """Do the state calls for one key with ``n`` new rows, first value ``v``; returns n."""
        return n

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare state and reset the counters of this task."""
        self._state_s = 0.0
        self._keys = 0
        self._store = _store_outcome(handle)
        self.declare(handle)

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
        """Count the key's rows, do the state calls, emit ``(k, n)`` (in the flavour's type)."""
        row = self.flavour == "row"
        n, v = _count_rows(rows) if row else _count_frames(rows)
        t0 = time.perf_counter()
        out = self.touch(n, v)
        self._state_s += time.perf_counter() - t0
        self._keys += 1
        if row:
            yield Row(k=key[0], n=out)
        else:
            yield pd.DataFrame({"k": [key[0]], "n": [out]})

    def close(self) -> None:
        """Nothing: :class:`Recorder` writes the task's stats after the whole close."""


class TaskRecord:
    """One task's stats line (see :class:`Recorder`), measured around the calls of whichever
    processor Spark runs: :meth:`begin` / :meth:`initialized` around its ``init``,
    :meth:`close` around its ``close``."""

    def __init__(self, bench: BenchProcessor) -> None:
        self.bench = bench
        self._t0 = self._init_s = self._acquire_s = 0.0
        self._acq0 = 0.0
        self._requests0: dict[str, int] = {}

    def begin(self) -> None:
        """Before the processor's ``init``."""
        self._acq0, _ = _store_times()
        self._requests0 = _storage_requests()
        self._t0 = time.perf_counter()

    def initialized(self) -> None:
        """After the processor's ``init``."""
        self._init_s = time.perf_counter() - self._t0
        self._acquire_s = _store_times()[0] - self._acq0

    def close(self, close: Callable[[], None], loop: Callable[[], str]) -> None:
        """Run ``close`` (the tiered commit included), then append the stats line; ``loop``
        says which keyed loop ran the task (``fsstate`` or ``pyspark``)."""
        _, fin0 = _store_times()
        t0 = time.perf_counter()
        try:
            close()
        finally:
            close_s = time.perf_counter() - t0
            fin1 = _store_times()[1]
            self._write(close_s, fin1 - fin0, loop())

    def _write(self, close_s: float, finish_s: float, loop: str) -> None:
        b = self.bench
        tc = TaskContext.get()
        if b.stats_dir is None or tc is None:
            return
        line = {
            "tag": b.tag,
            "batch": int(tc.getLocalProperty("streaming.sql.batchId") or -1),
            "partition": tc.partitionId(),
            "keys": b._keys,
            "state_s": b._state_s,
            "acquire_s": self._acquire_s,
            **_request_deltas(self._requests0),
            "finish_s": finish_s,
            "init_s": self._init_s,
            "close_s": close_s,
            "task_s": time.perf_counter() - self._t0,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "pid": os.getpid(),
            "store": b._store,
            "loop": loop,
        }
        with open(os.path.join(b.stats_dir, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")


class Recorder(StatefulProcessor):
    """What Spark runs for a variant without tiered state: its processor (``inner``, a
    :class:`BenchProcessor`) and, after the task's close, one JSON stats line per task appended
    to ``<stats_dir>/<pid>.jsonl`` (:func:`recorder` picks :class:`TieredRecorder` for
    ``tiered()``).

    The line holds the task's own figures, measured in the worker around the inner calls:
    ``state_s`` (time in :meth:`BenchProcessor.touch`), ``keys``, ``acquire_s`` and
    ``finish_s`` (this task's share of the adapter's cumulative per-process counters: getting
    the tiered store in ``init`` and TTL cleanup + commit + hand-back in ``close``; 0 for
    native state), ``init_s`` / ``close_s`` (wall time of the inner ``init`` / ``close``),
    ``store`` (``hit``, ``caught_up`` or ``restored``; ``""`` for native state), ``requests``
    and ``requests_by_kind`` (the storage requests the process made from ``init`` to the end of
    ``close``: get, put, head, list, delete), the process's peak RSS after the commit and
    ``loop``, the keyed loop that ran the task (``fsstate``: fsstate's worker; ``pyspark``:
    PySpark's own). A task runs in one process from ``init`` to ``close``, so the counter
    deltas are its own whichever process it runs in. Driver-side calls, without a
    TaskContext, record nothing.
    """

    def __init__(self, inner: StatefulProcessor, bench: BenchProcessor) -> None:
        self.inner = inner
        self.bench = bench
        self.record = TaskRecord(bench)

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Run the inner init, timing it and the store acquisition inside it."""
        self.record.begin()
        self.inner.init(handle)
        self.record.initialized()

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        """The inner processor's output, as is."""
        return self.inner.handleInputRows(key, rows, timerValues)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo: Any) -> Any:
        """The inner processor's output, as is."""
        return self.inner.handleExpiredTimer(key, timerValues, expiredTimerInfo)

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:
        """Delegated."""
        self.inner.handleInitialState(key, initialState, timerValues)

    def close(self) -> None:
        """Run the inner close, then append the stats line."""
        self.record.close(self.inner.close, lambda: "pyspark")


class TieredRecorder(TieredProcessor):
    """:class:`Recorder` for ``tiered(bench)``: a :class:`TieredProcessor` itself (the same
    processor and settings), so that fsstate's worker, which runs its keyed loop for
    ``tiered()`` processors only, runs it here as for any ``tiered()`` query; ``init`` (the
    store's acquisition included) and ``close`` (the commit included) are timed as
    :class:`Recorder` times them."""

    def __init__(self, inner: TieredProcessor, bench: BenchProcessor) -> None:
        super().__init__(inner.processor, inner.config)
        self.bench = bench
        self.record = TaskRecord(bench)

    def init(self, handle: StatefulProcessorHandle) -> None:
        """The tiered init (opens the store, then the processor's init), timed."""
        self.record.begin()
        super().init(handle)
        self.record.initialized()

    def close(self) -> None:
        """The tiered close (the processor's close, then the commit), then the stats line."""
        self.record.close(super().close, lambda: "fsstate" if self._fast else "pyspark")


def recorder(proc: StatefulProcessor, bench: BenchProcessor) -> StatefulProcessor:
    """What Spark runs for a variant: :class:`TieredRecorder` for ``tiered()``, else
    :class:`Recorder`."""
    if isinstance(proc, TieredProcessor):
        return TieredRecorder(proc, bench)
    return Recorder(proc, bench)


def _store_outcome(handle: StatefulProcessorHandle) -> str:
    """How a tiered task got its store: ``hit``, ``caught_up`` or ``restored`` ("" if native)."""
    from fsstate_spark.state.handles import TieredHandle
    from fsstate_spark.tiered.lifecycle import store_cache

    return store_cache().last_outcome if isinstance(handle, TieredHandle) else ""


def _storage_requests() -> dict[str, int]:
    """Requests this process made to tiered state's storage so far, by kind (get, put, head,
    list, delete; all 0 without tiered state)."""
    from fsstate_spark.runtime import storage_request_counts

    return storage_request_counts()


def _request_deltas(before: dict[str, int]) -> dict[str, Any]:
    """``requests`` (all kinds) and ``requests_by_kind`` made since ``before``."""
    now = _storage_requests()
    by_kind = {k: v - before.get(k, 0) for k, v in now.items()}
    return {"requests": sum(by_kind.values()), "requests_by_kind": by_kind}


def _store_times() -> tuple[float, float]:
    """This process's cumulative seconds getting and finishing (committing) tiered stores."""
    from fsstate_spark.tiered.lifecycle import store_cache

    cache = store_cache()
    return cache.acquire_s, cache.finish_s


def _count_frames(frames: Iterator[pd.DataFrame]) -> tuple[int, int]:
    """Rows and first ``v`` of a key's input as pandas DataFrames."""
    n = 0
    v = 0
    for pdf in frames:
        if n == 0:
            first: Any = pdf["v"].iat[0]
            v = int(first)
        n += len(pdf)
    return n, v


def _count_rows(rows: Iterator[Row]) -> tuple[int, int]:
    """Rows and first ``v`` of a key's input as ``Row`` objects."""
    n = 0
    v = 0
    for r in rows:
        if n == 0:
            v = int(r.v)
        n += 1
    return n, v


class NoState(BenchProcessor):
    """No state at all: the framework's cost."""

    calls_per_key = 0


class ValueCount(BenchProcessor):
    """Running count in a ValueState: ``get`` + ``update``."""

    calls_per_key = 2

    def declare(self, handle: StatefulProcessorHandle) -> None:
        """One value state."""
        self.count = handle.getValueState("count", "c BIGINT")

    def touch(self, n: int, v: int) -> int:
        """count += n."""
        old = self.count.get()
        total = (old[0] if old else 0) + n
        self.count.update((total,))
        return total


class ListAppend(BenchProcessor):
    """One ``ListState.appendValue`` per key (the lists grow every micro-batch)."""

    calls_per_key = 1

    def declare(self, handle: StatefulProcessorHandle) -> None:
        """One list state."""
        self.items = handle.getListState("items", "v BIGINT")

    def touch(self, n: int, v: int) -> int:
        """Append the key's first value."""
        self.items.appendValue((v,))
        return n


class MapUpdate(BenchProcessor):
    """``MapState.getValue`` + ``updateValue`` on one of 8 map keys."""

    calls_per_key = 2

    def declare(self, handle: StatefulProcessorHandle) -> None:
        """One map state."""
        self.hist = handle.getMapState("hist", "bucket INT", "n BIGINT")

    def touch(self, n: int, v: int) -> int:
        """hist[v % 8] += n."""
        bucket = (v % 8,)
        cur = self.hist.getValue(bucket)
        total = (cur[0] if cur else 0) + n
        self.hist.updateValue(bucket, (total,))
        return total


class ValueX3(BenchProcessor):
    """Three ValueStates, ``get`` + ``update`` each: 6 state calls per key."""

    calls_per_key = 6

    def declare(self, handle: StatefulProcessorHandle) -> None:
        """Three value states."""
        self.a = handle.getValueState("a", "c BIGINT")
        self.b = handle.getValueState("b", "c BIGINT")
        self.c = handle.getValueState("c", "c BIGINT")

    def touch(self, n: int, v: int) -> int:
        """Three running sums."""
        a = self.a.get()
        self.a.update(((a[0] if a else 0) + n,))
        b = self.b.get()
        self.b.update(((b[0] if b else 0) + v,))
        c = self.c.get()
        total = (c[0] if c else 0) + 1
        self.c.update((total,))
        return total


class BigValue(BenchProcessor):
    """A ~``value_bytes`` string per key in a ValueState (``get`` + ``update``)."""

    calls_per_key = 2
    value_bytes = 2048

    def declare(self, handle: StatefulProcessorHandle) -> None:
        """One value state with a large string."""
        self.blob = handle.getValueState("blob", "n BIGINT, s STRING")

    def touch(self, n: int, v: int) -> int:
        """Rewrite the key's blob (random hex: Parquet cannot compress it away)."""
        old = self.blob.get()
        count = (old[0] if old else 0) + n
        self.blob.update((count, os.urandom(self.value_bytes // 2 - 8).hex()))
        return count


KINDS: dict[str, type[BenchProcessor]] = {
    "no_state": NoState,
    "value_count": ValueCount,
    "list_append": ListAppend,
    "map_update": MapUpdate,
    "value_x3": ValueX3,
}
