"""Which store a task uses, and the per-process cache of committed stores.

Measured on pyspark 4.3 (local mode), see the package README section "Lifecycle":

* ``init`` and ``close`` run once per partition per micro-batch (partitions without rows too),
  in whichever Python worker gets the task; consecutive batches of one partition often land
  in different workers.
* ``init``/``close`` also run once on the driver, with no TaskContext, to collect schemas.
* A task that raises never reaches ``close``; its retry may run in the same worker or another.
* A bounded (batch) DataFrame has a TaskContext but no ``streaming.sql.batchId``.

Rules that follow (the invariants of this module):

* Streaming task of batch ``b`` for partition ``p`` of query ``q``: open the store of
  ``(<state_uri>/<q>, <name>, p)`` at version ``b - 1`` (an empty store for ``b == 0``), and
  commit version ``b`` at ``close``. A store cached in this process is reused only if it is
  open, clean (nothing written since its last commit) and either at exactly the committed
  version ``b - 1`` (same manifest checksum) or at an older version that ``b - 1`` descends
  from, in which case it catches up with the changes committed since
  (:meth:`fsstate.PartitionStore.refresh`); anything else is closed and the version is
  restored from storage. So a failed attempt's dirty store is never reused by the retry, and
  a copy whose version was re-committed by another attempt is never advanced.
* Driver (no TaskContext): an in-memory store, nothing opened on storage.
* Bounded input (no batch id): an in-memory store that keeps only the current key's state.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pyspark import TaskContext

from fsstate import PartitionStore
from fsstate.controller import configure as configure_engine
from fsstate.controller import get_controller
from fsstate.errors import ConfigError, VersionNotFoundError
from fsstate.interfaces import KeyedStore
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.identity import WRITER_META, foreign_writer
from fsstate.store.pool import Outcome, StorePool, store_pool
from fsstate_spark.bounded import MemoryStore
from fsstate_spark.config import TieredConfig

StoreKey = tuple[str, str, int]


class TaskMode(str, Enum):
    """Where a processor runs (see the module docstring)."""

    DRIVER = "driver"  # no TaskContext: Spark collects schemas
    BOUNDED = "bounded"  # a batch DataFrame: no batch id
    STREAMING = "streaming"  # a micro-batch of a streaming query

    def __str__(self) -> str:
        return self.value


StoreOutcome = Outcome  # how a streaming task got its store (fsstate.store.pool.Outcome)


BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
RUN_ID_PROPERTY = "spark.jobGroup.id"  # a streaming query sets it to its run id (new per start)


@dataclass(frozen=True)
class TaskInfo:
    """Where the processor runs.

    Attributes:
        mode: driver, bounded or streaming.
        partition: Spark partition id (None on the driver).
        batch_id: micro-batch id (streaming only).
        query_id: the streaming query's id, stable across restarts (streaming only).
        attempt: the task attempt number (0 for the first attempt).
        run_id: the id of this start of the query (streaming only).
    """

    mode: TaskMode
    partition: int | None = None
    batch_id: int | None = None
    query_id: str | None = None
    attempt: int = 0
    run_id: str | None = None


def current_task() -> TaskInfo:
    """Describe the current task from Spark's TaskContext and local properties."""
    tc = TaskContext.get()
    if tc is None:
        return TaskInfo(TaskMode.DRIVER)
    batch = tc.getLocalProperty(BATCH_ID_PROPERTY)
    if batch is None or batch == "":
        return TaskInfo(TaskMode.BOUNDED, tc.partitionId(), attempt=tc.attemptNumber())
    query_id = tc.getLocalProperty(QUERY_ID_PROPERTY) or "unknown-query"
    run_id = tc.getLocalProperty(RUN_ID_PROPERTY) or None
    return TaskInfo(
        TaskMode.STREAMING, tc.partitionId(), int(batch), query_id, tc.attemptNumber(), run_id
    )


def query_root(config: TieredConfig, query_id: str) -> Location:
    """Root of one query's stores: ``<state_uri>/<query id>`` (joined as a path)."""
    return config.root.child(query_id)


_fileios: dict[tuple[Location, bool], FileIO] = {}
_fileios_lock = threading.Lock()


def storage_requests() -> int:
    """Requests this process has made to the state storage of every query (diagnostics and
    benchmarks; see :class:`fsstate.storage.backend.RequestStats`)."""
    with _fileios_lock:
        return sum(f.stats.requests for f in _fileios.values())


def fileio_for(root: Location, fsync: bool) -> FileIO:
    """The process's FileIO of a query root (one client and request counter per root)."""
    key = (root, fsync)
    with _fileios_lock:
        fileio = _fileios.get(key)
        if fileio is None:
            fileio = _fileios[key] = FileIO(root, fsync=fsync)
        return fileio


