"""One batch's fsstate figures on the driver: :func:`progress`, :func:`progress_history`,
:func:`batch_progress`.

A query's fsstate operators are found from what this process made (the registry of
:mod:`fsstate_spark.receipts`): every ``tiered()`` processor's state location (its stores of
query ``q`` are under ``<state_uri>/<q>/<name>``) and every flow's driver (its stages' stores
under the flow's ``state_uri``; the driver learns its query at its first batch, a client's
copy that never ran by reading the checkpoint's ``metadata``), plus any ``state_uri=`` the
caller names (where nothing in this process knows the query: e.g. a listener or a notebook
other than the one that started it).

The figures of batch ``b`` of an operator are its partitions' versions ``b``. Where a task
handed the driver a receipt (classic sessions: ``tiered()``'s accumulator, a flow's stage
receipts), the receipt's summary is used and nothing is read; every other partition's manifest
is read (one GET each, at most :data:`READ_THREADS` at once; counted in
``BatchProgress.manifest_reads``): always on Spark Connect, where there are no accumulators.
Measured at 200 partitions on the S3 test server (``python -m devkit.metrics_receipts``,
medians of 7): from receipts 0.4 ms and no request; from the manifests 235 ms and 200 GETs.

Re-runs: a rolled-back, forked or restarted query keeps its query id and runs batch ids again
under a new run id, on a branch (lineage) of its own where the state went on past the batch
(:mod:`fsstate_spark.tiered.lineage`). So a batch is (query id, run id, batch id): only the
run's receipts count (:func:`fsstate_spark.receipts.batch_receipts`), and a partition without
one has the version of the lineage its run committed read: the branch its run's receipts name,
else the one whose version ``b`` records the run as its writer (``meta["writer"]["run"]``;
the store's branches, one LIST, then the trunk: each run writes a lineage of its own,
:mod:`fsstate.store.lineage`), else, when no lineage's version names the run, the one
committed last.
A flow's stores never branch and record the flow driver's writer, not Spark's run: the
trunk's. :func:`progress` reports the newest batch the query's *run* executed: Spark's
progress of a trigger that executed no batch (a restart that found no new data; an idle
trigger) names the batch id to come, which never ran.

Invariants:

* Reads only: nothing here writes state; one operator's or partition's failure to read is
  that partition's absence (not reported), never an error of the query or of the listener.
* Per-process caches, bounded: a layout (partition count, generation directory) is read once
  per operator; a complete batch's :class:`BatchProgress` is computed once per (query id, run
  id, batch id, lineage of the run's receipts) (:data:`CACHE_BATCHES` kept), never handed to
  another run; the branch a run committed on is remembered per store (:data:`CACHE_BRANCHES`
  kept); an operator's existence is checked once per query.
* A partition whose version holds no summary (written with ``spark.fsstate.metrics=false``, or
  by an older fsstate) is not reported, as one without the version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fsstate.errors import FsStateError
from fsstate.inspect.checkpoint import read_query_id
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import Manifest, read_manifest
from fsstate.store.identity import store_dir_for
from fsstate.store.layout import in_force, operators_by_kind, read_layouts, record_path
from fsstate.store.lineage import list_branches
from fsstate_spark.metrics.model import (
    BatchProgress,
    OperatorProgress,
    PartitionMetrics,
    operator_progress,
    writer_run,
)
from fsstate_spark.operators.lineage import OWNER_FILE, FlowLineage, Owner
from fsstate_spark.receipts import TieredEntry, batch_receipts, registered
from fsstate_spark.runtime import fileio_for
from fsstate_spark.tiered.lifecycle import TIERED_KIND

log = logging.getLogger(__name__)

READ_THREADS = 16  # manifests read at once
CACHE_BATCHES = 512  # complete BatchProgress kept per process
CACHE_BRANCHES = 4096  # (store, run) -> the branch the run committed on, kept per process
HISTORY_DEFAULT = 20  # batches progress_history() returns by default
RECHECK_S = 30.0  # an operator not found under a query is looked for again after this

Receipt = Mapping[str, Any]
# (query id, run id, batch id, the branches of the run's receipts): a BatchProgress cached
BatchKey = tuple[str, str | None, int, tuple[str, ...]]


@dataclass(frozen=True)
class FlowRef:
    """A flow's driver as the figures need it (picklable: a listener on Spark Connect carries
    it to the server)."""

    root: Location
    stages: tuple[str, ...]
    partitions: int
    lineage: FlowLineage
    driver: Any = field(default=None, compare=False)  # the live driver (None once pickled)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "driver": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @classmethod
    def of(cls, driver: Any) -> FlowRef:
        """The reference of a :class:`fsstate_spark.operators.driver.Driver`."""
        stages = tuple(s.op.name for s in driver.flow.stages)
        return cls(driver.config.root, stages, driver.partitions, driver.lineage, driver)


@dataclass(frozen=True)
class Known:
    """What to look in for a query's operators: ``tiered()`` processors, flows, and state
    locations named by the caller."""

    tiered: tuple[TieredEntry, ...] = ()
    flows: tuple[FlowRef, ...] = ()
    state_uris: tuple[Location, ...] = ()


def known_here(state_uri: str | Sequence[str] | None = None) -> Known:
    """What this process made (:func:`fsstate_spark.receipts.registered`) and ``state_uri``."""
    tiered, drivers = registered()
    uris = [state_uri] if isinstance(state_uri, str) else list(state_uri or [])
    return Known(
        tuple(tiered),
        tuple(FlowRef.of(d) for d in drivers),
        tuple(Location.parse(u) for u in uris),
    )


@dataclass
class _Operator:
    """One operator of the batch being gathered."""

    product: str
    name: str
    fileio: FileIO  # the root its operator directory is under
    receipts: dict[int, Receipt] = field(default_factory=dict)  # partition -> receipt
    partitions: int | None = None  # known (a flow's driver) or read from the layout
    layout: str | None = None

    @property
    def branches(self) -> list[str]:
        """The branches the run's receipts name (where its partitions without one are looked
        for first)."""
        return sorted({str(r.get("branch") or "") for r in self.receipts.values()})


class _Caches:
    """The process's caches (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: OrderedDict[BatchKey, BatchProgress] = OrderedDict()
        self.layouts: dict[tuple[str, str], list[Any]] = {}
        self.exists: dict[tuple[str, str], tuple[bool, float]] = {}
        self.flow_queries: dict[int, str | None] = {}
        self.run_branches: OrderedDict[tuple[str, str], str] = OrderedDict()

    def keep(self, key: BatchKey, progress: BatchProgress) -> None:
        with self.lock:
            self.batches[key] = progress
            while len(self.batches) > CACHE_BATCHES:
                self.batches.popitem(last=False)

    def branch_of(self, store: str, run: str) -> str | None:
        """The branch ``run`` committed on in ``store`` (None: not known yet)."""
        with self.lock:
            return self.run_branches.get((store, run))

    def keep_branch(self, store: str, run: str, branch: str) -> None:
        with self.lock:
            self.run_branches[(store, run)] = branch
            while len(self.run_branches) > CACHE_BRANCHES:
                self.run_branches.popitem(last=False)


