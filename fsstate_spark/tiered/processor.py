"""``tiered(processor)``: a StatefulProcessor proxy that keeps the processor's state in fsstate.

The proxy is what Spark pickles and runs. In every task it opens the right store
(:mod:`fsstate_spark.tiered.lifecycle`), hands the user's processor a
:class:`fsstate_spark.state.handles.TieredHandle` in ``init``, binds the grouping key and the
batch's processing time before each user callback, and commits at ``close``.

Invariants:

* The user's processor is unchanged and called with exactly Spark's arguments.
* The grouping key stays bound while the iterator returned by ``handleInputRows`` or
  ``handleExpiredTimer`` is consumed: it is bound again before every step of that iterator,
  so lazy generators act on the right key even if iterators are interleaved.
* The store's clock is the processing time Spark passes in ``TimerValues`` (when the time mode
  gives one), set before any state call of that callback.
* ``close`` calls the user's ``close`` first, then runs TTL cleanup and commits the task's
  epoch (:mod:`fsstate.store.epoch`). An exception from any callback of the user's processor
  (or from the iterator it returns), from its ``close`` or from the commit fails the epoch:
  nothing is committed and the store is discarded, so no later task reuses it.
* Runtime objects (store, handle) are never pickled with the proxy.
* In ``init``, before the user's processor, two state variables are declared with Spark's own
  handle: :data:`fsstate_spark.tiered.lifecycle.SPARK_MARKER` (see there; never written) and
  :data:`fsstate_spark.tiered.lineage.LINEAGE_VAR`, which a streaming task reads when its
  store's lineage is not provably its run's and writes when its epoch branched: the branch of
  fsstate's state Spark's checkpoint goes with (:mod:`fsstate_spark.tiered.lineage`). A task
  whose marker cannot be written fails (Spark retries it; the retry adopts the committed
  version). Their schemas are StructTypes: PySpark's handle sends a DDL string to the JVM's
  SQL parser, twice per variable and task.
* A streaming task on PySpark's own loop starts (``init``) by freezing what the worker keeps,
  as fsstate's loop does for its tasks (:func:`fsstate.osmem.freeze_survivors`): PySpark
  collects after every task, and would otherwise walk every cached store each time.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from fsstate.errors import ConfigError, FsStateError
from fsstate.interfaces import Key
from fsstate.osmem import freeze_survivors
from fsstate_spark.pyspark import require_supported_pyspark
from fsstate_spark.receipts import TieredEntry, new_accumulator, receipt, register_tiered
from fsstate_spark.runtime import TaskInfo, TaskMode, current_task
from fsstate_spark.state.handles import TieredHandle
from fsstate_spark.state.keys import KeyBinding, bound_items, normalize_key
from fsstate_spark.state.map_order import UNSAFEROW
from fsstate_spark.tiered.lifecycle import (
    SPARK_MARKER,
    SPARK_MARKER_SCHEMA,
    Finished,
    TaskStore,
    finish_store,
    open_store,
)
from fsstate_spark.tiered.lineage import (
    LINEAGE_SCHEMA,
    LINEAGE_VAR,
    Lineage,
    SparkMarker,
    planned_ms,
)
from fsstate_spark.tiered.settings import TieredConfig, resolve_config
from fsstate_spark.tiered.transient import TransientStore


class _TaskState:
    """What one task (one partition of one micro-batch) holds."""

    __slots__ = (
        "_ints",
        "_store_bind",
        "binding",
        "branch",
        "handle",
        "marker",
        "now_ms",
        "store",
        "task",
        "task_store",
    )

    def __init__(
        self,
        task: TaskInfo,
        task_store: TaskStore,
        handle: TieredHandle,
        marker: SparkMarker | None = None,
    ) -> None:
        self.task = task
        self.marker = marker
        epoch = task_store.epoch
        self.branch = epoch.store.branch if epoch is not None else ""  # the branch acquired
        self.task_store = task_store
        self.store = store = task_store.store
        self.handle = handle
        self.binding = handle.binding
        self.now_ms: int | None = None
        # in-memory stores want to know the key (bounded input keeps one key's state only)
        self._store_bind = store.bind if isinstance(store, TransientStore) else None
        # integer key fields: PySpark's pandas loop hands their nulls over as NaN
        schema = handle.key_schema
        self._ints = (
            []
            if schema is None
            else [i for i, f in enumerate(schema) if pa.types.is_integer(f.type)]
        )

    def set_clock(self, now_ms: int) -> None:
        """The batch's processing time (``-1``: none in this time mode)."""
        if now_ms >= 0 and now_ms != self.now_ms:
            self.now_ms = now_ms
            self.store.set_time(now_ms)

    def bind(self, key: Any, timer_values: TimerValues | None) -> Key:
        """Bind ``key`` (normalized) and the batch's processing time; returns the bound key."""
        k = normalize_key(key)
        if self._ints and any(type(k[i]) is float and k[i] != k[i] for i in self._ints):
            k = tuple(None if i in self._ints and v != v else v for i, v in enumerate(k))
        self.binding.key = k
        if self._store_bind is not None:
            self._store_bind(k)
        if timer_values is not None:
            self.set_clock(timer_values.getCurrentProcessingTimeInMs())
        return k

    def bound(self, key: Key, result: Any) -> Any:
        """Wrap a callback's result so ``key`` is bound whenever it is iterated."""
        if result is None:
            return None
        return _bound_failing(self, key, iter(result))


