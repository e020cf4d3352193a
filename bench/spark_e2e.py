"""End-to-end Spark benchmarks: the same processors with Spark's native state and with
``fsstate_spark.tiered(...)``, side by side in one local SparkSession.

Workloads (one output row per key, ``noop`` sink):

* ``no_state``: no state at all (the framework's cost, the limit for any state backend);
* ``value_count``: running count in a ValueState (``get`` + ``update``: 2 state calls/key);
* ``list_append``: one ``ListState.appendValue`` per key (1 call; the lists grow every batch);
* ``map_update``: ``MapState.getValue`` + ``updateValue`` on one of 8 map keys (2 calls);
* ``value_x3``: three ValueStates, ``get`` + ``update`` each (6 calls/key).

Each stateful workload runs twice, with Spark's handles (``native``, RocksDB provider) and
through ``tiered(...)``, and each workload (``no_state`` included) in two flavours of the API:

* ``pandas``: ``groupBy("k").transformWithStateInPandas(...)``; ``handleInputRows`` gets an
  iterator of pandas DataFrames and yields DataFrames (result names without a marker, e.g.
  ``20k value_count tiered/native``);
* ``row``: ``groupBy("k").transformWithState(...)``; ``handleInputRows`` gets an iterator of
  ``pyspark.sql.Row`` and yields ``Row`` objects (result names with ``row``, e.g.
  ``20k row value_count tiered/native``).

Both flavours share the processors' state calls (:meth:`BenchProcessor.touch`); only the
reading of the input and the output row differ. Each flavour is compared against the
``no_state`` query of the same flavour (the framework's cost differs between them). The
throughput goals apply to ``value_count`` in both flavours, the per-call goal to every
workload of 2+ state calls per key.

Sizes: full mode runs every workload at 20k keys and ``no_state`` + ``value_count`` at 200k
keys, each in both flavours, with 9 measured batches (the fewest for which the order-statistic
interval of the median reaches 95 %); quick mode runs ``no_state`` + ``value_count`` at 20k
keys in both flavours, with 3. Inputs: one Parquet file per micro-batch in a directory every
query reads (``maxFilesPerTrigger=1``). Micro-batch 0 holds every key once (it loads the state
and warms up; it is not used in figures); micro-batches 1.. hold ``rows_per_batch`` distinct
keys drawn at random from the key space, one row each. Micro-batch 1 is not measured either.
Spark hands a partition to whichever Python worker is free, and a worker's first batch of a
partition it has not served yet restores the store (once per worker and partition, for the
life of the query); such tasks still happen in measured batches, are counted in every figure
below, and their number is given in the notes.

Interleaving: the suite runs in rounds. Round ``r`` writes micro-batch ``r`` and then runs
every variant's query (own checkpoint; ``trigger(availableNow=True)``) until it has processed
that one file, rotating the order of the variants from round to round. So the variants see the
same machine, in the same minute, batch by batch; ratios are computed per round (paired) and
their median reported, with the spread (:func:`bench.common.median_ci`). The flavours
alternate in that order (pandas, row, pandas, ...), so every query follows one of the other
flavour and a cost of switching weighs on all alike.

Every query runs its processor inside :class:`Recorder`, which writes one stats line per task
(time in the state calls, keys, and for tiered state the task's own time getting and committing
its store, measured in the worker around the adapter's calls).

Figures, per key-space size and flavour:

* rows/s per micro-batch: input rows over Spark's ``triggerExecution`` duration of the batch
  (median over the measured batches);
* cost per state call, µs: (batch wall time of the variant - of ``no_state`` of the same
  flavour) / (state calls of the batch), per round, median;
* per-call native/tiered (the goal, for workloads of 2+ calls per key): per measured batch,
  native's in-worker µs per call over all the batch's tasks divided by tiered's over all the
  batch's tasks (the same batches, partitions and keys on both sides; restored stores
  included); gross: the timer around the calls is in both, nothing subtracted; median of the
  per-batch ratios;
* µs/call tiered all-in, per measured batch: (state-call time + getting the stores + committing
  them, summed over the batch's tiered tasks) / state calls of the batch; native's in-worker
  figure has no such part in the worker (Spark commits its store in the JVM);
* µs/call tiered first visit: the all-in figure of each measured task that restored its store;
* fsstate ms per batch (tiered): the all-in numerator, and its share of the batch's wall time,
  which the end-to-end ratios cannot resolve from noise;
* ratios tiered/native and tiered/no_state of throughput. The notes of tiered/native give its
  ceiling, no_state/native: what state at no cost at all would reach, so a goal above it
  cannot be met by any backend on that run.

A second part (full mode, pandas flavour only) runs a memory-bounded query:
``tiered(..., memory_limit=...)`` with value state of ~2 KiB per key, at least 10x one worker's
budget in total, and reports throughput and the Python workers' peak RSS (``ru_maxrss`` after
each task's commit), and the same query with the ``no_state`` processor; each query from a
fresh SparkSession so its workers start clean. Goals: the tiered workers' peak RSS within the
budget + 200 MiB, and their peak RSS minus the no-state workers' within the budget + 64 MiB.
The notes give the state per worker (by partition, and what each worker's stores served).

The JVM's and the Python workers' stderr go to ``bench/results/tmp/spark_e2e-jvm.log``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from bench.common import REPO_ROOT, BenchContext, Result, SuiteSkipped, median, spread_text
from bench.datagen import key_strings

SUITE = "spark_e2e"
FLAVOURS = ("pandas", "row")
API = {"pandas": "transformWithStateInPandas", "row": "transformWithState (Row)"}
INPUT_SCHEMA = "k STRING, v BIGINT"
OUTPUT_SCHEMA = "k STRING, n BIGINT"
MIB = 1024 * 1024

# goals (see docs/benchmarks.md)
GOAL_PER_CALL_FACTOR = 50.0  # native µs per state call / tiered µs per state call
GOAL_VS_NO_STATE = 0.95  # tiered throughput / no-state throughput (within 5 %)
GOAL_VS_NATIVE = 1.3  # tiered throughput / native throughput at 2 state calls per key
RSS_SLACK_MIB = 200.0  # worker peak RSS <= memory_limit + this
RSS_NET_SLACK_MIB = 64.0  # worker peak RSS - no-state worker peak RSS <= memory_limit + this


# -- processors (imported by Spark's Python workers as bench.spark_e2e) ------------------------
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


class Recorder(StatefulProcessor):
    """What Spark runs: a variant's processor (``inner``: a :class:`BenchProcessor`, or
    ``tiered(bench)``) and, after the task's close, one JSON stats line per task appended to
    ``<stats_dir>/<pid>.jsonl``.

    The line holds the task's own figures, measured in the worker around the inner calls:
    ``state_s`` (time in :meth:`BenchProcessor.touch`), ``keys``, ``acquire_s`` and
    ``finish_s`` (this task's share of the adapter's cumulative per-process counters: getting
    the tiered store in ``init`` and TTL cleanup + commit + hand-back in ``close``; 0 for
    native state), ``init_s`` / ``close_s`` (wall time of the inner ``init`` / ``close``),
    ``store`` (``hit``, ``caught_up`` or ``restored``; ``""`` for native state) and the
    process's peak RSS after the commit. A task runs in one process from ``init`` to
    ``close``, so the counter deltas are its own whichever process it runs in. Driver-side
    calls, without a TaskContext, record nothing.
    """

    def __init__(self, inner: StatefulProcessor, bench: BenchProcessor) -> None:
        self.inner = inner
        self.bench = bench
        self._t0 = self._init_s = self._acquire_s = 0.0

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Run the inner init, timing it and the store acquisition inside it."""
        acq0, _ = _store_times()
        self._t0 = time.perf_counter()
        self.inner.init(handle)
        self._init_s = time.perf_counter() - self._t0
        self._acquire_s = _store_times()[0] - acq0

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
        """Run the inner close (the tiered commit included), then append the stats line."""
        _, fin0 = _store_times()
        t0 = time.perf_counter()
        try:
            self.inner.close()
        finally:
            close_s = time.perf_counter() - t0
            fin1 = _store_times()[1]
            self._write(close_s, fin1 - fin0)

    def _write(self, close_s: float, finish_s: float) -> None:
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
            "finish_s": finish_s,
            "init_s": self._init_s,
            "close_s": close_s,
            "task_s": time.perf_counter() - self._t0,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "pid": os.getpid(),
            "store": b._store,
        }
        with open(os.path.join(b.stats_dir, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")


def _store_outcome(handle: StatefulProcessorHandle) -> str:
    """How a tiered task got its store: ``hit``, ``caught_up`` or ``restored`` ("" if native)."""
    from fsstate_spark.handles import TieredHandle
    from fsstate_spark.lifecycle import store_cache

    return store_cache().last_outcome if isinstance(handle, TieredHandle) else ""


def _store_times() -> tuple[float, float]:
    """This process's cumulative seconds getting and finishing (committing) tiered stores."""
    from fsstate_spark.lifecycle import store_cache

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


# -- driver side -----------------------------------------------------------------------------------
@dataclass
class Variant:
    """One streaming query of the comparison."""

    kind: str
    mode: str  # "none", "native" or "tiered"
    processor: StatefulProcessor
    checkpoint: Path
    calls_per_key: int
    flavour: str = "pandas"  # "pandas" (transformWithStateInPandas) or "row" (transformWithState)
    wall_ms: dict[int, float] = field(default_factory=dict)  # batch id -> triggerExecution
    rows: dict[int, int] = field(default_factory=dict)
    run_s: list[float] = field(default_factory=list)
    cpu_s: dict[int, float] = field(default_factory=dict)  # batch id -> CPU s of the tree

    @property
    def tag(self) -> str:
        """``flavour/kind/mode``."""
        return _tag(self.flavour, self.kind, self.mode)


def _tag(flavour: str, kind: str, mode: str) -> str:
    return f"{flavour}/{kind}/{mode}"


@dataclass(frozen=True)
class Config:
    """One key-space size.

    Attributes:
        kinds: workloads of the pandas flavour (``no_state`` first: the baseline).
        row_kinds: workloads of the Row flavour (empty: none; ``no_state`` first).
        warm_batches: batches after the load batch that run like the others but are not
            measured (the Python workers meet the partitions they did not load).
    """

    label: str
    keys: int
    rows_per_batch: int
    measured_batches: int
    kinds: tuple[str, ...]
    row_kinds: tuple[str, ...] = ()
    warm_batches: int = 1

    def flavours(self) -> list[tuple[str, tuple[str, ...]]]:
        """``(flavour, kinds)`` of each flavour that runs."""
        return [(f, k) for f, k in (("pandas", self.kinds), ("row", self.row_kinds)) if k]


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point fd 2 at ``path`` while the block runs (processes started in it keep it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _session(ctx: BenchContext, app: str, **overrides: str) -> Any:
    """A local SparkSession from conf/spark-defaults.conf (local[2], no UI)."""
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    try:
        from spark_local import local_session
    finally:
        sys.path.remove(str(REPO_ROOT / "examples"))
    settings = {
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "2g",
    }
    settings.update(overrides)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    with _stderr_to(ctx.tmp_dir / f"{SUITE}-jvm.log"):
        return local_session(app, **settings)


def _write_batch(input_dir: Path, batch: int, ids: np.ndarray[Any, Any]) -> int:
    """Write micro-batch ``batch`` (one row per id) with a distinct, increasing mtime."""
    table = pa.table(
        {"k": key_strings(ids), "v": pa.array(ids.astype(np.int64) + batch, pa.int64())}
    )
    path = input_dir / f"batch-{batch:05d}.parquet"
    pq.write_table(table, path)
    t = 1_600_000_000 + 10 * batch
    os.utime(path, (t, t))
    return len(ids)


def _run_once(spark: Any, variant: Variant, input_dir: Path) -> None:
    """Run ``variant``'s query until it has processed every file present; record progress."""
    frame = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(input_dir))
    )
    grouped = frame.groupBy("k")
    if variant.flavour == "row":
        out = grouped.transformWithState(variant.processor, OUTPUT_SCHEMA, "Update", "None")
    else:
        out = grouped.transformWithStateInPandas(variant.processor, OUTPUT_SCHEMA, "Update", "None")
    done = set(variant.wall_ms)
    c0 = _tree_cpu_s()
    t0 = time.perf_counter()
    query = (
        out.writeStream.format("noop")
        .option("checkpointLocation", str(variant.checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(900)
    finally:
        query.stop()
    variant.run_s.append(time.perf_counter() - t0)
    cpu = _tree_cpu_s() - c0
    exc = query.exception()
    if exc is not None:
        raise RuntimeError(f"query {variant.tag} failed: {exc}")
    for p in query.recentProgress:
        rows = int(p.get("numInputRows") or 0)
        if rows:
            variant.wall_ms[int(p["batchId"])] = float(p["durationMs"]["triggerExecution"])
            variant.rows[int(p["batchId"])] = rows
    new = [b for b in variant.wall_ms if b not in done]
    if len(new) == 1:  # one micro-batch per query run: the run's CPU time is the batch's
        variant.cpu_s[new[0]] = cpu


def _tree_cpu_s() -> float:
    """CPU seconds of this process's descendants (the JVM, Python daemon and workers)."""
    import psutil

    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _read_stats(stats_dir: Path) -> list[dict[str, Any]]:
    """Stats lines of every worker (one per task, see :class:`Recorder`)."""
    lines: list[dict[str, Any]] = []
    for p in stats_dir.glob("*.jsonl"):
        lines += [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    return lines


@dataclass
class _BatchStats:
    """The tasks of one variant in one micro-batch, summed (from their stats lines)."""

    tasks: int = 0
    partitions: set[int] = field(default_factory=set)
    keys: int = 0
    state_s: float = 0.0
    acquire_s: float = 0.0
    finish_s: float = 0.0
    init_s: float = 0.0
    close_s: float = 0.0
    restored: int = 0

    @property
    def fsstate_s(self) -> float:
        """State calls + getting the stores + committing them (tiered; calls only if native)."""
        return self.state_s + self.acquire_s + self.finish_s


def _batch_stats(
    stats: list[dict[str, Any]], tag: str, measured: list[int]
) -> dict[int, _BatchStats]:
    """Per measured batch, the sums over every task of variant ``tag`` (all its processes)."""
    out: dict[int, _BatchStats] = {}
    for x in stats:
        if x["tag"] != tag or x["batch"] not in measured:
            continue
        bs = out.setdefault(x["batch"], _BatchStats())
        bs.tasks += 1
        bs.partitions.add(x["partition"])
        bs.keys += x["keys"]
        bs.state_s += x["state_s"]
        bs.acquire_s += x.get("acquire_s", 0.0)
        bs.finish_s += x.get("finish_s", 0.0)
        bs.init_s += x.get("init_s", 0.0)
        bs.close_s += x.get("close_s", 0.0)
        bs.restored += x.get("store") == "restored"
    return out


def _make_variants(cfg: Config, root: Path, stats_dir: Path, state_uri: Path) -> list[Variant]:
    """Every variant of ``cfg``, the flavours alternating (pandas, row, pandas, row, ...).

    Alternating means that (but for the first query of a round) every query follows one of the
    other flavour, whichever its kind: any cost of switching flavours (warm Python workers, the
    previous query's garbage in the JVM) lands on every variant alike. In flavour blocks, each
    flavour's ``no_state`` query would nearly always be the one that follows the other flavour.
    """
    from fsstate_spark import tiered

    per_flavour: list[list[Variant]] = []
    for flavour, kinds in cfg.flavours():
        out: list[Variant] = []
        per_flavour.append(out)
        for kind in kinds:
            cls = KINDS[kind]
            modes = ["none"] if kind == "no_state" else ["native", "tiered"]
            for mode in modes:
                tag = _tag(flavour, kind, mode)
                bench = cls(tag, str(stats_dir), flavour)
                proc: StatefulProcessor = bench
                if mode == "tiered":
                    name = kind if flavour == "pandas" else f"{kind}_{flavour}"
                    proc = tiered(bench, state_uri=str(state_uri), name=name)
                cp = root / "checkpoints" / tag.replace("/", "-")
                rec = Recorder(proc, bench)
                out.append(Variant(kind, mode, rec, cp, cls.calls_per_key, flavour))
    mixed = itertools.zip_longest(*per_flavour)
    return [v for group in mixed for v in group if v is not None]


def _paired(a: Variant, b: Variant, batches: list[int]) -> list[tuple[float, float, int]]:
    """(wall a, wall b, rows) in ms for the batches both measured."""
    return [
        (a.wall_ms[i], b.wall_ms[i], a.rows[i])
        for i in batches
        if i in a.wall_ms and i in b.wall_ms
    ]


def _compare(ctx: BenchContext, spark: Any, cfg: Config, root: Path) -> list[Result]:
    """Run one key-space size: every variant, round by round; returns its result rows."""
    input_dir = root / "input"
    stats_dir = root / "stats"
    for d in (input_dir, stats_dir):
        d.mkdir(parents=True)
    variants = _make_variants(cfg, root, stats_dir, root / "state")
    rng = np.random.default_rng(cfg.keys)
    batches = 1 + cfg.warm_batches + cfg.measured_batches
    for b in range(batches):
        if b == 0:
            ids = rng.permutation(cfg.keys)
        else:
            ids = rng.choice(cfg.keys, size=cfg.rows_per_batch, replace=False)
        rows = _write_batch(input_dir, b, ids)
        order = variants[b % len(variants) :] + variants[: b % len(variants)]
        for v in order:
            _run_once(spark, v, input_dir)
            ms = v.wall_ms.get(b)
            ctx.log(
                f"  {cfg.label} batch {b} {v.tag:<26} {rows:>7} rows "
                f"{ms / 1000 if ms else float('nan'):7.2f} s (query run {v.run_s[-1]:.1f} s)"
            )
    stats = _read_stats(stats_dir)
    measured = list(range(1 + cfg.warm_batches, batches))
    out: list[Result] = []
    for flavour, kinds in cfg.flavours():
        out += _results(cfg, flavour, kinds, variants, stats, measured)
    return out


def _results(
    cfg: Config,
    flavour: str,
    kinds: tuple[str, ...],
    variants: list[Variant],
    stats: list[dict[str, Any]],
    measured: list[int],
) -> list[Result]:
    """Result rows of one flavour, against that flavour's ``no_state`` query."""
    by_tag = {v.tag: v for v in variants if v.flavour == flavour}
    base = by_tag[_tag(flavour, "no_state", "none")]
    # pandas keeps the unmarked names (history stays comparable); Row gets a marker
    pandas = flavour == "pandas"
    lab = cfg.label if pandas else f"{cfg.label} {flavour}"
    base_name = "no_state" if pandas else f"{flavour} no_state"
    out: list[Result] = []
    base_rates = [base.rows[i] / base.wall_ms[i] * 1000 for i in measured if i in base.wall_ms]
    common = (
        f"{cfg.keys:,} keys in state, {cfg.rows_per_batch:,} rows (distinct keys) per batch, "
        f"median of {len(measured)} batches after the load batch and {cfg.warm_batches} "
        "unmeasured one(s)"
    )
    out.append(
        Result(
            SUITE,
            f"{lab} no_state",
            median(base_rates),
            "rows/s",
            notes=f"framework cost only (the limit), {API[flavour]}; {common}",
            samples=base_rates,
        )
    )

    def pooled_us(tag: str, stores: tuple[str, ...] | None = None) -> float | None:
        """In-worker µs per state call of ``tag``, pooled over its measured tasks (only those
        whose store outcome is in ``stores``, if given)."""
        lines = [s for s in stats if s["tag"] == tag and s["batch"] in measured]
        if stores is not None:
            lines = [s for s in lines if s.get("store", "") in stores]
        keys = sum(s["keys"] for s in lines)
        calls = by_tag[tag].calls_per_key or 1
        return sum(s["state_s"] for s in lines) / (keys * calls) * 1e6 if keys else None

    # what the timer itself costs per key (two perf_counter calls and a call of the no-op
    # touch): it stays in every in-worker figure below (gross), on both sides alike
    harness_us = pooled_us(base.tag)

    def moved(tag: str) -> str:
        """How many tasks ran in another worker than their partition's previous batch, and how
        the tiered tasks got their store (cached copy at the version, caught up, restored)."""
        pid = {(x["batch"], x["partition"]): x["pid"] for x in stats if x["tag"] == tag}
        pairs = [(b, p) for b, p in pid if b in measured and (b - 1, p) in pid]
        n = sum(1 for b, p in pairs if pid[(b, p)] != pid[(b - 1, p)])
        out = f"{n} of {len(pairs)} tasks ran in another worker than the previous batch"
        how = [x.get("store", "") for x in stats if x["tag"] == tag and x["batch"] in measured]
        if any(how):
            counts = ", ".join(f"{k} {how.count(k)}" for k in ("hit", "caught_up", "restored"))
            out += f"; stores: {counts}"
        return out

    for kind in kinds:
        if kind == "no_state":
            continue
        nat, tie = by_tag[_tag(flavour, kind, "native")], by_tag[_tag(flavour, kind, "tiered")]
        calls = nat.calls_per_key
        rates = {
            v.mode: [v.rows[i] / v.wall_ms[i] * 1000 for i in measured if i in v.wall_ms]
            for v in (nat, tie)
        }
        pn = _paired(tie, nat, measured)
        pb = _paired(tie, base, measured)
        pnb = _paired(nat, base, measured)
        vs_native = [n / t for t, n, _ in pn]
        # what zero-cost state would reach: the framework's own time against native's
        ceiling = median([n / b for n, b, _ in pnb])
        vs_base = [b / t for t, b, _ in pb]
        cost_t = [(t - b) * 1000 / (calls * r) for t, b, r in pb]
        cost_n = [(n - b) * 1000 / (calls * r) for n, b, r in pnb]
        # in-worker figures per measured batch, over every task of the batch on each side
        # (restored stores included): the same batches, partitions and keys for both
        nb = _batch_stats(stats, nat.tag, measured)
        tb = _batch_stats(stats, tie.tag, measured)
        same = [
            b
            for b in measured
            if b in nb
            and b in tb
            and nb[b].partitions == tb[b].partitions
            and nb[b].keys == tb[b].keys > 0
        ]
        unpaired = [b for b in measured if b not in same]
        nat_us = [nb[b].state_s / (nb[b].keys * calls) * 1e6 for b in same]
        tie_us = [tb[b].state_s / (tb[b].keys * calls) * 1e6 for b in same]
        allin_us = [tb[b].fsstate_s / (tb[b].keys * calls) * 1e6 for b in same]
        per_call = [n / t for n, t in zip(nat_us, tie_us, strict=True) if t > 0]
        nat_vs_allin = [n / a for n, a in zip(nat_us, allin_us, strict=True) if a > 0]
        tasks = sum(tb[b].tasks for b in same)
        restored = sum(tb[b].restored for b in same)
        tasks_txt = (
            f"{len(same)} measured batches, {tasks} tiered tasks of which {restored} restored "
            "their store (included)"
            + (f"; batches left out (tasks or keys differ): {unpaired}" if unpaired else "")
        )
        first = [
            x
            for x in stats
            if x["tag"] == tie.tag
            and x["batch"] in measured
            and x.get("store") == "restored"
            and x["keys"]
        ]
        first_allin = [
            (x["state_s"] + x["acquire_s"] + x["finish_s"]) / (x["keys"] * calls) * 1e6
            for x in first
        ]
        first_calls = [x["state_s"] / (x["keys"] * calls) * 1e6 for x in first]
        cpu_t = _cpu_cost_us(tie, base, measured, calls)
        cpu_n = _cpu_cost_us(nat, base, measured, calls)
        cpu_vs_base = _cpu_ratio(base, tie, measured)
        cpu_vs_nat = _cpu_ratio(nat, tie, measured)
        desc = f"{calls} state call{'s' if calls > 1 else ''}/key"
        if not pandas:
            desc += f", {API[flavour]} against the {base_name} query"
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} native",
                median(rates["native"]),
                "rows/s",
                baseline_value=median(base_rates),
                notes=f"Spark's handles (RocksDB provider), {desc}",
                samples=rates["native"],
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} tiered",
                median(rates["tiered"]),
                "rows/s",
                baseline_value=median(base_rates),
                notes=f"tiered(...), {desc}",
                samples=rates["tiered"],
            )
        )
        two_calls = kind == "value_count"
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} tiered/native",
                median(vs_native),
                "x",
                goal=GOAL_VS_NATIVE if two_calls else None,
                notes=f"throughput ratio per batch (paired), {desc}; ceiling (state at no "
                f"cost: {base_name} vs native, paired) {_fmt_x(ceiling)}; CPU time per batch "
                f"of the process tree, native/tiered: {_fmt_x(cpu_vs_nat)}",
                samples=vs_native,
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} tiered/no_state",
                median(vs_base),
                "x",
                goal=GOAL_VS_NO_STATE if two_calls else None,
                notes=f"throughput ratio per batch (paired), {desc}; CPU time per batch of "
                f"the process tree, no_state/tiered: {_fmt_x(cpu_vs_base)}",
                samples=vs_base,
            )
        )
        ct, cn = median(cost_t), median(cost_n)
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call native",
                cn,
                "µs",
                notes=f"(native - {base_name} wall per batch) / state calls, per batch; "
                f"in-worker {_fmt_us(_median_or_none(nat_us))}/call (median per batch, time "
                f"around the state calls only); from CPU time of the process tree "
                f"{_fmt_us(cpu_n)}/call",
                samples=cost_n,
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call tiered",
                ct,
                "µs",
                notes=f"(tiered - {base_name} wall per batch) / state calls, per batch; "
                f"in-worker {_fmt_us(_median_or_none(tie_us))}/call (median per batch over "
                f"all its tasks, time around the state calls only; pooled over the tasks "
                f"whose store was cached or caught up: "
                f"{_fmt_us(pooled_us(tie.tag, ('hit', 'caught_up')))}), all-in with getting "
                f"and committing the stores {_fmt_us(_median_or_none(allin_us))}/call; from "
                f"CPU time of the process tree {_fmt_us(cpu_t)}/call; {moved(tie.tag)}",
                samples=cost_t,
            )
        )
        if calls >= 2:
            # the goal's ratio: in-worker time around the state calls, per batch, over the
            # same tasks on both sides, gross (the wall-based ratio is in the notes: a tiered
            # cost within noise of zero makes it unbounded)
            wall_txt = f"{cn / ct:.1f}" if ct > 0 else "unbounded (tiered cost below noise)"
            if cpu_t is not None and cpu_n is not None:
                cpu_f = f"{cpu_n / cpu_t:.1f}" if cpu_t > 0 else "unbounded (below noise)"
                wall_txt += f"; from CPU time: {cpu_f}"
            out.append(
                Result(
                    SUITE,
                    f"{lab} {kind} per-call native/tiered",
                    median(per_call) if per_call else float("nan"),
                    "x",
                    goal=GOAL_PER_CALL_FACTOR,
                    notes=f"per measured batch (paired): native in-worker µs per call / "
                    f"tiered in-worker µs per call, each summed over all the batch's tasks "
                    f"(same batches, partitions and keys on both sides); gross: the timer's "
                    f"own cost ({_fmt_us(harness_us)} per key, the {base_name} no-op touch) "
                    f"is in both; {spread_text(per_call, _fmt_f)}; {tasks_txt}; medians per "
                    f"batch: native {_fmt_us(_median_or_none(nat_us))}, tiered "
                    f"{_fmt_us(_median_or_none(tie_us))} per call; native in-worker / tiered "
                    f"all-in (next row): {_fmt_x(_median_or_none(nat_vs_allin))} "
                    f"({spread_text(nat_vs_allin, _fmt_f)}); ratio of the wall-based "
                    f"µs/call medians: {wall_txt}" + ("" if pandas else f"; {API[flavour]}"),
                    samples=per_call,
                )
            )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call tiered all-in",
                median(allin_us) if allin_us else float("nan"),
                "µs",
                notes=f"per measured batch: (time in the state calls + getting the stores + "
                f"committing them, summed over all the batch's tiered tasks) / state calls "
                f"of the batch; getting = the adapter's acquire (cached copy, catch-up or "
                f"restore), committing = its finish (TTL cleanup, commit, hand-back), both "
                f"measured in the worker around the adapter's calls, per task; medians per "
                f"batch: calls {_ms(tb, same, 'state_s')}, getting "
                f"{_ms(tb, same, 'acquire_s')}, committing {_ms(tb, same, 'finish_s')}; "
                f"{spread_text(allin_us, _fmt_f)}; {tasks_txt}; native's in-worker figure "
                f"({_fmt_us(_median_or_none(nat_us))}/call) leaves out Spark's own store "
                "commit, which runs in the JVM; for scale, the processor's init + close in "
                "the worker (declaring the state variables included) took per batch: tiered "
                f"{_ms(tb, same, 'init_s')} + {_ms(tb, same, 'close_s')}, native "
                f"{_ms(nb, same, 'init_s')} + {_ms(nb, same, 'close_s')}",
                samples=allin_us,
            )
        )
        out.append(
            Result(
                SUITE,
                f"{lab} {kind} µs/call tiered first visit",
                median(first_allin) if first_allin else float("nan"),
                "µs",
                notes=f"all-in µs per call (state calls + getting + committing the store) "
                f"of each measured task that restored its store ({len(first)} tasks; state "
                f"calls alone {_fmt_us(_median_or_none(first_calls))}/call): a worker's "
                "first batch of a partition opens the version and loads the table (once per "
                "worker and partition)",
                samples=first_allin,
            )
        )
        ours = [tb[b].fsstate_s * 1000 for b in same]
        share = [tb[b].fsstate_s * 1000 / tie.wall_ms[b] for b in same if b in tie.wall_ms]
        if ours:
            out.append(
                Result(
                    SUITE,
                    f"{lab} {kind} tiered: fsstate ms/batch",
                    median(ours),
                    "ms",
                    notes=f"time inside fsstate per batch, summed over its tasks: state calls "
                    f"(median {_ms(tb, same, 'state_s')}) plus getting and committing the "
                    f"stores; median share of the batch's wall time "
                    f"{100 * _median_or_none(share, 0.0):.1f} % (tasks run in parallel, so "
                    "this is an upper bound of what fsstate adds to a batch)",
                    samples=ours,
                )
            )
    return out