_caches = _Caches()


def _exists(fileio: FileIO, name: str) -> bool:
    """Whether operator ``name`` has state under ``fileio`` (its layout record; a miss is
    checked again after :data:`RECHECK_S`)."""
    key = (fileio.describe(""), name)
    have = _caches.exists.get(key)
    if have is not None and (have[0] or time.monotonic() - have[1] < RECHECK_S):
        return have[0]
    try:
        found = fileio.exists(record_path(name, 0))
    except FsStateError:
        found = False
    _caches.exists[key] = (found, time.monotonic())
    return found


def _listed(fileio: FileIO, tiered: bool) -> list[str]:
    """Operators with a layout record under ``fileio``, tiered ones or the others (their
    layouts read through the per-process cache)."""
    try:
        kinds = operators_by_kind(fileio, read=_layouts)
    except FsStateError:
        return []
    return [n for n, kind in kinds.items() if (kind == TIERED_KIND) == tiered]


def _layouts(fileio: FileIO, name: str) -> list[Any]:
    key = (fileio.describe(""), name)
    have = _caches.layouts.get(key)
    if have is None:
        have = _caches.layouts[key] = read_layouts(fileio, name)
    return have


def _tiered_operators(known: Known, query_id: str, batch: int, run: str | None) -> list[_Operator]:
    """The query's ``tiered()`` operators: from the run's receipts where the accumulators
    have them, else the registered names whose state exists under the query, else (a named
    state URI) the tiered operators listed there."""
    roots: dict[Location, list[TieredEntry]] = {}
    for entry in known.tiered:
        roots.setdefault(entry.location, []).append(entry)
    for uri in known.state_uris:
        roots.setdefault(uri, [])
    out: list[_Operator] = []
    for root, entries in roots.items():
        fileio = fileio_for(root.child(query_id), False)
        ops: dict[str, _Operator] = {}
        for entry in entries:
            got_all = batch_receipts(entry.receipts(), query_id, batch, run)
            for (name, part), got in got_all.items():
                op = ops.setdefault(name, _Operator("tiered", name, fileio))
                op.receipts[part] = got
        if not ops:
            names = {e.name for e in entries if _exists(fileio, e.name)}
            if not names and not entries:
                names = set(_listed(fileio, tiered=True))
            ops = {n: _Operator("tiered", n, fileio) for n in sorted(names)}
        out.extend(ops.values())
    return out


