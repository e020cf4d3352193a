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
* The partition count of a tiered operator's state is recorded with it, once
  (``<state_uri>/<q>/<name>/operator.json``, put-if-absent: :mod:`fsstate.store.layout`'s
  generation 0), from the task's ``spark.sql.shuffle.partitions`` (:class:`TaskInfo`); a task
  that finds another count raises :class:`fsstate.errors.PartitionCountError` before its store
  is opened, so nothing is read or written with keys in the wrong partitions. Checked once per
  process, query run and count (1 conditional PUT, and 1 LIST + GETs if the record exists);
  skipped if the task does not know its count. State written before the record existed gets
  the count of the first run that records it.
* Driver (no TaskContext): an in-memory store, nothing opened on storage.
* Bounded input (no batch id): an in-memory store that keeps only the current key's state.
"""

from __future__ import annotations

import time

from fsstate import PartitionStore
from fsstate.errors import ConfigError, PartitionCountError, VersionNotFoundError
from fsstate.interfaces import KeyedStore
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.identity import WRITER_META, foreign_writer
from fsstate.store.layout import Layout, in_force, publish_layout, read_layouts, record_path
from fsstate.store.pool import Outcome, StorePool, store_pool
from fsstate_spark.runtime import TaskInfo, TaskMode, apply_engine_settings, fileio_for
from fsstate_spark.tiered.bounded import MemoryStore
from fsstate_spark.tiered.settings import TieredConfig

StoreKey = tuple[str, str, int]


StoreOutcome = Outcome  # how a streaming task got its store (fsstate.store.pool.Outcome)


def query_root(config: TieredConfig, query_id: str) -> Location:
    """Root of one query's stores: ``<state_uri>/<query id>`` (joined as a path)."""
    return config.root.child(query_id)


class StoreCache:
    """The ``tiered()`` side of this worker's :class:`fsstate.store.pool.StorePool`: stores
    keyed by (query root, processor name, partition), at most ``max_cached_stores`` idle ones
    (0 disables reuse), with the time tasks spend getting and committing them."""

    def __init__(self, pool: StorePool) -> None:
        self.pool = pool
        # cumulative wall seconds of this process's streaming tasks (benchmarks, diagnostics)
        self.acquire_s = 0.0  # getting the store (reuse, catch-up or open)
        self.finish_s = 0.0  # TTL cleanup, commit and handing the store back
        self._checked: set[tuple[str, str, str | None, int]] = set()  # partition counts seen

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
        self.check_partitions(fileio, config, task)
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

    def check_partitions(self, fileio: FileIO, config: TieredConfig, task: TaskInfo) -> None:
        """Record the state's partition count, or check the task's against it (see the
        module docstring).

        Raises:
            PartitionCountError: the state was written with another partition count.
        """
        n = task.partitions
        if n is None:
            return
        key = (fileio.describe(""), config.name, task.run_id, n)
        if key in self._checked:
            return
        if not publish_layout(fileio, config.name, Layout(0, n, kind="tiered")):
            have = in_force(read_layouts(fileio, config.name))
            if have.partitions is not None and have.partitions != n:
                raise PartitionCountError(
                    f"the tiered state of {config.name!r} (query {task.query_id}) was written "
                    f"with {have.partitions} partitions "
                    f"({fileio.describe(record_path(config.name, 0))}); this run of the query "
                    f"has {n} (spark.sql.shuffle.partitions, which Spark restores from the "
                    "checkpoint's offsets log). Keys would meet other keys' state: nothing was "
                    "read or written. Rescaling tiered() state is not supported yet: run the "
                    f"query with {have.partitions} partitions (undo the checkpoint's "
                    "repartition), or start it with a new checkpoint and state location"
                )
        self._checked.add(key)

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


def store_cache() -> StoreCache:
    """The process-wide store cache."""
    return _cache


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