def _bound_failing(state: _TaskState, key: Key, items: Iterator[Any]) -> Iterator[Any]:
    """``items`` with ``key`` bound before every step (:func:`bound_items`), failing the task's
    epoch if a step raises (not if the consumer stops early)."""

    def bind() -> None:
        state.binding.key = key

    try:
        yield from bound_items(items, bind)
    except GeneratorExit:
        raise
    except BaseException:
        state.task_store.fail()
        raise


class KeyedTask:
    """The seam fsstate's keyed loop (:mod:`fsstate_spark.tiered.fast_loop`) runs one task of a
    :class:`TieredProcessor` through: it calls the user's processor itself, so it binds each
    key (:meth:`enter`) before any user code runs for it, sets the batch's clock, and ends the
    task's epoch with :meth:`commit` or :meth:`fail`."""

    __slots__ = ("_binding", "_owner", "_state")

    def __init__(self, owner: TieredProcessor, state: _TaskState) -> None:
        self._owner = owner
        self._state = state
        self._binding = state.binding

    def set_clock(self, now_ms: int) -> None:
        """The batch's processing time (``-1``: none in this time mode)."""
        self._state.set_clock(now_ms)

    def enter(self, store_key: Key) -> None:
        """Bind ``store_key`` (a normalized key) for the user code that runs next."""
        self._binding.key = store_key

    def commit(self) -> None:
        """Unbind, close the user's processor and commit the task's epoch."""
        self._binding.key = None
        self._owner.close()

    def fail(self) -> None:
        """The task failed: its epoch fails (nothing committed, the store discarded)."""
        self._owner.fail_task()


