"""What ``fsstate-spark watch`` shows: each operator's newest committed versions, from storage.

:func:`resolve` takes what the user named, a query's checkpoint location or a state root (a
``tiered()`` state_uri, a flow's state directory), and :func:`read_views` reads each store's
newest version's manifest there (its ``summary``, :mod:`fsstate.storage.manifest`), so the
figures need neither Spark nor the query's driver: a stopped query shows its last batch, a
running one its newest committed versions. Each (query, operator) becomes one
:class:`OperatorView`: an :class:`~fsstate_spark.metrics.model.OperatorProgress` of its newest
versions plus where the operator is (newest version, branch, lag, age).

Invariants:

* Read only: one recursive listing per state root tried
  (:func:`fsstate.inspect.catalog.find_stores`, branches included), one manifest read per store
  (one per branch head of a store that has branches), and, for a checkpoint, its ``metadata``
  and ``commits/`` listing.
* A store's newest version is, for a checkpoint named, the head of the lineage the checkpoint
  runs on (:func:`fsstate.inspect.lineage.batch_state` at its last committed batch: the
  planning its offsets log records); else the head committed last (the largest
  ``created_ms``) among its lineages' heads: every run, fork and roll-back writes a lineage of
  its own, whose head may have a lower version than another's.
* An operator's newest batch is keyed by (run, lineage, batch), as the listener's are: the run
  that committed its partition head committed last (the manifest's writer), that head's branch
  and version (:attr:`OperatorView.latest`), not the largest version number among the heads
  (after a roll-back or a fork the batch ids start again lower, on another lineage, while a
  partition not yet re-run still has the other lineage's higher version).
* ``lag`` counts batches: with a checkpoint, the checkpoint's newest committed batch minus the
  operator's oldest partition head (never below 0: a partition may have committed a batch
  Spark has not yet); with a state root only, the newest partition head minus the oldest.
* A version without a summary (written by an older fsstate, or ``record_summary`` off) counts
  its figures as absent (zeros in sums), never as an error; a checkpoint or root holding no
  committed state raises :class:`fsstate.errors.ConfigError` naming the location.
* ``product`` is ``tiered`` for stores under a query id (``<state_uri>/<query id>/``), else
  ``flow`` (the flow driver's stores are at its state root).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError, StorageNotFoundError
from fsstate.inspect.catalog import StoreRef, all_stores, find_stores, read_store_manifest
from fsstate.inspect.checkpoint import SparkCheckpoint, checkpoint_uri, read_checkpoint
from fsstate.inspect.lineage import batch_state, planning_of
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import Manifest
from fsstate_spark.metrics.model import (
    OperatorProgress,
    PartitionMetrics,
    operator_progress,
    writer_run,
)
from fsstate_spark.settings import state_dir_of

__all__ = ["OperatorView", "WatchTarget", "read_views", "resolve"]


@dataclass(frozen=True)
class WatchTarget:
    """Where to read: the state roots to look in, and the checkpoint when one was named.

    Attributes:
        states: the state roots, tried in order: the first holding the query's stores is read.
        checkpoint: the query's checkpoint (None: a state root was named).
    """

    states: tuple[FileIO, ...]
    checkpoint: SparkCheckpoint | None = None

    def describe(self) -> str:
        """The location named, for titles and errors."""
        if self.checkpoint is not None:
            return self.checkpoint.fileio.describe("")
        return self.states[0].describe("")


def resolve(
    location: str, *, state_uri: str | None = None, options: dict[str, str] | None = None
) -> WatchTarget:
    """What ``location`` names: a checkpoint (it holds Spark's ``metadata``) or a state root.

    A checkpoint's state is looked for at ``state_uri``, else at ``<checkpoint>/fsstate`` (a
    flow's, and a ``tiered()`` query's whose session's ``spark.sql.streaming.checkpointLocation``
    is the checkpoint), then at ``<checkpoint>/../fsstate`` (a ``tiered()`` query whose
    checkpoint Spark put under the session's checkpointLocation).

    Args:
        location: a checkpointLocation or a state root (local path or object store URI).
        state_uri: the query's state root (``tiered(state_uri=...)``, ``spark.fsstate.stateUri``);
            only with a checkpoint.
        options: object store settings of both locations.

    Raises:
        ConfigError: ``state_uri`` given with a location that is not a checkpoint.
    """
    opts = options or {}
    here = FileIO(Location.parse(checkpoint_uri(location), opts))
    if not here.exists("metadata"):
        if state_uri is not None:
            raise ConfigError(
                f"{here.describe('')} is no streaming checkpoint (no metadata): --state-uri "
                "goes with a checkpoint; give the state root alone"
            )
        return WatchTarget((here,))
    ckpt = read_checkpoint(here)
    if state_uri is not None:
        roots = [state_uri]
    else:
        own = checkpoint_uri(location).rstrip("/")
        roots = [state_dir_of(own)]
        if "/" in own.strip("/"):
            roots.append(state_dir_of(own.rsplit("/", 1)[0]))
    return WatchTarget(tuple(FileIO(Location.parse(r, opts)) for r in roots), ckpt)


@dataclass(frozen=True)
class OperatorView:
    """One operator's newest committed versions.

    Attributes:
        query: the query id the stores are under ("" for a flow's root).
        progress: the figures of each partition's newest version.
        latest: the version of the partition head committed last (the newest batch).
        lag: batches behind (see the module docstring).
        committed_ms: when the newest of those versions was committed (epoch ms).
        branches: the branches the heads are on ("" for the trunk), sorted.
        run: the run the newest head records as its writer (Spark's run id for a ``tiered()``
            query; a flow driver's own writer id for a flow; None: not recorded).
        branch: the branch of the newest head: with ``run`` and ``latest``, the newest
            batch's key.
    """

    query: str
    progress: OperatorProgress
    latest: int
    lag: int
    committed_ms: int
    branches: tuple[str, ...]
    run: str | None = None
    branch: str = ""

    def to_json(self, now_ms: int) -> dict[str, Any]:
        """The operator's progress document (``OperatorProgress.to_json``) plus ``query``,
        ``latestVersion``, ``runId`` and ``branch`` (the newest batch's key), ``lag``,
        ``ageSeconds`` and ``branches``."""
        return {
            "query": self.query,
            **self.progress.to_json(),
            "latestVersion": self.latest,
            "runId": self.run,
            "branch": self.branch,
            "lag": self.lag,
            "ageSeconds": round(max(0, now_ms - self.committed_ms) / 1000, 1),
            "branches": list(self.branches),
        }


def _summary(manifest: Manifest) -> dict[str, Any]:
    return {} if manifest.summary is None else manifest.summary.to_json()


def _head(state: FileIO, store: StoreRef, lineage: str | None) -> tuple[Manifest, str]:
    """The head of ``lineage``, or (None) the head committed last among the store's lineages
    (see the invariants)."""
    heads = []
    for line in store.lineages:
        if lineage is not None and line.name != lineage:
            continue
        view = store.on(line.name)
        if view is not None:
            heads.append((read_store_manifest(state, view), line.name))
    return max(heads, key=lambda h: (h[0].created_ms, h[0].version))


def _followed(state: FileIO, target: WatchTarget, stores: list[StoreRef]) -> dict[Any, str]:
    """(prefix, operator, layout, partition) -> the lineage the checkpoint runs on there (none
    when no checkpoint was named, or it committed no batch)."""
    ckpt = target.checkpoint
    if ckpt is None or ckpt.committed is None:
        return {}
    groups: dict[tuple[str, str], list[StoreRef]] = {}
    for s in stores:
        groups.setdefault((s.prefix, s.operator), []).append(s)
    out: dict[Any, str] = {}
    planned = planning_of(ckpt, ckpt.committed)
    for (prefix, op), _members in groups.items():
        every = all_stores(state, prefix=prefix, operator=op)
        got = batch_state(state, every, ckpt.committed, planned)
        for p, line in got.lineages.items():
            out[(prefix, op, got.layout, p)] = line
    return out


def _stores(target: WatchTarget) -> tuple[FileIO, list[StoreRef]]:
    """The first state root holding stores (of the checkpoint's query), and those stores."""
    for state in target.states:
        try:
            found = find_stores(state)
        except StorageNotFoundError:
            continue
        if target.checkpoint is not None:
            found = [s for s in found if s.prefix in ("", target.checkpoint.query_id)]
        if found:
            return state, found
    where = " or ".join(s.describe("") for s in target.states)
    of = f" of the query of {target.describe()}" if target.checkpoint is not None else ""
    raise ConfigError(
        f"no committed fsstate state{of} under {where}: has the query committed a batch? "
        "(a query with its own state_uri: give --state-uri)"
    )


def read_views(target: WatchTarget) -> list[OperatorView]:
    """Each (query, operator)'s newest versions under ``target``, by query then operator.

    Raises:
        ConfigError: no committed state there.
        ManifestCorruptError: a newest manifest is damaged.
    """
    groups: dict[tuple[str, str], list[tuple[PartitionMetrics, int]]] = {}
    state, stores = _stores(target)
    followed = _followed(state, target, stores)
    for store in stores:
        key = (store.prefix, store.operator, store.layout, store.partition)
        manifest, branch = _head(state, store, followed.get(key))
        part = PartitionMetrics(
            store.partition,
            manifest.version,
            _summary(manifest),
            None,
            branch,
            writer_run(manifest),
        )
        groups.setdefault((store.prefix, store.operator), []).append((part, manifest.created_ms))
    committed = target.checkpoint.committed if target.checkpoint is not None else None
    return [
        _view(query, operator, found, committed)
        for (query, operator), found in sorted(groups.items())
    ]


def _view(
    query: str, operator: str, found: list[tuple[PartitionMetrics, int]], committed: int | None
) -> OperatorView:
    """One operator's view of its partitions' heads (with when each was committed), keyed by
    the head committed last (see the module docstring)."""
    parts = [p for p, _ in found]
    newest, committed_ms = max(found, key=lambda f: (f[1], f[0].version))
    lag = (newest.version if committed is None else committed) - min(p.version for p in parts)
    progress = operator_progress(
        operator, "tiered" if query else "flow", newest.version, len(parts), parts
    )
    branches = tuple(sorted({p.branch for p in parts}))
    return OperatorView(
        query,
        progress,
        newest.version,
        max(0, lag),
        committed_ms,
        branches,
        newest.run,
        newest.branch,
    )


def now_ms() -> int:
    """The wall clock in epoch ms (ages are measured against it)."""
    return int(time.time() * 1000)