def _median_or_none(xs: list[float], default: float | None = None) -> Any:
    """Median of ``xs``, or ``default`` when empty."""
    return median(xs) if xs else default


def _ms(per_batch: dict[int, _BatchStats], batches: list[int], attr: str) -> str:
    """Median over ``batches`` of one summed field, in ms."""
    xs = [getattr(per_batch[b], attr) * 1000 for b in batches]
    return f"{median(xs):.1f} ms" if xs else "—"


def _fmt_f(x: float) -> str:
    return f"{x:.3g}"


def _cpu_cost_us(v: Variant, base: Variant, measured: list[int], calls: int) -> float | None:
    """Median over batches of (CPU s of ``v`` - of ``base``) per state call, in µs."""
    xs = [
        (v.cpu_s[i] - base.cpu_s[i]) * 1e6 / (calls * v.rows[i])
        for i in measured
        if i in v.cpu_s and i in base.cpu_s
    ]
    return median(xs) if xs else None


def _cpu_ratio(a: Variant, b: Variant, measured: list[int]) -> float | None:
    """Median over batches of CPU s per row of ``a`` over that of ``b``."""
    xs = [
        (a.cpu_s[i] / a.rows[i]) / (b.cpu_s[i] / b.rows[i])
        for i in measured
        if i in a.cpu_s and i in b.cpu_s and b.cpu_s[i] > 0
    ]
    return median(xs) if xs else None