class TieredProcessor(StatefulProcessor):
    """A StatefulProcessor that runs ``processor`` with its state in fsstate.

    Build it with :func:`tiered`.

    Args:
        processor: the user's processor.
        config: validated settings.
    """

    def __init__(self, processor: StatefulProcessor, config: TieredConfig) -> None:
        self._processor = processor
        self._config = config
        self._task: _TaskState | None = None
        self._instance = uuid.uuid4().hex  # the same in every task (pickled with it)
        self._fast = False  # run by fsstate's keyed loop (set per task, never pickled)
        # the receipts' accumulator (classic PySpark with metrics on; pickled with the proxy)
        self._receipts: Any = new_accumulator() if config.metrics else None
        if config.metrics:  # off: nothing to report, so the driver never looks for it
            register_tiered(TieredEntry(config.state_uri, config.root, config.name, self._receipts))

    @property
    def processor(self) -> StatefulProcessor:
        """The wrapped processor."""
        return self._processor

    @property
    def config(self) -> TieredConfig:
        """The resolved settings."""
        return self._config

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_task"] = None
        state["_fast"] = False
        return state

    def _current(self) -> _TaskState:
        task = self._task
        if task is None:
            raise FsStateError(
                "fsstate_spark: the processor was called before init(); Spark calls init first"
            )
        return task

    # -- Spark's StatefulProcessor API ---------------------------------------------------------
    def init(self, handle: StatefulProcessorHandle) -> None:
        """Open this task's store and initialize the user's processor with a tiered handle."""
        # Spark's store of the operator holds one state variable of its own (never written),
        # so that Spark's offline repartition and the rescale find the operator (lifecycle)
        handle.getValueState(SPARK_MARKER, SPARK_MARKER_SCHEMA)
        # ... and one it writes: the lineage of fsstate's state this checkpoint follows
        lineage_state = handle.getValueState(LINEAGE_VAR, LINEAGE_SCHEMA)
        task = current_task()
        marker: SparkMarker | None = None
        planned = None
        if task.mode == TaskMode.STREAMING:
            if not self._fast:
                if self._config.fast_loop:
                    note_stock_loop(self._config.name)
                # PySpark's loop runs the task: freeze what the worker keeps (its cached
                # stores) as fsstate's loop does, or PySpark's collection after every task
                # walks them all (fsstate.osmem)
                freeze_survivors()
            assert task.partition is not None
            marker = SparkMarker(handle, lineage_state, task.partition)
            planned = planned_ms(handle)
        task_store = open_store(self._config, task, self._instance, marker, planned)
        # Spark's MapState order follows its state encoding; bounded input always uses
        # unsaferow (its store is built from a fresh SQLConf)
        encoding = self._config.state_encoding if task.mode == TaskMode.STREAMING else UNSAFEROW
        tiered_handle = TieredHandle(handle, task_store.store, KeyBinding(), encoding)
        self._task = _TaskState(task, task_store, tiered_handle, marker)
        try:
            self._processor.init(tiered_handle)
        except BaseException:
            self._fail()
            raise

    def _fail(self) -> None:
        """A callback raised: fail the task's epoch (the store is never committed or reused)."""
        if self._task is not None:
            self._task.task_store.fail()

    # -- fsstate's keyed loop (fsstate_spark.tiered.fast_loop) -------------------------------------
    def begin_fast(self, handle: StatefulProcessorHandle) -> KeyedTask:
        """``init`` for fsstate's keyed loop, which calls the user's processor itself: the
        task's :class:`KeyedTask`."""
        self._fast = True
        self.init(handle)
        return KeyedTask(self, self._current())

    def fail_task(self) -> None:
        """fsstate's keyed loop failed: the task's epoch fails (nothing committed)."""
        self._fail()
        self._task = None

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        """Run the user's handleInputRows with ``key`` bound while its output is consumed."""
        state = self._current()
        try:
            k = state.bind(key, timerValues)
            return state.bound(k, self._processor.handleInputRows(key, rows, timerValues))
        except BaseException:
            self._fail()
            raise

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Any:
        """Run the user's handleExpiredTimer with ``key`` bound while its output is consumed."""
        state = self._current()
        try:
            k = state.bind(key, timerValues)
            return state.bound(
                k, self._processor.handleExpiredTimer(key, timerValues, expiredTimerInfo)
            )
        except BaseException:
            self._fail()
            raise

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:
        """Run the user's handleInitialState with ``key`` bound."""
        state = self._current()
        try:
            state.bind(key, timerValues)
            self._processor.handleInitialState(key, initialState, timerValues)
        except BaseException:
            self._fail()
            raise

    def close(self) -> None:
        """Close the user's processor, then run TTL cleanup and commit the batch's epoch."""
        state = self._task
        try:
            self._processor.close()
        except BaseException:
            self._fail()
            raise
        if state is None:
            return
        state.binding.key = None
        self._task = None
        finished = finish_store(state.task_store, state.now_ms)
        run = state.task_store.epoch
        if finished is not None and run is not None and self._receipts is not None:
            self._send_receipt(state.task, run.store, finished)
        forked = state.task_store.started_lineage or (
            run is not None and run.store.branch != state.branch
        )
        if state.marker is not None and state.marker.live and run is not None and forked:
            store = run.store  # a lineage started here: Spark's state records where it goes on
            assert store.version is not None and store.checksum is not None
            lineage = Lineage(
                store.branch, store.version, store.checksum, store.layout, store.partition
            )
            state.marker.write(lineage)

    def _send_receipt(self, task: TaskInfo, store: Any, finished: Finished) -> None:
        """Hand the driver the committed version's figures (:mod:`fsstate_spark.receipts`)."""
        assert task.query_id is not None and task.batch_id is not None
        assert task.partition is not None
        got = receipt(finished.commit.summary, finished.commit_ms, store.branch, task.run_id)
        self._receipts.add(
            {task.query_id: {task.batch_id: {(store.operator, task.partition): got}}}
        )


