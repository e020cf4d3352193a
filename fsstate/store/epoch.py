"""One epoch of one partition store, exactly once: the envelope every caller runs its work in.

Every version is published by an epoch. The callers: ``tiered()`` (a Spark task's ``init``
to its ``close``, ``fsstate_spark.tiered.lifecycle``), the operator runner
(:func:`fsstate.operators.runner.run_epoch`, under the flow driver's tasks and
:class:`fsstate.operators.local.LocalQuery`), the rescales (:mod:`fsstate.store.rescale`, which
resolve the generation here, and publish each new store's first version as an epoch of a
store that starts empty: :meth:`EpochRun.of_new_store`) and the tools
(:mod:`fsstate.store.maintenance`, ``fsstate compact``: an epoch of a store they opened,
:meth:`EpochRun.of_store`). An epoch ``e`` of the store of (operator, partition) goes through
these steps:

1. **Resolve** (:func:`resolve_layout`; once per query run, by whoever plans the epochs): the
   layout generation in force at ``e - 1``. The partition count is recorded with the state at
   first use (generation 0's record, put-if-absent) or checked against the generation's: another
   count raises :class:`fsstate.errors.PartitionCountError` before anything is read or written
   (keys would meet other keys' state); state written by another kind of operator under the
   same name raises :class:`fsstate.errors.ConfigError`.
2. **Acquire** (:func:`begin_epoch`): the store at ``e - 1`` (None for ``e == 0``: empty) from
   the process's :class:`fsstate.store.pool.StorePool` (reused, caught up or restored), its
   clock set to the batch's processing time when the caller has one.
3. **Process**: the caller's work on :attr:`EpochRun.store`.
4. **Commit** (:meth:`EpochRun.commit`): the epoch's :class:`fsstate.store.record.EpochRecord`,
   with the writer's identity, replaces the record keys of the store's meta, and version ``e``
   is published (put-if-absent). If another attempt of the same epoch published ``e`` (the same
   parent, and a writer recorded as this one's is: :func:`fsstate.store.commit.check_adoptable`)
   the store *adopts* it; a version published on another parent or by a writer recorded
   differently (none against one) is a :class:`fsstate.errors.CommitConflictError`; an
   adopted version whose writer is another instance of the same query run means two operators
   share the store: :class:`fsstate.errors.ConfigError`. A version published on the same parent
   by another *planning* of the batch (writers recording different ``planned_ms``: another
   lineage of the query, a copied, restored or rolled-back checkpoint) is
   :class:`fsstate.errors.LineageConflictError`; an epoch begun with ``follow_lineage=True``
   then forks the parent into the branch :func:`fsstate.store.lineage.branch_for` names (the
   same for every task and retry of that planning) and publishes there, so each lineage goes
   on with state of its own; its caller learns the branch from :attr:`EpochRun.store`.
5. **Release** (on success): the store goes back to the pool, clean at ``e``, for the next epoch.

The failure rule, the same for every caller: an exception at any step from acquire on (the
caller's processing included) **discards** the store (:meth:`EpochRun.fail`): it is closed, never
committed and never reused; the next attempt acquires ``e - 1`` from storage. Storage is never
changed by a failure: ``e - 1`` stays intact, and ``e`` is either absent or published whole by
another attempt (which the next attempt adopts). A caller that cannot see every failure (Spark
does not call ``close`` after a task raised) still never reuses the store: the pool closes a
store still acquired when its key is acquired again.

Invariants: an epoch run's :class:`EpochState` goes ``OPEN`` -> ``COMMITTING`` -> ``COMMITTED``
or ``FAILED``, or ``OPEN`` -> ``FAILED``, and no other way: :meth:`EpochRun.commit` and
:meth:`EpochRun.fail` are each final (a call of either on an epoch no longer open raises
:class:`fsstate.errors.StoreClosedError`; a commit that raises leaves it ``FAILED``); an epoch
run used as a context manager fails on any exception that leaves the block while it is open.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import Enum
from types import TracebackType

from fsstate.config import StoreConfig
from fsstate.errors import (
    ConfigError,
    LineageConflictError,
    PartitionCountError,
    StoreClosedError,
)
from fsstate.stats import CommitInfo
from fsstate.storage.fileio import FileIO
from fsstate.store.layout import Layout, in_force, publish_layout, read_layouts, record_path
from fsstate.store.lineage import branch_for
from fsstate.store.partition import PartitionStore
from fsstate.store.pool import Outcome, StorePool, store_pool
from fsstate.store.record import RECORD_KEYS, EpochRecord, Writer

__all__ = [
    "EpochRun",
    "EpochState",
    "StoreAddress",
    "begin_epoch",
    "check_count",
    "record_layouts",
    "resolve_layout",
]

log = logging.getLogger(__name__)


class EpochState(Enum):
    """Where an epoch run is (see the module docstring's invariants)."""

    OPEN = "open"  # acquired, being processed
    COMMITTING = "committing"  # its commit runs
    COMMITTED = "committed"  # published (or adopted); the store went back to the pool
    FAILED = "failed"  # discarded: never committed from, never reused


_NEXT: dict[EpochState, tuple[EpochState, ...]] = {
    EpochState.OPEN: (EpochState.COMMITTING, EpochState.FAILED),
    EpochState.COMMITTING: (EpochState.COMMITTED, EpochState.FAILED),
}


@dataclass(frozen=True)
class StoreAddress:
    """Where one partition store lives: the state root, the operator, the partition, the
    layout generation directory (``""``: generation 0) and the branch of its versions
    (``""``: the trunk; :mod:`fsstate.store.lineage`)."""

    fileio: FileIO
    operator: str
    partition: int
    layout: str = ""
    branch: str = ""


def record_layouts(
    fileio: FileIO, operator: str, *, partitions: int | None, kind: str
) -> list[Layout]:
    """Every generation of ``operator``'s state (:func:`fsstate.store.layout.read_layouts`),
    recording generation 0 with ``partitions`` and ``kind`` at first use (step 1 of the module
    docstring).

    Raises:
        ConfigError: the state was written by another kind of operator, or a layout record
            is unreadable.
    """
    layouts = read_layouts(fileio, operator)
    if partitions is not None and layouts[0].partitions is None and layouts[0].kind is None:
        # generation 0 has no record yet: the first run records its count (put-if-absent: of
        # racing first tasks, one record stands), then reads what stands
        publish_layout(fileio, operator, Layout(0, partitions, kind=kind))
        layouts = read_layouts(fileio, operator)
    if layouts[0].kind not in (None, kind):
        raise ConfigError(
            f"operator {operator!r}: the state under {fileio.describe(operator)} was written by "
            f"a {layouts[0].kind}, this query runs a {kind} under the same name; give it "
            "another name"
        )
    return layouts


def check_count(
    fileio: FileIO, operator: str, layout: Layout, partitions: int | None, remedy: str
) -> Layout:
    """``layout`` if it has ``partitions`` partitions (or either count is unknown).

    Raises:
        PartitionCountError: the generation has another count.
    """
    if partitions is not None and layout.partitions is not None and layout.partitions != partitions:
        where = fileio.describe(record_path(operator, layout.generation))
        raise PartitionCountError(
            f"the state of operator {operator!r} has {layout.partitions} partitions (layout "
            f"generation {layout.generation}, {where}); this run of the query has {partitions}. "
            f"Keys would meet other keys' state: nothing was read or written. To go on, {remedy}"
        )
    return layout


def resolve_layout(
    fileio: FileIO,
    operator: str,
    *,
    partitions: int | None,
    kind: str,
    version: int | None = None,
    remedy: str = "rescale the state first (fsstate.store.rescale)",
) -> Layout:
    """The layout generation in force at ``version`` (step 1 of the module docstring).

    Args:
        fileio: the state root.
        operator: the operator (store) name.
        partitions: the caller's partition count (None: unknown; nothing is checked).
        kind: what runs the operator (recorded by generation 0: an operator class name, or
            ``"tiered"``).
        version: the version the epoch starts from (None: the newest generation).
        remedy: what the :class:`fsstate.errors.PartitionCountError` tells the user to do.

    Raises:
        PartitionCountError: the state at ``version`` is in another partition count.
        ConfigError: the state was written by another kind of operator, or a layout record
            is unreadable.
    """
    layouts = record_layouts(fileio, operator, partitions=partitions, kind=kind)
    return check_count(fileio, operator, in_force(layouts, version), partitions, remedy)


class EpochRun:
    """One epoch of one store between its acquire and its commit (see the module docstring).

    Build it with :func:`begin_epoch`. Attributes: ``store`` (the store to work on), ``epoch``,
    ``outcome`` (how the store was got), ``acquire_ms``.
    """

    __slots__ = (
        "_pool",
        "acquire_ms",
        "epoch",
        "follow_lineage",
        "outcome",
        "state",
        "store",
        "writer",
    )

    def __init__(
        self,
        pool: StorePool,
        store: PartitionStore,
        epoch: int,
        writer: Writer | None,
        outcome: Outcome,
        acquire_ms: float,
        follow_lineage: bool = False,
    ) -> None:
        self._pool = pool
        self.state = EpochState.OPEN
        self.follow_lineage = follow_lineage
        self.store = store
        self.epoch = epoch
        self.writer = writer
        self.outcome = outcome
        self.acquire_ms = acquire_ms

    @classmethod
    def of_store(
        cls,
        store: PartitionStore,
        epoch: int,
        *,
        writer: Writer | None = None,
        pool: StorePool | None = None,
    ) -> EpochRun:
        """The epoch ``epoch`` of a store its caller opened itself (at ``epoch - 1``, outside
        the process's pool: a tool, or a harness with a store of its own memory controller);
        its commit and failure follow the same rule, releasing to or discarding from ``pool``
        (a private one by default).

        Raises:
            ConfigError: the store is not at ``epoch - 1``.
        """
        parent = epoch - 1 if epoch > 0 else None
        if store.version != parent:
            raise ConfigError(
                f"store {store.store_dir} is at version {store.version}; epoch {epoch} starts "
                f"from {parent}"
            )
        return cls(
            pool if pool is not None else StorePool(), store, epoch, writer, Outcome.HIT, 0.0
        )

    @classmethod
    def of_new_store(
        cls,
        store: PartitionStore,
        epoch: int,
        *,
        writer: Writer | None = None,
        pool: StorePool | None = None,
    ) -> EpochRun:
        """The first epoch of a store that starts empty and publishes its first version as
        ``epoch`` (a rescale's new generation: version ``epoch`` holds the rows the old
        generation's has, :mod:`fsstate.store.rescale`); otherwise as :meth:`of_store`.

        Raises:
            ConfigError: the store is not empty and new (it has a version).
        """
        if store.version is not None:
            raise ConfigError(
                f"store {store.store_dir} is at version {store.version}; a new store's first "
                f"epoch starts from none (begin epoch {epoch} with of_store)"
            )
        return cls(
            pool if pool is not None else StorePool(), store, epoch, writer, Outcome.RESTORED, 0.0
        )

    @property
    def done(self) -> bool:
        """Whether the epoch is no longer open (committed, failed, or its commit runs)."""
        return self.state is not EpochState.OPEN

    def _to(self, state: EpochState) -> None:
        """Move to ``state``, where the run's state allows it (see the module docstring).

        Raises:
            StoreClosedError: the epoch already committed or failed.
        """
        if state not in _NEXT.get(self.state, ()):
            raise StoreClosedError(
                f"epoch {self.epoch} of store {self.store.store_dir} already "
                f"{self.state.value}; begin the next epoch with begin_epoch"
            )
        self.state = state

    def commit(self, record: EpochRecord | None = None) -> CommitInfo:
        """Record ``record`` (with this run's writer) and publish version ``epoch``; the store
        goes back to the pool. Any failure discards the store and raises.

        Raises:
            CommitError: storage failed; the previous version is intact, retry is safe.
            CommitConflictError: the version was published on another parent, or by another
                writer (one recorded against none).
            ConfigError: the version was published by another instance of the same run.
            StoreClosedError: the epoch already committed or failed.
        """
        self._to(EpochState.COMMITTING)
        try:
            info = self._commit(record or EpochRecord())
        except BaseException:
            self._to(EpochState.FAILED)
            self._pool.discard(self.store)
            raise
        self._to(EpochState.COMMITTED)
        self._pool.release(self.store)
        return info

    def _commit(self, record: EpochRecord) -> CommitInfo:
        store = self.store
        if self.writer is not None:
            record = EpochRecord(
                record.watermark_ms, record.event_time_max_ms, record.combine, self.writer
            )
        for key in RECORD_KEYS:
            store.meta.pop(key, None)
        store.meta.update(record.to_meta())
        try:
            info = store.commit(self.epoch)
        except LineageConflictError:
            planned = self.writer.planned_ms if self.writer is not None else None
            if not self.follow_lineage or planned is None:
                raise
            parent = -1 if store.version is None else store.version
            branch = branch_for(store.branch, parent, planned)
            log.warning(
                "fsstate: version %s of %s (%s) was committed by another lineage of the query "
                "(a copied or restored checkpoint); this one goes on on branch %s",
                self.epoch,
                store.store_dir,
                store.branch or "trunk",
                branch,
            )
            store.fork_to(branch)
            info = store.commit(self.epoch)
        if info.adopted and self.writer is not None:
            published = Writer.from_meta(store.committed_writer)
            if published is not None and published.is_foreign_to(self.writer):
                raise ConfigError(
                    "two stateful operators of one query store their state under the same "
                    f"name {store.operator!r} (epoch {self.epoch} of partition "
                    f"{store.partition} was already committed by the other); give each its "
                    "own name (pass name=...)"
                )
        return info

    def fail(self) -> None:
        """Discard the store: the epoch never commits from it, and it is never reused.

        Raises:
            StoreClosedError: the epoch already committed or failed.
        """
        self._to(EpochState.FAILED)
        self._pool.discard(self.store)

    def __enter__(self) -> EpochRun:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and self.state is EpochState.OPEN:
            self.fail()


def begin_epoch(
    ref: StoreAddress,
    epoch: int,
    *,
    config: StoreConfig | None = None,
    writer: Writer | None = None,
    now_ms: int | None = None,
    pool: StorePool | None = None,
    follow_lineage: bool = False,
) -> EpochRun:
    """Acquire the store of ``ref`` at ``epoch - 1`` for ``epoch`` (step 2 of the module
    docstring), its clock at ``now_ms`` when given; with ``follow_lineage`` a commit that
    meets another lineage's version branches (step 4).

    Raises:
        VersionNotFoundError: ``epoch - 1`` is not on storage (nothing is acquired).
    """
    pool = pool if pool is not None else store_pool()  # an empty pool is falsy (__len__)
    t0 = time.perf_counter()
    parent = epoch - 1 if epoch > 0 else None
    store = pool.acquire(
        ref.fileio,
        ref.operator,
        ref.partition,
        parent,
        config or StoreConfig(),
        ref.layout,
        branch=ref.branch,
    )
    outcome = pool.last_outcome
    try:
        if now_ms is not None:
            store.set_time(now_ms)
    except BaseException:
        pool.discard(store)
        raise
    ms = (time.perf_counter() - t0) * 1000
    return EpochRun(pool, store, epoch, writer, outcome, ms, follow_lineage)
