"""Which store a task uses, and the per-process cache of committed stores.

Measured on pyspark 4.3 (local mode), with PySpark's own loop (fsstate's keyed loop,
:mod:`fsstate_spark.tiered.fast_loop`, calls ``init`` and ``close`` the same way):

* ``init`` and ``close`` run once per partition per micro-batch (partitions without rows too),
  in whichever Python worker gets the task; consecutive batches of one partition often land
  in different workers.
* ``init``/``close`` also run once on the driver, with no TaskContext, to collect schemas.
* A task that raises never reaches ``close``; its retry may run in the same worker or another.
* A bounded (batch) DataFrame has a TaskContext but no ``streaming.sql.batchId``.

Rules that follow (the invariants of this module):

* Streaming task of batch ``b`` for partition ``p`` of query ``q``: one epoch
  (:mod:`fsstate.store.epoch`) of the store of ``(<state_uri>/<q>, <name>, p)``, begun in
  ``init`` (the store at ``b - 1``, empty for ``b == 0``, from the process's pool: reused if
  clean and at ``b - 1``, caught up from an older version ``b - 1`` descends from, else
  restored) and committed as version ``b`` at ``close``, with the epoch's failure rule: an
  exception in any callback or in ``close`` discards the store (the processor wrapper fails
  the epoch, :mod:`fsstate_spark.tiered.processor`; a failure Spark sees outside them leaves
  the store acquired, and the pool closes it when the partition is acquired again). So a
  failed attempt's dirty store is never reused by the retry, and a copy whose version was
  re-committed by another attempt is never advanced.
* The partition count of a tiered operator's state is recorded with it, once
  (``<state_uri>/<q>/<name>/operator.json``, put-if-absent: :mod:`fsstate.store.layout`'s
  generation 0), from the task's ``spark.sql.shuffle.partitions`` (:class:`TaskInfo`); a
  rescale (:mod:`fsstate_spark.tiered.query_rescale`) adds a generation with another count. A task
  opens its store in the generation its lineage marker names, else the one whose first
  version is ``b - 1`` (a rescale at ``b - 1``), else the one in force at ``b - 1``; two
  lineages rescaled at the same batch are refused as ambiguous. One that finds another count
  there raises :class:`fsstate.errors.PartitionCountError` before its store is opened, so
  nothing is read or written with keys in the wrong partitions
  (:func:`fsstate.store.epoch.record_layouts` and :func:`fsstate.store.epoch.check_count`,
  kind ``tiered``). Resolved once per process, query run and count (1 conditional PUT, and
  1 GET + 1 LIST + a GET per rescale if the record exists). State written before the record
  existed gets the count of the first run that records it; a task that does not know its
  count skips the check (and reads the generations).
* Identity: a tiered processor's state is ``<state_uri>/<query id>/<name>``, ``name`` being
  ``tiered(name=...)`` when given, else the processor's class name. Spark keys a query's state
  by its operator, not by the processor's class, so a restart may run another class (a new
  version, a rename) on the same state: when the class name has no state at ``b - 1`` and the
  query's state holds exactly one tiered operator, the task continues that one
  (:func:`operator_name`; one HEAD per process and query run, and a recursive LIST of the
  query's state only in that case). With several, it refuses (``name=`` says which). Stores
  keep the name they were first written under, so state written before this rule reads as it
  did.
* Lineage: each run of the query writes a lineage of its own (:mod:`fsstate.store.lineage`
  rule 1). A task opens the lineage this process saw its run write for the partition; when
  that is not provably this run's (a run's first batch, a process new to the run), it reads
  Spark's state (:mod:`fsstate_spark.tiered.lineage`: the lineage the checkpoint goes with),
  opens version ``b - 1`` of it (its checksum checked where the record names that version,
  else :class:`fsstate.errors.LineageMismatchError` before anything is read or written) and,
  unless this run committed it, forks it into :func:`fsstate.store.lineage.lineage_for`
  ``(b - 1, planned, run)`` (the same name for every task and retry of the run); the task
  that forked records the lineage in Spark's state at its end. Without such a record (the
  first batch after a rescale moved Spark's rows, or state written before lineages), the
  trunk of the generation whose first version is ``b - 1``, else of the one in force at
  ``b - 1`` (a store lacking that version there: the lineage committed last, logged). A task
  that does not know its run (outside Spark's streaming engine) goes on where it found the
  state. So a copied, restored or rolled-back checkpoint never reads or writes another
  lineage's versions, a retry of the same planning still adopts, and one batch's versions
  in every partition belong to one lineage.
* Every tiered processor declares one state variable of Spark's own, :data:`SPARK_MARKER`,
  never written: Spark's offline repartition of a checkpoint
  (``spark._streamingCheckpointManager.repartition``) needs the operator's store to hold a
  state variable, and the rescale finds tiered operators (and their grouping key's Spark types)
  in the checkpoint by it.
* Driver (no TaskContext): an in-memory store, nothing opened on storage.
* Bounded input (no batch id): an in-memory store that keeps only the current key's state.
* A micro-batch run without its batch id (Spark Connect's ``foreachBatch``:
  :attr:`fsstate_spark.runtime.TaskMode.UNNUMBERED`) raises :class:`fsstate.errors.ConfigError`
  before anything is read or written: its state could be neither restored nor committed, and
  an in-memory store would silently forget it between batches.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

from pyspark.sql.types import BooleanType, StructField, StructType

from fsstate.errors import ConfigError, LineageMismatchError, VersionNotFoundError
from fsstate.interfaces import KeyedStore
from fsstate.stats import CommitInfo
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.epoch import EpochRun, StoreAddress, begin_epoch, check_count, record_layouts
from fsstate.store.layout import Layout, continued_operator, in_force, operators_of_kind
from fsstate.store.lineage import lineage_for
from fsstate.store.pool import Outcome, StorePool, store_pool
from fsstate.store.record import Writer
from fsstate_spark.runtime import TaskInfo, TaskMode, apply_engine_settings, fileio_for
from fsstate_spark.tiered.lineage import Lineage, MarkerSource
from fsstate_spark.tiered.settings import TieredConfig
from fsstate_spark.tiered.transient import TransientStore

log = logging.getLogger(__name__)

SPARK_MARKER = "_fsstate_tiered"  # the state variable every tiered processor declares in Spark
# a StructType, not a DDL string: PySpark's handle sends a string to the JVM's SQL parser, a
# state-server round trip, twice (to declare the variable, then for its client)
SPARK_MARKER_SCHEMA = StructType([StructField("present", BooleanType(), True)])
_OPERATIONS = "See docs/operations.md (copying, restoring and rolling back a query)."
TIERED_KIND = "tiered"  # the kind recorded with a tiered() operator's layout


@dataclass(frozen=True)
class Finished:
    """A task's committed epoch: the commit and its duration, the manifest's publish included
    (the figures a task's receipt carries, :mod:`fsstate_spark.receipts`)."""

    commit: CommitInfo
    commit_ms: float


@dataclass
class TaskStore:
    """The store a task works on, its epoch (None: an in-memory store, nothing to commit), and
    whether the task started its run's lineage (Spark's state then records it at the end)."""

    store: KeyedStore
    epoch: EpochRun | None = None
    started_lineage: bool = False

    def fail(self) -> None:
        """The task failed: discard its epoch's store (never committed, never reused)."""
        if self.epoch is not None and not self.epoch.done:
            self.epoch.fail()


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
        # the generations per (root, name, run, count): read once per query run
        self._layouts: dict[tuple[str, str, str | None, int | None], tuple[str, list[Layout]]] = {}
        # the (generation, lineage) each (root, name, partition, run) writes, as seen here
        self._lines: dict[tuple[str, str, int, str | None], tuple[str, str]] = {}

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

    def acquire(
        self,
        config: TieredConfig,
        task: TaskInfo,
        instance: str | None,
        marker: MarkerSource | None = None,
        planned_ms: int | None = None,
    ) -> tuple[EpochRun, bool]:
        """Begin the streaming task's epoch: its store at version ``batch_id - 1`` on the
        lineage this run writes (:mod:`fsstate.store.lineage` rule 1; see the module docstring:
        Spark's state is asked only when the version is not provably this run's).

        Returns:
            The epoch, and whether Spark's state must record its lineage at the task's end
            (it started a lineage here: the run's first batch).

        Raises:
            LineageMismatchError: the store's version ``batch_id - 1`` of the lineage Spark's
                state names is not the one this checkpoint committed (another history):
                nothing was read or written.
            VersionNotFoundError: version ``batch_id - 1`` was never committed (state removed,
                or the query ran without fsstate before); the message says what to do.
            PartitionCountError: the state at ``batch_id - 1`` has another partition count.
        """
        assert task.batch_id is not None and task.partition is not None
        assert task.query_id is not None
        apply_engine_settings(config)
        want = task.batch_id - 1 if task.batch_id > 0 else None
        fileio = fileio_for(query_root(config, task.query_id), config.store.fsync)
        self.pool.max_idle = config.max_cached_stores
        name, layouts = self.layouts_for(fileio, config, task)
        here = (fileio.describe(""), name, task.partition, task.run_id)
        writer = Writer(task.run_id, instance, planned_ms)
        known = self._lines.get(here)  # the lineage this run writes, as this process saw it
        if known is not None and want is not None:
            with contextlib.suppress(VersionNotFoundError):
                run = self._begin(fileio, name, task, known, config, writer)
                if _ours(run, task.run_id):
                    return run, False
                run.fail()
        found = marker.read() if marker is not None else None
        source, mine = self._source(fileio, name, layouts, task, found, want)
        try:
            run = self._begin(fileio, name, task, source, config, writer, want)
        except VersionNotFoundError:
            guess = None if mine is not None else _unmarked(fileio, name, task, source[0], want)
            if guess is None:
                raise
            source = (source[0], guess)
            run = self._begin(fileio, name, task, source, config, writer, want)
        if mine is not None and mine.version == want and run.store.checksum != mine.checksum:
            run.fail()
            raise self._mismatch(config, task, name, source[1], want, run, mine)
        # the first batch of this run: go on on a lineage of the run's own (a task that does
        # not know its run, outside Spark's streaming engine, goes on where it found the state)
        started = task.run_id is not None and (want is None or not _ours(run, task.run_id))
        if started:
            child = lineage_for(-1 if want is None else want, planned_ms, task.run_id)
            if run.store.branch != child:
                try:
                    run.store.fork_to(child)
                except BaseException:
                    run.fail()
                    raise
        self._lines[here] = (run.store.layout, run.store.branch)
        return run, started

    def _source(
        self,
        fileio: FileIO,
        name: str,
        layouts: list[Layout],
        task: TaskInfo,
        found: Lineage | None,
        want: int | None,
    ) -> tuple[tuple[str, str], Lineage | None]:
        """Where the task's state at ``want`` is: (generation directory, lineage), and the
        marker that said so (None: no marker of this store). Spark's state names it; without
        a marker of this store (the first batch of a query, or after a rescale moved Spark's
        rows), the trunk of the generation whose first version is ``want``, else of the one
        in force at ``want`` (state written before lineages were recorded).

        Raises:
            PartitionCountError: that generation has another partition count.
            ConfigError: several generations start at ``want`` (two lineages were rescaled at
                the same batch) and Spark's state says nothing.
        """
        assert task.partition is not None
        gens = {g.dir: g for g in layouts}
        remedy = _count_remedy(task)
        if found is not None and found.partition == task.partition and found.layout in gens:
            gen = gens[found.layout]
            if gen.partitions in (None, task.partitions):
                return (gen.dir, found.branch), found
        starting = [g for g in layouts if g.generation and g.since == want]
        if len(starting) > 1:
            raise ConfigError(
                f"query {task.query_id}, operator {name!r}: generations "
                f"{[g.generation for g in starting]} of its state (under "
                f"{fileio.describe(name)}) both start at version {want}: two lineages of the "
                "query were rescaled at the same batch, and this checkpoint's Spark state does "
                "not say which one it goes with. Nothing was read or written; drop the "
                "generation of the other lineage (fsstate gc) or run its checkpoint's repair "
                f"(fsstate-spark repair <checkpoint>). {_OPERATIONS}"
            )
        gen = starting[0] if starting else in_force(layouts, want)
        check_count(fileio, name, gen, task.partitions, remedy)
        return (gen.dir, ""), None

    def _begin(
        self,
        fileio: FileIO,
        name: str,
        task: TaskInfo,
        where: tuple[str, str],
        config: TieredConfig,
        writer: Writer,
        want: int | None = -1,
    ) -> EpochRun:
        """:func:`begin_epoch` of the store in generation ``where[0]`` on lineage ``where[1]``;
        with ``want`` given, a missing version raises the message for users."""
        assert task.batch_id is not None and task.partition is not None
        ref = StoreAddress(fileio, name, task.partition, where[0], where[1])
        try:
            return begin_epoch(
                ref,
                task.batch_id,
                config=config.store,
                writer=writer,
                pool=self.pool,
                follow_lineage=True,
            )
        except VersionNotFoundError as exc:
            if want == -1:
                raise
            raise VersionNotFoundError(
                f"fsstate has no committed state for query {task.query_id}, operator "
                f"{name!r}, partition {task.partition} at version {want} under "
                f"{config.state_uri!r} (needed by micro-batch {task.batch_id}). The state "
                "directory must be kept with the checkpoint: restore it, or roll the query "
                "back to the newest batch whose state is whole (fsstate-spark repair "
                "<checkpoint>), or start the query with a new checkpoint. "
                f"{_OPERATIONS} ({exc})"
            ) from exc

    @staticmethod
    def _mismatch(
        config: TieredConfig,
        task: TaskInfo,
        name: str,
        branch: str,
        want: int | None,
        run: EpochRun,
        mine: Lineage,
    ) -> LineageMismatchError:
        on = f"branch {branch}" if branch else "the trunk"
        return LineageMismatchError(
            f"query {task.query_id}, operator {name!r}, partition {task.partition}: version "
            f"{want} on {on} under {config.state_uri!r} is not the state this checkpoint "
            f"committed with batch {want} (manifest checksum {run.store.checksum}, the "
            f"checkpoint recorded {mine.checksum}): the state directory holds another "
            "history (restored from another time, or replaced). Nothing was read or "
            "written. Restore the state directory that goes with this checkpoint, or roll "
            "the query back to the newest batch of this state (fsstate-spark repair "
            f"<checkpoint>), or start the query from a new checkpoint. {_OPERATIONS}"
        )

    def layouts_for(
        self, fileio: FileIO, config: TieredConfig, task: TaskInfo
    ) -> tuple[str, list[Layout]]:
        """The operator (store name) the task's state is under and its layout generations,
        read once per query run and count (:func:`operator_name`,
        :func:`fsstate.store.epoch.record_layouts`; see the module docstring).

        Raises:
            ConfigError: the processor's default name has no state and several tiered
                operators of the query do, or another kind of operator wrote the state.
        """
        n = task.partitions
        key = (fileio.describe(""), config.name, task.run_id, n)
        have = self._layouts.get(key)
        if have is not None:
            return have
        assert task.batch_id is not None
        name = operator_name(fileio, config, task)
        layouts = record_layouts(fileio, name, partitions=n, kind=TIERED_KIND)
        self._layouts[key] = (name, layouts)
        return name, layouts

    def clear(self) -> None:
        """Close and forget every store and resolved generation; reset the counters."""
        self.pool.clear()
        self._layouts.clear()
        self._lines.clear()

    def __len__(self) -> int:
        return len(self.pool)


def _unmarked(
    fileio: FileIO, name: str, task: TaskInfo, layout: str, want: int | None
) -> str | None:
    """The lineage to continue when Spark's state names none and the trunk lacks ``want``
    (state whose markers were not written: the lineage committed last that holds ``want``,
    as readers default to it; logged), or None."""
    assert task.partition is not None
    if want is None:
        return None
    # The catalog is the readers' layer: a worker loads it only on this rare path.
    from fsstate.inspect.catalog import all_stores

    stores = [s for s in all_stores(fileio, operator=name) if s.layout == layout]
    holding = [s for s in stores if s.partition == task.partition]
    lines = [b for s in holding for b in s.lineages if want in b.versions]
    if not lines:
        return None
    best = max(lines, key=lambda b: (b.newest_ms or 0, b.name))
    log.warning(
        "fsstate: query %s, operator %r, partition %s: Spark's state records no lineage and the "
        "trunk has no version %s; going on from lineage %s, the one committed to last",
        task.query_id,
        name,
        task.partition,
        want,
        best.name,
    )
    return best.name


def _ours(run: EpochRun, run_id: str | None) -> bool:
    """Whether the version ``run``'s store is at was committed by query run ``run_id`` (a
    task that does not know its run takes whatever it found as its own)."""
    if run_id is None:
        return True
    writer = Writer.from_meta(run.store.committed_writer)
    return writer is not None and writer.run == run_id


def _count_remedy(task: TaskInfo) -> str:
    return (
        f"query {task.query_id}: the count comes from spark.sql.shuffle.partitions, "
        "which Spark restores from the checkpoint's offsets log. Stop the query and "
        "rescale Spark's checkpoint and fsstate's state together: "
        "fsstate_spark.rescale_query(spark, <checkpoint>, partitions) or `python -m "
        "fsstate_spark rescale <checkpoint> <partitions>` (if only Spark's checkpoint "
        "was repartitioned, that moves fsstate's state to match it)"
    )


def tiered_operators(fileio: FileIO) -> list[str]:
    """The operators of a query's state root that ``tiered()`` wrote, sorted."""
    return operators_of_kind(fileio, TIERED_KIND)


def operator_name(fileio: FileIO, config: TieredConfig, task: TaskInfo) -> str:
    """The operator a task's state is under: ``name=`` when given; else the processor's class
    name, unless state exists at ``b - 1`` under no such name but under exactly one other
    tiered operator of the query: then that one (the query's operator, as Spark keys state by
    the query's operator, not by the processor's class; see the module docstring).

    Raises:
        ConfigError: several tiered operators of the query have state and none has the name.
    """
    name = config.name
    if config.name_given or not task.batch_id:
        return name
    return continued_operator(
        fileio,
        name,
        TIERED_KIND,
        f"tiered(): the processor {name!r} of query {task.query_id}",
        several="tiered operators",
        remedy="tiered(..., name=<the one it continues>)",
    )


_cache = StoreCache(store_pool())


def store_cache() -> StoreCache:
    """The process-wide store cache."""
    return _cache


def open_store(
    config: TieredConfig,
    task: TaskInfo,
    instance: str | None = None,
    marker: MarkerSource | None = None,
    planned_ms: int | None = None,
) -> TaskStore:
    """The store a task works on (see the module docstring for the rules).

    Args:
        config: the processor's settings.
        task: the task.
        instance: the id of the tiered processor (one per ``tiered()`` call), recorded with
            the run id as the epoch's writer.
        marker: where Spark's state records the partition's lineage, read only when needed
            (None: not available; :mod:`fsstate_spark.tiered.lineage`).
        planned_ms: when Spark planned the batch (recorded with the version).
    """
    if task.mode == TaskMode.UNNUMBERED:
        raise ConfigError(
            f"tiered() state {config.name!r}: this micro-batch runs without its batch id (a "
            "foreachBatch sink on Spark Connect runs the batch's DataFrame as a job of its "
            "own), so its state can be neither restored nor committed: on Spark Connect give "
            "a tiered() query another sink (writeStream.format(...), toTable, foreach), or run "
            "the processor on fsstate's flow driver (fsstate_spark.operators.write_stream), "
            "whose sink runs on Connect"
        )
    if task.mode == TaskMode.STREAMING:
        t0 = time.perf_counter()
        try:
            run, started = _cache.acquire(config, task, instance, marker, planned_ms)
        finally:
            _cache.acquire_s += time.perf_counter() - t0
        return TaskStore(run.store, run, started)
    return TaskStore(TransientStore(per_key=task.mode == TaskMode.BOUNDED))


def finish_store(task_store: TaskStore, now_ms: int | None) -> Finished | None:
    """End of a task: TTL cleanup and commit of the epoch (streaming only); on any failure the
    epoch's store is discarded and the error raised.

    Args:
        task_store: the task's store and epoch.
        now_ms: the batch's processing time if the task saw it; TTL cleanup runs only then.

    Returns:
        The commit and its whole duration (None: an in-memory store, nothing committed).

    Raises:
        ConfigError: the version was already committed by another tiered processor of the
            same query run: two operators of one query share the store name.
    """
    run = task_store.epoch
    if run is None:  # in memory: nothing to commit
        task_store.store.close()
        return None
    t0 = time.perf_counter()
    try:
        with run:
            if now_ms is not None:
                run.store.set_time(now_ms)
                run.store.expire()
            t1 = time.perf_counter()
            info = run.commit()
            return Finished(info, (time.perf_counter() - t1) * 1000)
    finally:
        _cache.finish_s += time.perf_counter() - t0