def _fmt_x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f} x"


def _fmt_us(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g} µs"


# -- memory-bounded run ---------------------------------------------------------------------------
def _memory_query(
    ctx: BenchContext,
    root: Path,
    bench: BenchProcessor,
    proc: StatefulProcessor,
    keys: int,
    batches: int,
) -> tuple[Variant, list[dict[str, Any]]]:
    """Run ``proc`` over ``keys`` new keys in ``batches`` batches from a fresh SparkSession
    (new Python workers, so their ``ru_maxrss`` covers this query only); returns the variant
    and the stats lines of its tasks. ``bench`` is the processor that writes the lines (its
    ``stats_dir`` must be ``root / "stats"``)."""
    input_dir = root / "input"
    for d in (input_dir, root / "stats"):
        d.mkdir(parents=True, exist_ok=True)
    mode = "none" if proc is bench else "tiered"
    kind = bench.tag.rpartition("/")[2]
    variant = Variant(kind, mode, Recorder(proc, bench), root / "checkpoint", bench.calls_per_key)
    per = keys // batches
    spark = _session(ctx, f"fsstate-bench-{bench.tag.replace('/', '-')}")
    try:
        for b in range(batches):
            rows = _write_batch(input_dir, b, np.arange(b * per, (b + 1) * per))
            _run_once(spark, variant, input_dir)
            ms = variant.wall_ms.get(b, float("nan"))
            ctx.log(f"  {bench.tag} batch {b}: {rows:,} new keys, {ms / 1000:.2f} s")
    finally:
        spark.stop()
    return variant, _read_stats(root / "stats")