class StoreCache:
    """The ``tiered()`` side of this worker's :class:`fsstate.store.pool.StorePool`: stores
    keyed by (query root, processor name, partition), at most ``max_cached_stores`` idle ones
    (0 disables reuse), with the time tasks spend getting and committing them."""

    def __init__(self, pool: StorePool) -> None:
        self.pool = pool
        # cumulative wall seconds of this process's streaming tasks (benchmarks, diagnostics)
        self.acquire_s = 0.0  # getting the store (reuse, catch-up or open)
        self.finish_s = 0.0  # TTL cleanup, commit and handing the store back

    @property
    def hits(self) -> int:
        """Stores reused (at the version, or caught up)."""
        return self.pool.hits

    @property
    def caught_up(self) -> int:
        """Of the hits, stores advanced from an older version."""
        return self.pool.caught_up

    @property
    def restores(self) -> int:
        """Stores opened from storage."""
        return self.pool.restores

    @property
    def last_outcome(self) -> Outcome:
        """How the latest acquire got its store."""
        return self.pool.last_outcome

    def acquire(self, config: TieredConfig, task: TaskInfo) -> PartitionStore:
        """The store for a streaming task, at version ``batch_id - 1``.

        Raises:
            VersionNotFoundError: version ``batch_id - 1`` was never committed (state removed,
                or the query ran without fsstate before); the message says what to do.
        """
        assert task.batch_id is not None and task.partition is not None
        assert task.query_id is not None
        apply_engine_settings(config)
        want = task.batch_id - 1 if task.batch_id > 0 else None
        fileio = fileio_for(query_root(config, task.query_id), config.store.fsync)
        self.pool.max_idle = config.max_cached_stores
        try:
            return self.pool.acquire(fileio, config.name, task.partition, want, config.store)
        except VersionNotFoundError as exc:
            raise VersionNotFoundError(
                f"fsstate has no committed state for query {task.query_id}, operator "
                f"{config.name!r}, partition {task.partition} at version {want} under "
                f"{config.state_uri!r} (needed by micro-batch {task.batch_id}). The state "
                "directory must be kept with the checkpoint: restore it, or start the query "
                f"with a new checkpoint. ({exc})"
            ) from exc

    def release(self, config: TieredConfig, task: TaskInfo, store: PartitionStore) -> None:
        """A task committed ``store``: keep it idle for the next batch (or close it)."""
        self.pool.max_idle = config.max_cached_stores
        self.pool.release(store)

    def clear(self) -> None:
        """Close and forget every store; reset the counters."""
        self.pool.clear()

    def __len__(self) -> int:
        return len(self.pool)


_cache = StoreCache(store_pool())
_engine_lock = threading.Lock()


def store_cache() -> StoreCache:
    """The process-wide store cache."""
    return _cache


def apply_engine_settings(config: TieredConfig) -> None:
    """Apply the config's process-wide engine settings in this worker, if they differ."""
    if config.memory_limit_bytes is None and not config.engine:
        return
    current = get_controller().config
    wanted: dict[str, Any] = dict(config.engine)
    if config.memory_limit_bytes is not None:
        wanted["memory_limit_bytes"] = config.memory_limit_bytes
    if all(getattr(current, k) == v for k, v in wanted.items()):
        return
    with _engine_lock:
        limit = wanted.pop("memory_limit_bytes", None)
        configure_engine(memory_limit=limit, **wanted)


def open_store(config: TieredConfig, task: TaskInfo) -> KeyedStore:
    """The store a task works on (see the module docstring for the rules)."""
    if task.mode == TaskMode.STREAMING:
        t0 = time.perf_counter()
        try:
            return _cache.acquire(config, task)
        finally:
            _cache.acquire_s += time.perf_counter() - t0
    return MemoryStore(per_key=task.mode == TaskMode.BOUNDED)


def finish_store(
    config: TieredConfig,
    store: KeyedStore,
    task: TaskInfo,
    now_ms: int | None,
    instance: str | None = None,
) -> None:
    """End of a task: TTL cleanup and commit of version ``batch_id`` (streaming only).

    Args:
        config: the processor's settings.
        store: the task's store.
        task: the task.
        now_ms: the batch's processing time if the task saw it; TTL cleanup runs only then.
        instance: the id of the tiered processor (one per ``tiered()`` call), recorded with
            the run id in the version's meta.

    Raises:
        ConfigError: the version was already committed by another tiered processor of the
            same query run: two operators of one query share the store name.
    """
    if not isinstance(store, PartitionStore):  # in memory: nothing to commit
        store.close()
        return
    assert task.batch_id is not None
    t0 = time.perf_counter()
    try:
        if now_ms is not None:
            store.set_time(now_ms)
            store.expire()
        writer = {"run": task.run_id, "instance": instance}
        store.meta[WRITER_META] = writer
        info = store.commit(task.batch_id)
        if info.adopted and foreign_writer(store.meta.get(WRITER_META), writer):
            raise ConfigError(
                f"two stateful operators of query {task.query_id} store their state under the "
                f"same name {config.name!r} (micro-batch {task.batch_id}, partition "
                f"{task.partition}); give each its own: tiered(processor, name=...)"
            )
        _cache.release(config, task, store)
    finally:
        _cache.finish_s += time.perf_counter() - t0