def _flow_query(ref: FlowRef) -> str | None:
    """The query a flow runs in: its driver's, else its checkpoint's (read once)."""
    if ref.driver is not None and ref.driver.query_id is not None:
        return str(ref.driver.query_id)
    key = id(ref.lineage)
    if key not in _caches.flow_queries:
        ckpt = ref.lineage.checkpoint()
        try:
            _caches.flow_queries[key] = None if ckpt is None else read_query_id(ckpt)
        except FsStateError:
            return None  # no checkpoint yet: asked again
    return _caches.flow_queries[key]


def _flow_operators(known: Known, query_id: str, batch: int, run: str | None) -> list[_Operator]:
    """The query's flow stages: registered flows whose query it is, and flows whose state a
    named state URI holds (its owner record names the query)."""
    out: list[_Operator] = []
    seen: set[Location] = set()
    for ref in known.flows:
        if ref.root in seen or _flow_query(ref) != query_id:
            continue
        seen.add(ref.root)
        fileio = fileio_for(ref.root, False)
        history = ref.driver.history if ref.driver is not None else None
        got = batch_receipts(history, query_id, batch, run)
        for name in ref.stages:
            layout = ref.driver.layouts.get(name) if ref.driver is not None else None
            op = _Operator("flow", name, fileio, partitions=ref.partitions, layout=layout)
            op.receipts = {p: r for (n, p), r in got.items() if n == name}
            out.append(op)
    for uri in known.state_uris:
        if uri in seen:
            continue
        fileio = fileio_for(uri, False)
        try:
            owner = Owner.from_bytes(fileio.read_bytes(OWNER_FILE), fileio.describe(OWNER_FILE))
        except FsStateError:
            continue
        if owner.query_id == query_id:
            out.extend(_Operator("flow", n, fileio) for n in _listed(fileio, tiered=False))
    return out


class _Lookup:
    """Version ``batch`` of one partition store, on the lineage run ``run`` committed (see
    the module docstring); counts the manifests it reads."""

    def __init__(self, op: _Operator, store_dir: str, batch: int, run: str | None) -> None:
        self.op, self.store_dir, self.batch, self.run = op, store_dir, batch, run
        self.reads = 0
        self.found: dict[str, Manifest] = {}  # branch -> its version ``batch`` (read)
        self.tried: set[str] = set()

    def read(self, branch: str) -> Manifest | None:
        """The branch's version (None: not there or unreadable), read once."""
        if branch not in self.tried:
            self.tried.add(branch)
            self.reads += 1
            try:
                manifest = read_manifest(self.op.fileio, self.store_dir, self.batch, branch)
            except FsStateError:
                return None
            self.found[branch] = manifest
        return self.found.get(branch)

    def first(self, branches: list[str]) -> tuple[str, Manifest] | None:
        """The first of ``branches`` holding the version whose writer is the run."""
        for branch in branches:
            manifest = self.read(branch)
            if manifest is not None and writer_run(manifest) == self.run:
                return branch, manifest
        return None

    def version(self) -> tuple[str, Manifest] | None:
        """(branch, manifest) of the run's version; None when no lineage has one."""
        hints = [*self.op.branches, ""]
        if self.run is None or self.op.product == "flow":  # no run to match: hint, else trunk
            return next(((b, m) for b in hints if (m := self.read(b)) is not None), None)
        where = self.op.fileio.describe(self.store_dir)
        cached = _caches.branch_of(where, self.run)
        # each run writes a lineage of its own (fsstate.store.lineage): its branch, found
        # from a receipt, this process's cache or the store's branches; the trunk last
        # (state written before lineages)
        got = self.first(([cached] if cached is not None else []) + list(self.op.branches))
        if got is None:
            try:
                others = list_branches(self.op.fileio, self.store_dir)
            except FsStateError:
                others = []
            got = self.first([b for b in [*others, ""] if b not in self.tried])
        if got is not None:
            _caches.keep_branch(where, self.run, got[0])
            return got
        if not self.found:
            return None
        # no version names the run: it adopted one an earlier run of its planning published
        return max(self.found.items(), key=lambda f: (f[1].created_ms, f[0]))


