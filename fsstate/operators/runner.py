"""Running one operator on one partition for one epoch, exactly once.

:func:`run_epoch` runs one :mod:`fsstate.store.epoch` (acquire the store of (operator, partition)
at the epoch's parent version, process, commit with the epoch's record, release; discard on any
failure): it sorts the input canonically, runs the operator, and commits the epoch with its
:class:`fsstate.store.record.EpochRecord`.

Invariants (the envelope's are :mod:`fsstate.store.epoch`'s: exactly once, a failed attempt's
store never reused, two operators never sharing a store):

* Another attempt of the same epoch (a task retry, a recomputed stage, a batch re-run after a
  restart, a speculative task) opens the same parent, sees the same input set, so computes the
  same output and state; its commit adopts the published version. Either way the output
  returned is the one the published version stands for.
* :func:`check_layout` records an operator's partition count with its state (kind: the
  operator's class name) or checks it: :func:`fsstate.store.epoch.resolve_layout`.
  :func:`run_epoch` opens the stores of the generation it is given (``layout``, resolved once
  by the driver).
* The record of every version holds the running maximum event time per watermark input (ms,
  over this partition's epochs so far), the eviction watermark the epoch used and the
  operator's combine record (the previous one when the operator made none this epoch): what a
  driver plans the next epoch from (:mod:`fsstate.operators.planning`) without reading data.
  ``EpochResult.meta`` is that record as meta (the receipt a Spark task hands its driver).

Diagnostics: with the environment variable ``FSSTATE_EPOCH_LOG`` naming a file, every epoch
that commits appends one JSON line to it (:func:`log_epoch`: operator, partition, epoch, process
id, rows in and out, how the store was got, whether the commit was adopted, the times of the
phases in ms and the epoch's start and end as Unix ms). Lines are written with one ``write`` of
a file opened for appending, so processes sharing the file do not interleave them; a failure to
write is ignored (the epoch's result does not depend on it). Unset: nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from fsstate.config import StoreConfig
from fsstate.operators.base import Epoch, Operator, canonical_order, leading_columns, max_ms
from fsstate.stats import CommitInfo
from fsstate.storage.fileio import FileIO
from fsstate.store.epoch import StoreAddress, begin_epoch, resolve_layout
from fsstate.store.identity import WRITER_META
from fsstate.store.layout import Layout
from fsstate.store.pool import StorePool
from fsstate.store.record import EpochRecord, Writer

__all__ = ["EpochResult", "check_layout", "log_epoch", "run_epoch"]

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
    writer: Writer | None = None,
    now_ms: int | None = None,
    layout: str = "",
    combine_skip_until: int = 0,
) -> EpochResult:
    """Run ``op`` on one partition's input of ``epoch`` and commit the epoch (in one
    :mod:`fsstate.store.epoch`: a failure anywhere discards the store).

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
        writer: identity of this operator instance (the query run and the instance).
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
    ref = StoreAddress(fileio, op.name, partition, layout)
    with begin_epoch(ref, epoch, config=config, writer=writer, now_ms=now_ms, pool=pool) as run:
        store = run.store
        op.bind(store, batch.schema)
        lead = leading_columns(batch.schema, op.leading_order(batch.schema))
        batch = canonical_order(batch, lead)
        t1 = time.perf_counter()
        op.last_stats = None
        output = op.process(batch, Epoch(epoch, partition, late_ms, evict_ms, now_ms, lead))
        schema = op.output_schema(batch.schema)
        if not output.schema.equals(schema):
            output = output.cast(schema)
        t2 = time.perf_counter()
        record = _record(op, batch, EpochRecord.from_meta(store.meta), evict_ms, combine_skip_until)
        info = run.commit(record)
        op.after_commit(store)
        t3 = time.perf_counter()
    published = EpochRecord.from_meta(store.meta)
    meta = {k: v for k, v in published.to_meta().items() if k != WRITER_META}
    total = (time.perf_counter() - t0) * 1000
    result = EpochResult(
        output,
        info,
        batch.num_rows,
        (t2 - t1) * 1000,
        total,
        meta,
        acquire_ms=run.acquire_ms,
        commit_ms=(t3 - t2) * 1000,
        store=str(run.outcome),
    )
    path = os.environ.get(EPOCH_LOG_ENV)
    if path:
        log_epoch(path, op.name, partition, epoch, result, start_unix_ms)
    return result


def _record(
    op: Operator, batch: pa.Table, previous: EpochRecord, evict_ms: int, skip_until: int
) -> EpochRecord:
    """The epoch's record: the running event-time maxima raised by the batch's, the watermark
    used, and the operator's combine record (the previous one if it made none)."""
    maxima = {}
    for name, times in op.event_times(batch).items():
        top = max_ms(times)
        if top is not None:
            maxima[name] = top
    seen = previous.with_event_times(maxima).event_time_max_ms
    combine = previous.combine
    if op.last_stats is not None:
        combine = dataclasses.replace(op.last_stats, skip_until=skip_until)
    return EpochRecord(evict_ms, seen, combine)


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


def check_layout(
    fileio: FileIO, op: Operator, partitions: int, version: int | None = None
) -> Layout:
    """Record ``op``'s partition count with its state, or check it against the generation in
    force at ``version`` (None: the newest; :func:`fsstate.store.epoch.resolve_layout`).

    Returns:
        The layout generation in force (its ``dir`` is what :func:`run_epoch` takes).

    Raises:
        PartitionCountError: the state is in another partition count (rescale it first).
        ConfigError: the state was written by another kind of operator, or a layout record is
            unreadable.
    """
    return resolve_layout(
        fileio,
        op.name,
        partitions=partitions,
        kind=type(op).__name__,
        version=version,
        remedy=(
            "rescale the state first (fsstate.store.rescale.rescale; a Spark flow started with "
            f"partitions={partitions} does it itself), or run with the recorded count"
        ),
    )