def _state_by_worker(
    stats: list[dict[str, Any]], value_bytes: int
) -> tuple[dict[int, int], dict[int, int]]:
    """Logical state bytes (keys x ``value_bytes``; every batch brings new keys) of each
    partition at the end, and of each worker process: the sum over the partitions it served of
    their state at the last version it served (what its stores held, at most)."""
    keys: dict[tuple[int, int], int] = {}
    for x in stats:
        k = (x["partition"], x["batch"])
        keys[k] = keys.get(k, 0) + x["keys"]
    by_part: dict[int, int] = {}
    for (p, _), n in keys.items():
        by_part[p] = by_part.get(p, 0) + n * value_bytes
    last: dict[tuple[int, int], int] = {}  # (pid, partition) -> last batch served
    for x in stats:
        k = (x["pid"], x["partition"])
        last[k] = max(last.get(k, -1), x["batch"])
    by_worker: dict[int, int] = {}
    for (pid, p), b in last.items():
        held = sum(n for (q, c), n in keys.items() if q == p and c <= b) * value_bytes
        by_worker[pid] = by_worker.get(pid, 0) + held
    return by_part, by_worker


def _peaks_mib(stats: list[dict[str, Any]]) -> dict[int, float]:
    """Peak RSS of each worker process, MiB (the largest ``ru_maxrss`` of its lines)."""
    out: dict[int, float] = {}
    for x in stats:
        out[x["pid"]] = max(out.get(x["pid"], 0.0), x["maxrss_kib"] / 1024)
    return out