def _read_partition(
    op: _Operator, partition: int, batch: int, run: str | None
) -> tuple[PartitionMetrics | None, int]:
    """A partition's figures from its manifest of version ``batch`` on the run's lineage
    (None: no such version, no summary, or unreadable), and the manifests read."""
    assert op.layout is not None
    lookup = _Lookup(op, store_dir_for(op.name, partition, op.layout), batch, run)
    found = lookup.version()
    if found is None or found[1].summary is None:
        return None, lookup.reads
    branch, manifest = found
    assert manifest.summary is not None
    summary = manifest.summary.to_json()
    metrics = PartitionMetrics(partition, batch, summary, None, branch, writer_run(manifest))
    return metrics, lookup.reads


def _resolve_layout(op: _Operator, batch: int) -> None:
    """The operator's partition count and layout generation at ``batch`` (read once)."""
    if op.layout is not None and op.partitions is not None:
        return
    try:
        layout = in_force(_layouts(op.fileio, op.name), batch)
    except FsStateError:
        layout = None
    if op.layout is None:
        op.layout = layout.dir if layout is not None else ""
    if op.partitions is None and layout is not None:
        op.partitions = layout.partitions
    if op.partitions is None:  # not recorded: the partitions that told
        op.partitions = max(op.receipts, default=-1) + 1


def _gather(
    ops: Sequence[_Operator], batch: int, run: str | None = None
) -> tuple[list[OperatorProgress], int]:
    """Every operator's progress: the run's receipts, then the manifests of the partitions
    without (on the run's lineage); and the manifests read."""
    found: dict[int, list[PartitionMetrics]] = {}
    todo: list[tuple[int, int]] = []
    for i, op in enumerate(ops):
        _resolve_layout(op, batch)
        found[i] = []
        for p, got in op.receipts.items():
            summary = got.get("summary")
            if summary is not None:
                commit_ms = got.get("commit_ms")
                branch = str(got.get("branch") or "")
                by = got.get("run") or None
                found[i].append(PartitionMetrics(p, batch, summary, commit_ms, branch, by))
        todo.extend((i, p) for p in range(op.partitions or 0) if p not in op.receipts)
    reads = 0
    if todo:
        with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(todo))) as pool:
            read = pool.map(lambda t: (t[0], _read_partition(ops[t[0]], t[1], batch, run)), todo)
            for i, (metrics, n) in read:
                reads += n
                if metrics is not None:
                    found[i].append(metrics)
    progress = [
        operator_progress(op.name, op.product, batch, op.partitions or 0, found[i])
        for i, op in enumerate(ops)
    ]
    return progress, reads


def _receipt_lineage(known: Known, query_id: str, batch: int, run: str | None) -> tuple[str, ...]:
    """The branches the run's receipts of the batch name, sorted (no storage request): part of
    a cached batch's key, so that batches of one run id but of two lineages (receipts naming no
    run) are never one."""
    branches: set[str] = set()
    for entry in known.tiered:
        for got in batch_receipts(entry.receipts(), query_id, batch, run).values():
            branches.add(str(got.get("branch") or ""))
    for ref in known.flows:
        history = ref.driver.history if ref.driver is not None else None
        for got in batch_receipts(history, query_id, batch, run).values():
            branches.add(str(got.get("branch") or ""))
    return tuple(sorted(branches))


def batch_progress(
    query_id: str,
    batch_id: int,
    *,
    run_id: str | None = None,
    name: str | None = None,
    known: Known | None = None,
) -> BatchProgress | None:
    """The fsstate figures of batch ``batch_id`` of run ``run_id`` of query ``query_id``.

    A query rolled back, forked or restarted runs batch ids again under a new run id: the
    figures are the run's own (its receipts, the versions of the lineage it committed; see the
    module docstring), never another run's of the same batch id.

    Args:
        query_id: the query's id (``StreamingQuery.id``).
        batch_id: the batch.
        run_id: the run's id (``StreamingQuery.runId``; None: not known, then the receipts'
            lineage, else the trunk's versions).
        name: the query's name, recorded in the result.
        known: where to look (default: what this process made, :func:`known_here`).

    Returns:
        The batch's figures; None when no fsstate operator of the query is known.
    """
    known = known_here() if known is None else known
    key = (query_id, run_id, batch_id, _receipt_lineage(known, query_id, batch_id, run_id))
    with _caches.lock:
        done = _caches.batches.get(key)
    if done is not None:
        return done
    ops = _tiered_operators(known, query_id, batch_id, run_id)
    ops += _flow_operators(known, query_id, batch_id, run_id)
    if not ops:
        return None
    operators, reads = _gather(ops, batch_id, run_id)
    now = int(time.time() * 1000)
    result = BatchProgress(query_id, run_id, name, batch_id, now, tuple(operators), reads)
    if all(op.partitions_reported == op.num_partitions for op in operators):
        _caches.keep(key, result)
    return result


