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
  generation 0), from the task's ``spark.sql.shuffle.partitions`` (:class:`TaskInfo`); a
  rescale (:mod:`fsstate_spark.tiered.rescale`) adds a generation with another count. A task
  opens its store in the generation in force at ``b - 1``, and one that finds another count
  there raises :class:`fsstate.errors.PartitionCountError` before its store is opened, so
  nothing is read or written with keys in the wrong partitions. Resolved once per process,
  query run and count (1 conditional PUT, and 1 GET + 1 LIST + a GET per rescale if the record
  exists). State written before the record existed gets the count of the first run that
  records it; a task that does not know its count skips the check (and reads the generations).
* Every tiered processor declares one state variable of Spark's own, :data:`SPARK_MARKER`,
  never written: Spark's offline repartition of a checkpoint
  (``spark._streamingCheckpointManager.repartition``) needs the operator's store to hold a
  state variable, and the rescale finds tiered operators (and their grouping key's Spark types)
  in the checkpoint by it.
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
SPARK_MARKER = "_fsstate_tiered"  # the state variable every tiered processor declares in Spark
SPARK_MARKER_SCHEMA = "present BOOLEAN"


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
        # the generation in force per (root, name, run, count): resolved once per query run
        self._layouts: dict[tuple[str, str, str | None, int | None], Layout] = {}

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
        layout = self.layout_for(fileio, config, task)
        try:
            return self.pool.acquire(
                fileio, config.name, task.partition, want, config.store, layout.dir
            )
        except VersionNotFoundError as exc:
            raise VersionNotFoundError(
                f"fsstate has no committed state for query {task.query_id}, operator "
                f"{config.name!r}, partition {task.partition} at version {want} under "
                f"{config.state_uri!r} (needed by micro-batch {task.batch_id}). The state "
                "directory must be kept with the checkpoint: restore it, or start the query "
                f"with a new checkpoint. ({exc})"
            ) from exc

    def layout_for(self, fileio: FileIO, config: TieredConfig, task: TaskInfo) -> Layout:
        """The layout generation the task's store is in (recording the partition count first,
        or checking the task's against it; see the module docstring).

        Raises:
            PartitionCountError: the state at ``b - 1`` was written with another count.
        """
        n = task.partitions
        key = (fileio.describe(""), config.name, task.run_id, n)
        have = self._layouts.get(key)
        if have is not None:
            return have
        first = Layout(0, n, kind="tiered")
        if n is not None and publish_layout(fileio, config.name, first):
            have = first  # the first record: no rescale can exist before it
        else:
            assert task.batch_id is not None
            want = task.batch_id - 1 if task.batch_id > 0 else None
            have = in_force(read_layouts(fileio, config.name), want)
        if n is not None and have.partitions is not None and have.partitions != n:
            where = fileio.describe(record_path(config.name, have.generation))
            raise PartitionCountError(
                f"the tiered state of {config.name!r} (query {task.query_id}) has "
                f"{have.partitions} partitions ({where}); this run of the query has {n} "
                "(spark.sql.shuffle.partitions, which Spark restores from the checkpoint's "
                "offsets log). Keys would meet other keys' state: nothing was read or written. "
                "To change the partition count of a tiered() query, stop it and rescale "
                "Spark's checkpoint and fsstate's state together: "
                "fsstate_spark.rescale_query(spark, <checkpoint>, partitions) or "
                "`python -m fsstate_spark rescale <checkpoint> <partitions>` (if only Spark's "
                "checkpoint was repartitioned, that moves fsstate's state to match it)"
            )
        self._layouts[key] = have
        return have

    def release(self, config: TieredConfig, task: TaskInfo, store: PartitionStore) -> None:
        """A task committed ``store``: keep it idle for the next batch (or close it)."""
        self.pool.max_idle = config.max_cached_stores
        self.pool.release(store)

    def clear(self) -> None:
        """Close and forget every store and resolved generation; reset the counters."""
        self.pool.clear()
        self._layouts.clear()

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