def _memory_bounded(
    ctx: BenchContext, root: Path, limit_mib: int, keys: int, batches: int
) -> list[Result]:
    """``tiered(BigValue(), memory_limit=...)`` over ``keys`` new keys in ``batches`` batches,
    and the same query with the ``no_state`` processor, each from a fresh SparkSession."""
    from fsstate_spark import tiered

    # the same query without state: what a worker's RSS is without fsstate or its data
    base_dir = root / "no_state"
    base_bench = NoState("memory/no_state", str(base_dir / "stats"))
    _, base_stats = _memory_query(ctx, base_dir, base_bench, base_bench, keys, batches)

    tie_dir = root / "tiered"
    bench = BigValue("memory/tiered", str(tie_dir / "stats"))
    proc = tiered(
        bench,
        state_uri=str(tie_dir / "state"),
        memory_limit=f"{limit_mib}MiB",
        name="big",
    )
    variant, stats = _memory_query(ctx, tie_dir, bench, proc, keys, batches)

    peaks, base_peaks = _peaks_mib(stats), _peaks_mib(base_stats)
    peak, base_peak = max(peaks.values()), max(base_peaks.values())
    by_part, by_worker = _state_by_worker(stats, BigValue.value_bytes)
    logical = keys * BigValue.value_bytes
    on_disk = sum(p.stat().st_size for p in (tie_dir / "state").rglob("*") if p.is_file())
    per = keys // batches
    measured = list(range(1, batches))
    rates = [variant.rows[i] / variant.wall_ms[i] * 1000 for i in measured if i in variant.wall_ms]
    budget = limit_mib * MIB
    workers = len(by_worker)
    parts_txt = ", ".join(
        f"partition {p} {n / MIB:,.0f} MiB ({n / budget:.1f}x)" for p, n in sorted(by_part.items())
    )
    workers_txt = ", ".join(
        f"{n / MIB:,.0f} MiB ({n / budget:.1f}x)" for n in sorted(by_worker.values(), reverse=True)
    )
    state_txt = (
        f"state per worker (memory_limit {limit_mib} MiB is per worker process): by partition "
        f"at the end {parts_txt}; the most each of the {workers} workers' stores held (the "
        f"partitions it served, each at the last version it served): {workers_txt}; in total "
        f"{logical / MIB:,.0f} MiB = "
        f"{logical / budget:.1f}x one worker's budget, "
        f"{logical / (workers * budget):.1f}x the {workers} workers' budgets together"
    )
    peaks_txt = ", ".join(f"{x:,.0f}" for x in sorted(peaks.values(), reverse=True))
    base_txt = ", ".join(f"{x:,.0f}" for x in sorted(base_peaks.values(), reverse=True))
    run_txt = (
        f"{keys:,} keys x {BigValue.value_bytes} B values in {batches} batches of {per:,} new "
        f"keys, transformWithStateInPandas, {logical / MIB:,.0f} MiB of state "
        f"({on_disk / MIB:,.0f} MiB on disk)"
    )
    return [
        Result(
            SUITE,
            "memory-bounded tiered",
            median(rates),
            "rows/s",
            notes=f"tiered(..., memory_limit={limit_mib}MiB), {run_txt}; median of the "
            "batches after the first",
            samples=rates,
        ),
        Result(
            SUITE,
            "memory-bounded worker peak RSS",
            peak,
            "MiB",
            goal=limit_mib + RSS_SLACK_MIB,
            goal_op="<=",
            notes=f"largest ru_maxrss (taken after each task's commit) over the Python workers "
            f"of the tiered query, fresh SparkSession; per worker {peaks_txt} MiB; goal: "
            f"budget {limit_mib} MiB + {RSS_SLACK_MIB:.0f} MiB; {state_txt}",
            samples=sorted(peaks.values()),
            stat="max",
        ),
        Result(
            SUITE,
            "memory-bounded no-state worker peak RSS",
            base_peak,
            "MiB",
            notes=f"the same query (same input batches, same output) with the no_state "
            f"processor, from its own fresh SparkSession: largest ru_maxrss over its Python "
            f"workers; per worker {base_txt} MiB",
            samples=sorted(base_peaks.values()),
            stat="max",
        ),
        Result(
            SUITE,
            "memory-bounded peak RSS over no-state",
            peak - base_peak,
            "MiB",
            goal=limit_mib + RSS_NET_SLACK_MIB,
            goal_op="<=",
            notes=f"worker peak RSS of the tiered query ({peak:,.0f} MiB) minus that of the "
            f"no-state query ({base_peak:,.0f} MiB), the largest worker of each: what state "
            f"adds to a worker; goal: budget {limit_mib} MiB + {RSS_NET_SLACK_MIB:.0f} MiB "
            "(fsstate's code, Arrow/Parquet buffers and allocator slack outside the budget)",
            stat="derived",
        ),
    ]


