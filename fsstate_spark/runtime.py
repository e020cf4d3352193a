"""What the products share inside Spark's tasks: the task's identity, one FileIO per state
root, and the engine settings of the Python worker.

Measured on pyspark 4.3 (local mode and local-cluster):

* a streaming task carries the micro-batch id (local property ``streaming.sql.batchId``), the
  query id (``sql.streaming.queryId``) and the run id (``spark.jobGroup.id``, new per start);
  classic ``foreachBatch`` jobs carry them too, so tasks of a flow's stages see the batch id;
* a bounded (batch) DataFrame's tasks have a TaskContext but no batch id; the driver has none.
* Spark Connect's ``foreachBatch`` runs the batch's DataFrame as a job of its own, from a
  Python process of the server: its tasks carry the query session's SQL confs (below) but no
  batch id, query id or run id (measured on 4.3: a ``tiered()`` task there saw
  ``spark.sql.streaming.internal.stateStore.partitions`` and no ``streaming.sql.batchId``).
  Such a task is :attr:`TaskMode.UNNUMBERED`: it runs a micro-batch whose number it cannot
  know, so nothing can be committed as that batch's version.
* a streaming task carries the SQL confs of its query's session as local properties; among
  them Spark's internal ``spark.sql.streaming.internal.stateStore.partitions``, the partition
  count of the query's state stores as restored from the checkpoint (a restart with another
  ``spark.sql.shuffle.partitions`` keeps the checkpoint's count, and so does this property,
  while the local property ``spark.sql.shuffle.partitions`` shows the session's new value:
  measured with a restarted transformWithStateInPandas query). It is ``TaskInfo.partitions``
  (None if absent: an internal conf, another Spark version may not set it).

Invariants:

* One :class:`fsstate.storage.fileio.FileIO` per (state root, fsync) per process, so requests
  are counted once (:func:`storage_requests`) and clients are reused across tasks.
* :func:`apply_engine_settings` reconfigures the process's engine only when the settings
  differ from what it runs with; it is safe to call at the start of every task.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pyspark import TaskContext

from fsstate.controller import configure as configure_engine
from fsstate.controller import get_controller
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate_spark.settings import StateSettings

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
RUN_ID_PROPERTY = "spark.jobGroup.id"  # a streaming query sets it to its run id (new per start)
# the partition count of the query's state stores (see the module docstring)
PARTITIONS_PROPERTY = "spark.sql.streaming.internal.stateStore.partitions"


class TaskMode(str, Enum):
    """Where Python code runs (see the module docstring)."""

    DRIVER = "driver"  # no TaskContext: Spark collects schemas
    BOUNDED = "bounded"  # a batch DataFrame: no batch id
    STREAMING = "streaming"  # a micro-batch of a streaming query
    UNNUMBERED = "unnumbered"  # a micro-batch's job without its id (Connect's foreachBatch)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TaskInfo:
    """Where the code runs.

    Attributes:
        mode: driver, bounded or streaming.
        partition: Spark partition id (None on the driver).
        batch_id: micro-batch id (streaming only).
        query_id: the streaming query's id, stable across restarts (streaming only).
        attempt: the task attempt number (0 for the first attempt).
        run_id: the id of this start of the query (streaming only).
        partitions: the query's shuffle partitions (streaming only; None if unknown).
    """

    mode: TaskMode
    partition: int | None = None
    batch_id: int | None = None
    query_id: str | None = None
    attempt: int = 0
    run_id: str | None = None
    partitions: int | None = None


def current_task() -> TaskInfo:
    """Describe the current task from Spark's TaskContext and local properties."""
    tc = TaskContext.get()
    if tc is None:
        return TaskInfo(TaskMode.DRIVER)
    batch = tc.getLocalProperty(BATCH_ID_PROPERTY)
    if batch is None or batch == "":
        # a streaming query's session conf without the batch's id: Connect's foreachBatch
        streaming = bool(tc.getLocalProperty(PARTITIONS_PROPERTY))
        mode = TaskMode.UNNUMBERED if streaming else TaskMode.BOUNDED
        return TaskInfo(mode, tc.partitionId(), attempt=tc.attemptNumber())
    query_id = tc.getLocalProperty(QUERY_ID_PROPERTY) or "unknown-query"
    run_id = tc.getLocalProperty(RUN_ID_PROPERTY) or None
    parts = tc.getLocalProperty(PARTITIONS_PROPERTY) or ""
    return TaskInfo(
        TaskMode.STREAMING,
        tc.partitionId(),
        int(batch),
        query_id,
        tc.attemptNumber(),
        run_id,
        int(parts) if parts.isdigit() else None,
    )


_fileios: dict[tuple[Location, bool], FileIO] = {}
_fileios_lock = threading.Lock()
_engine_lock = threading.Lock()


def storage_requests() -> int:
    """Requests this process has made to the state storage of every root (diagnostics and
    benchmarks; see :class:`fsstate.storage.backend.RequestStats`)."""
    with _fileios_lock:
        return sum(f.stats.requests for f in _fileios.values())


def storage_request_counts() -> dict[str, int]:
    """This process's requests to the state storage of every root so far, by kind (``get``,
    ``put``, ``head``, ``list``, ``delete``; see :class:`fsstate.storage.backend.RequestStats`)."""
    kinds = ("get", "put", "head", "list", "delete")
    out = dict.fromkeys(kinds, 0)
    with _fileios_lock:
        snaps = [f.stats.snapshot() for f in _fileios.values()]
    for snap in snaps:
        for k in kinds:
            out[k] += snap[k]
    return out


def fileio_for(root: Location, fsync: bool) -> FileIO:
    """The process's FileIO of a state root (one client and request counter per root)."""
    key = (root, fsync)
    with _fileios_lock:
        fileio = _fileios.get(key)
        if fileio is None:
            fileio = _fileios[key] = FileIO(root, fsync=fsync)
        return fileio


def apply_engine_settings(settings: StateSettings) -> None:
    """Apply the process-wide engine settings in this worker, if they differ."""
    if settings.memory_limit_bytes is None and not settings.engine:
        return
    current = get_controller().config
    wanted: dict[str, Any] = dict(settings.engine)
    if settings.memory_limit_bytes is not None:
        wanted["memory_limit_bytes"] = settings.memory_limit_bytes
    if all(getattr(current, k) == v for k, v in wanted.items()):
        return
    with _engine_lock:
        limit = wanted.pop("memory_limit_bytes", None)
        configure_engine(memory_limit=limit, **wanted)
