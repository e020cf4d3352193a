"""Running one operator on one partition for one epoch, exactly once.

:func:`run_epoch` takes the store of (operator, partition) at the epoch's parent version from the
process's :class:`fsstate.store.pool.StorePool`, sorts the input canonically, runs the
operator, records the event time it saw and the watermark it used in the version's meta, and
commits the epoch.

Invariants:

* Exactly once: the epoch's version is published once. Another attempt of the same epoch (a
  task retry, a recomputed stage, a batch re-run after a restart, a speculative task) opens
  the same parent, sees the same input set, so computes the same output and state; its commit
  finds the version published on the same parent and adopts it. Either way the output
  returned is the one the published version stands for.
* Nothing of a failed attempt is reused: its store is discarded from the pool (never
  committed), and the next attempt reopens the parent from storage.
* Two operators never share a store: each commit records its *writer* (the run and the
  operator instance) in the version's meta; an attempt that finds its version published by
  another instance of the same run raises :class:`fsstate.errors.ConfigError` (two operators of
  one query were given the same name).
* An operator's partition count is recorded with its state, per layout generation
  (:mod:`fsstate.store.layout`: ``<operator>/operator.json`` for the first, put-if-absent, then
  one record per rescale); :func:`check_layout` returns the generation in force, and a query
  that asks for another count fails at start with :class:`fsstate.errors.PartitionCountError`,
  before any state is read (rows would otherwise land in partitions whose state holds other
  keys): the state must be rescaled first (:mod:`fsstate.store.rescale`). :func:`run_epoch`
  opens the stores of the generation it is given (``layout``, resolved once by the driver).
* The meta of every version holds ``event_time_max_ms`` (the running maximum event time per
  watermark input, in ms, over this partition's epochs so far) and ``watermark_ms`` (the
  eviction watermark the epoch used): what a driver needs to compute the next watermark
  (:mod:`fsstate.operators.watermarks`) without reading any data.

Diagnostics: with the environment variable ``FSSTATE_EPOCH_LOG`` naming a file, every epoch
that commits appends one JSON line to it (:func:`log_epoch`: operator, partition, epoch, process
id, rows in and out, how the store was got, whether the commit was adopted, the times of the
phases in ms and the epoch's start and end as Unix ms). Lines are written with one ``write`` of
a file opened for appending, so processes sharing the file do not interleave them; a failure to
write is ignored (the epoch's result does not depend on it). Unset: nothing is written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from fsstate.config import StoreConfig
from fsstate.errors import ConfigError, PartitionCountError
from fsstate.operators.base import (
    EVENT_TIME_META,
    WATERMARK_META,
    Epoch,
    Operator,
    canonical_order,
    max_ms,
)
from fsstate.operators.combining import COMBINE_META
from fsstate.stats import CommitInfo
from fsstate.storage.fileio import FileIO
from fsstate.store.identity import WRITER_META, foreign_writer
from fsstate.store.layout import LAYOUT_FILE, Layout, publish_layout, read_layouts
from fsstate.store.pool import StorePool, store_pool

__all__ = ["LAYOUT_FILE", "EpochResult", "check_layout", "log_epoch", "run_epoch"]

EPOCH_LOG_ENV = "FSSTATE_EPOCH_LOG"  # a file each committed epoch appends a JSON line to


@dataclass(frozen=True)
class EpochResult:
    """What one partition's epoch produced.

    Attributes:
        output: the operator's output rows.
        commit: the commit of the epoch's version (``adopted`` if another attempt published it).
        rows_in: input rows.
        process_ms: time spent in the operator.
        total_ms: time of the whole epoch (store, sort, operator, commit).
        meta: the published version's meta (the watermark used, the event times seen, the
            combine record).
        acquire_ms: time getting the store at the parent version from the pool.
        commit_ms: time recording the meta, committing and the operator's after-commit step.
        store: how the store was got (``hit``, ``caught_up`` or ``restored``).
    """

    output: pa.Table
    commit: CommitInfo
    rows_in: int
    process_ms: float
    total_ms: float
    meta: dict[str, Any] | None = None
    acquire_ms: float = 0.0
    commit_ms: float = 0.0
    store: str = ""


def run_epoch(
    op: Operator,
    fileio: FileIO,
    partition: int,
    epoch: int,
    batch: pa.Table,
    *,
    late_ms: int = 0,
    evict_ms: int = 0,
    config: StoreConfig | None = None,
    pool: StorePool | None = None,
    writer: dict[str, Any] | None = None,
    now_ms: int | None = None,
    layout: str = "",
    combine_skip_until: int = 0,
) -> EpochResult:
    """Run ``op`` on one partition's input of ``epoch`` and commit the epoch.

    Args:
        op: the operator.
        fileio: storage of the query's state (the operator's stores are under ``op.name``).
        partition: the partition.
        epoch: the epoch (micro-batch id); the store opens at ``epoch - 1``.
        batch: the partition's input rows of the epoch.
        late_ms: the previous epoch's watermark (rows at or below it are late).
        evict_ms: this epoch's watermark.
        config: store settings.
        pool: the store pool (the process's by default).
        writer: identity of this operator instance (``{"run": ..., "instance": ...}``).
        now_ms: the epoch's processing time (the same for every attempt), or None; the store's
            TTL clock is set to it before the operator runs.
        layout: the directory of the layout generation in force (:func:`check_layout`'s
            ``dir``; ``""`` for generation 0).
        combine_skip_until: recorded with the operator's combine record
            (:mod:`fsstate.operators.combining`).

    Raises:
        VersionNotFoundError: the parent version is not on storage.
        CommitConflictError: the epoch was published on another parent.
        ConfigError: the epoch was published by another operator of the same run.
    """
    start_unix_ms = time.time() * 1000
    t0 = time.perf_counter()
    pool = pool or store_pool()
    config = config or StoreConfig()
    parent = epoch - 1 if epoch > 0 else None
    store = pool.acquire(fileio, op.name, partition, parent, config, layout)
    outcome = str(pool.last_outcome)
    ta = time.perf_counter()
    ok = False
    try:
        if now_ms is not None:
            store.set_time(now_ms)
        op.bind(store, batch.schema)
        batch = canonical_order(batch)
        t1 = time.perf_counter()
        op.last_stats = None
        output = op.process(batch, Epoch(epoch, partition, late_ms, evict_ms, now_ms))
        schema = op.output_schema(batch.schema)
        if not output.schema.equals(schema):
            output = output.cast(schema)
        t2 = time.perf_counter()
        seen: dict[str, int] = dict(store.meta.get(EVENT_TIME_META) or {})
        for name, times in op.event_times(batch).items():
            top = max_ms(times)
            if top is not None:
                seen[name] = max(seen.get(name, top), top)
        store.meta[EVENT_TIME_META] = seen
        store.meta[WATERMARK_META] = evict_ms
        if op.last_stats is not None:
            store.meta[COMBINE_META] = {**op.last_stats, "skip_until": combine_skip_until}
        if writer is not None:
            store.meta[WRITER_META] = writer
        info = store.commit(epoch)
        if (
            info.adopted
            and writer is not None
            and foreign_writer(store.meta.get(WRITER_META), writer)
        ):
            raise ConfigError(
                f"operator {op.name!r}: epoch {epoch} of partition {partition} was already "
                "committed by another operator of the same query run under the same name. Two "
                "stateful operators of one query must have different names (pass name=...)."
            )
        op.after_commit(store)
        t3 = time.perf_counter()
        meta = {k: store.meta.get(k) for k in (EVENT_TIME_META, WATERMARK_META, COMBINE_META)}
        ok = True
    finally:
        if ok:
            pool.release(store)
        else:
            pool.discard(store)
    total = (time.perf_counter() - t0) * 1000
    result = EpochResult(
        output,
        info,
        batch.num_rows,
        (t2 - t1) * 1000,
        total,
        meta,
        acquire_ms=(ta - t0) * 1000,
        commit_ms=(t3 - t2) * 1000,
        store=outcome,
    )
    path = os.environ.get(EPOCH_LOG_ENV)
    if path:
        log_epoch(path, op.name, partition, epoch, result, start_unix_ms)
    return result


def log_epoch(
    path: str, operator: str, partition: int, epoch: int, result: EpochResult, start_unix_ms: float
) -> None:
    """Append ``result``'s figures as one JSON line to ``path`` (see the module docstring)."""
    line = {
        "operator": operator,
        "partition": partition,
        "epoch": epoch,
        "pid": os.getpid(),
        "rows_in": result.rows_in,
        "rows_out": result.output.num_rows,
        "store": result.store,
        "adopted": result.commit.adopted,
        "acquire_ms": round(result.acquire_ms, 3),
        "process_ms": round(result.process_ms, 3),
        "commit_ms": round(result.commit_ms, 3),
        "total_ms": round(result.total_ms, 3),
        "start_unix_ms": round(start_unix_ms, 3),
        "end_unix_ms": round(start_unix_ms + result.total_ms, 3),
    }
    data = (json.dumps(line) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError:
        pass  # a diagnostic: the epoch committed whatever happens here


def check_layout(fileio: FileIO, op: Operator, partitions: int) -> Layout:
    """Record ``op``'s partition count with its state, or check it against the generation in
    force (:mod:`fsstate.store.layout`).

    Returns:
        The layout generation in force (its ``dir`` is what :func:`run_epoch` takes).

    Raises:
        PartitionCountError: the state is in another partition count (rescale it first).
        ConfigError: the state was written by another kind of operator, or a layout record is
            unreadable.
    """
    kind = type(op).__name__
    first = Layout(0, partitions, kind=kind)
    if publish_layout(fileio, op.name, first):
        return first
    layouts = read_layouts(fileio, op.name)
    have = layouts[-1]
    if layouts[0].kind not in (None, kind):
        raise ConfigError(
            f"operator {op.name!r}: the state under {fileio.describe(op.name)} was written by a "
            f"{layouts[0].kind}, this query runs a {kind} under the same name; give it "
            "another name"
        )
    if have.partitions != partitions:
        raise PartitionCountError(
            f"operator {op.name!r} keeps its state in {have.partitions} partitions (layout "
            f"generation {have.generation} under {fileio.describe(op.name)}); this query asks for "
            f"{partitions}. Keys are placed by partition: rescale the state first "
            f"(fsstate.store.rescale.rescale; a Spark flow started with partitions={partitions} "
            f"does it itself), or run with partitions={have.partitions}"
        )
    return have