_STOCK_NOTED: set[str] = set()
WORKER_CONF = "spark.python.worker.module=pyspark_fsstate.worker"


def note_stock_loop(name: str) -> None:
    """Say once per process that a tiered processor runs on PySpark's own per-key loop, with
    the setting that gives it fsstate's (``tiered(fast_loop=False)`` chose so: then
    nothing)."""
    if name in _STOCK_NOTED:
        return
    _STOCK_NOTED.add(name)
    import sys

    if "pyspark_fsstate.worker" in sys.modules:  # the module is set: the loop said why not
        how = "fsstate's worker module runs here, but not its keyed loop (said above why)"
    else:
        how = (
            f"for fsstate's keyed loop set {WORKER_CONF} (spark-defaults.conf, spark-submit "
            "--conf, SparkSession.builder.config before the session starts, or a Spark Connect "
            "server's conf) with fsstate installed in the executors' Python"
        )
    print(
        f"fsstate: tiered({name}) runs on PySpark's per-key loop; {how}",
        file=sys.stderr,
        flush=True,
    )


def tiered(
    processor: StatefulProcessor,
    *,
    state_uri: str | os.PathLike[str] | None = None,
    memory_limit: int | str | None = None,
    name: str | None = None,
    **options: Any,
) -> TieredProcessor:
    """Keep ``processor``'s ValueState / ListState / MapState in fsstate.

    Use the result wherever the processor was used::

        df.groupBy("user").transformWithStateInPandas(
            tiered(MyProcessor()), output_schema, "Update", "ProcessingTime")

    Settings come from the arguments, then ``spark.fsstate.*`` settings of the active
    SparkSession (e.g. ``spark.fsstate.stateUri``, ``spark.fsstate.memoryLimit``), then
    defaults (see :mod:`fsstate_spark.tiered.settings`).

    Args:
        processor: any pyspark StatefulProcessor; it is not modified.
        state_uri: where state is stored: a local directory (a string or a path) or a URI
            (``s3://...``).
        memory_limit: byte budget of the engine in each Python worker (``"512MiB"``).
        name: operator name, unique within a query (default: the processor's class name).
        **options: store settings (``retain_versions``, ``compression``, ``row_group_rows``,
            ...), engine settings (``high_watermark``, ``background_compaction``, ...),
            ``max_cached_stores``, ``fast_loop`` (default True: fsstate's keyed loop where
            the executors run ``spark.python.worker.module=pyspark_fsstate.worker``; False:
            PySpark's own per-key loop) and ``storage_options`` (object store settings such as
            ``endpoint``, ``region``, ``access_key_id``, ``secret_access_key``,
            ``allow_http``: they reach the workers with the processor; see
            :mod:`fsstate.storage.location`).

    Returns:
        A StatefulProcessor to pass to ``transformWithStateInPandas`` / ``transformWithState``.

    Raises:
        ConfigError: a setting is invalid or the state URI cannot be written.
    """
    require_supported_pyspark("tiered()")
    if not isinstance(processor, StatefulProcessor):
        raise ConfigError(
            f"tiered() wraps a pyspark StatefulProcessor, got {type(processor).__name__}"
        )
    if isinstance(processor, TieredProcessor):
        raise ConfigError("the processor is already tiered; wrap the original processor once")
    config = resolve_config(type(processor).__name__, state_uri, memory_limit, name, dict(options))
    return TieredProcessor(processor, config)