# -- entry point ----------------------------------------------------------------------------------
def _configs(ctx: BenchContext) -> list[Config]:
    all_kinds = tuple(KINDS)
    two = ("no_state", "value_count")
    if ctx.quick:
        return [Config("20k", 20_000, 4_000, 3, two, row_kinds=two)]
    # 9 measured batches: the fewest whose order-statistic interval of the median (2nd to
    # 8th smallest) reaches 95 % coverage
    return [
        Config("20k", 20_000, 5_000, 9, all_kinds, row_kinds=all_kinds),
        Config("200k", 200_000, 5_000, 9, two, row_kinds=two),
    ]


def run(ctx: BenchContext) -> list[Result]:
    """Run the Spark end-to-end comparison (and, in full mode, the memory-bounded run)."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SuiteSkipped("pyspark is not installed") from exc
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SuiteSkipped("no Java runtime (java not on PATH, JAVA_HOME unset)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    out: list[Result] = []
    try:
        spark = _session(ctx, "fsstate-bench-e2e")
        for cfg in _configs(ctx):
            if not ctx.wants(cfg.label):
                continue
            flav = ", ".join(f"{len(k)} {f}" for f, k in cfg.flavours())
            ctx.log(f"spark_e2e/{cfg.label}: workloads {flav} ...")
            t0 = time.perf_counter()
            try:
                res = _compare(ctx, spark, cfg, scratch / cfg.label)
            except Exception as exc:
                ctx.log(f"spark_e2e/{cfg.label} FAILED: {exc!r}")
                traceback.print_exc()
                out.append(Result(SUITE, cfg.label, 0.0, "", passed=False, notes=f"ERROR: {exc!r}"))
                continue
            for r in res:
                ctx.log(f"  {r.name}: {r.value:,.4g} {r.unit} ({r.status})")
            ctx.log(f"spark_e2e/{cfg.label} done in {time.perf_counter() - t0:.0f} s")
            out.extend(res)
        if not ctx.quick and ctx.wants("memory"):
            # fresh sessions (one per query): new Python workers, so ru_maxrss covers one
            # query only
            spark.stop()
            spark = None
            ctx.log("spark_e2e/memory-bounded ...")
            try:
                res = _memory_bounded(ctx, scratch / "memory", 32, 176_000, 4)
            except Exception as exc:
                ctx.log(f"spark_e2e/memory FAILED: {exc!r}")
                traceback.print_exc()
                res = [Result(SUITE, "memory", 0.0, "", passed=False, notes=f"ERROR: {exc!r}")]
            for r in res:
                ctx.log(f"  {r.name}: {r.value:,.4g} {r.unit} ({r.status})")
            out.extend(res)
        if spark is not None:
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out