def _field(progress: Any, key: str) -> Any:
    if progress is None:
        return None
    if isinstance(progress, Mapping):
        return progress.get(key)
    return getattr(progress, key, None)


def executed(progress: Any) -> bool:
    """Whether a progress of Spark's is of a trigger that executed its batch.

    Spark also records the progress of a trigger that found no new data (a restart with
    nothing to do, an idle trigger): it names the batch id to come and times no ``addBatch``.
    A progress without ``durationMs`` (not Spark's) counts as executed.
    """
    durations = _field(progress, "durationMs")
    return _field(progress, "batchId") is not None and (
        durations is None or "addBatch" in durations
    )


def _executed(query: Any) -> list[Any]:
    """The progress of each batch the query's run executed (``recentProgress``), oldest
    first; ``lastProgress`` alone when it is one (no copy of Spark's whole buffer)."""
    last = query.lastProgress
    if last is not None and executed(last):
        return [last]
    return [p for p in query.recentProgress or [] if executed(p)]


def progress(query: Any, *, state_uri: str | Sequence[str] | None = None) -> BatchProgress | None:
    """fsstate's figures of the newest batch the query's run executed, per operator in the
    shape of Spark's ``StateOperatorProgress``.

    Works for ``tiered()`` and flows, on classic sessions (from the tasks' receipts) and Spark
    Connect clients (from the manifests). See the module docstring for how operators are found.
    The figures are the run's (``query.runId``): a rolled-back or forked query's re-run of a
    batch id reports the re-run, on the lineage it committed.

    Args:
        query: a started ``StreamingQuery`` (classic or Spark Connect).
        state_uri: state locations to look in besides what this process made (a query started
            elsewhere; a ``tiered()`` query's state is ``<state_uri>/<query id>``, a flow's
            ``state_uri`` itself).

    When every progress Spark keeps is an idle trigger's (a query idle for longer than Spark's
    buffer of recent progress holds, ``spark.sql.streaming.numRecentProgressUpdates`` triggers
    of ``spark.sql.streaming.noDataProgressEventInterval``), the batch before the one they name
    is reported if this run committed it (a receipt or a version naming the run).

    Returns:
        The newest executed batch's figures; None before this run executed a batch (a restart
        that found no new data ran none: the batches before it are an earlier run's, read them
        with :func:`batch_progress` and that run's id), or when no fsstate operator of the
        query is known.
    """
    ran = _executed(query)
    last = ran[-1] if ran else query.lastProgress
    batch = _field(last, "batchId")
    if batch is None:
        return None
    batch = int(batch) if ran else int(batch) - 1  # idle: the batch before the one it names
    if batch < 0:
        return None
    run = str(query.runId)
    known = known_here(state_uri)
    got = batch_progress(str(query.id), batch, run_id=run, name=_field(last, "name"), known=known)
    if got is None or ran or _committed_by(got, run):
        return got
    return None


def _committed_by(progress: BatchProgress, run: str) -> bool:
    """Whether some partition's version of the batch names ``run`` as its committer."""
    return any(p.run == run for op in progress.operators for p in op.partitions)


def progress_history(
    query: Any, *, limit: int = HISTORY_DEFAULT, state_uri: str | Sequence[str] | None = None
) -> list[BatchProgress]:
    """fsstate's figures of the batches the query's run executed recently
    (``query.recentProgress``, at most ``limit``, oldest first); batches whose figures are gone
    (retention) are left out, and so are triggers that executed no batch.

    Args:
        query: a started ``StreamingQuery``.
        limit: batches returned at most (the newest).
        state_uri: as for :func:`progress`.
    """
    batches: dict[int, Any] = {}
    for p in query.recentProgress or []:
        if executed(p):
            batches[int(_field(p, "batchId"))] = p
    known = known_here(state_uri)
    out = []
    for b in sorted(batches)[-limit:]:
        got = batch_progress(
            str(query.id), b, run_id=str(query.runId), name=_field(batches[b], "name"), known=known
        )
        if got is not None and any(op.partitions_reported for op in got.operators):
            out.append(got)
    return out
