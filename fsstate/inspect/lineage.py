"""Which lineage of a query's state a Spark checkpoint runs on, and whether it is whole.

Every version a ``tiered()`` task commits records when Spark planned its batch
(``Writer.planned_ms``: the ``batchTimestampMs`` of the checkpoint's ``offsets/<batch>``, the
same for every attempt and re-run of one planning; a rescale records its repartition batch's).
So, wherever a query's state went on (restarts, copies, roll-backs each on a lineage of their
own: :mod:`fsstate.store.lineage`), version ``b`` of the lineage a checkpoint runs on is, in
each partition, the version ``b`` recording the planning that ``offsets/<b>`` names. That is
what :func:`batch_state` finds, from the state directory and the checkpoint alone (no Spark):
the checks of ``fsstate verify --checkpoint``, ``fsstate-spark repair``, the rescale of a
stopped query and ``fsstate-spark watch`` follow it.

Where several lineages hold version ``b`` of that planning (a crashed run's partial re-run
and the run after it: the same batch from the same state), the one that went on furthest is
taken. Where the versions record no planning (state written before plannings were recorded,
or a checkpoint fsstate cannot read), the lineage readers default to is taken
(:func:`fsstate.inspect.catalog.current_lineage`).

Invariants:

* Read-only. Costs: the caller's listing (:func:`fsstate.inspect.catalog.all_stores`), one GET
  of the offsets entry, one GET per (partition, lineage holding the version) read; with
  ``files=True`` one LIST of each partition's data directory.
* A partition is *whole* at ``b`` only if its manifest there reads (checksum) and, with
  ``files=True``, every file it names is on storage at its recorded size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError, FsStateError, StorageNotFoundError
from fsstate.inspect.catalog import StoreRef, current_lineage
from fsstate.inspect.checkpoint import SparkCheckpoint, batch_timestamp_ms
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import Manifest, read_manifest
from fsstate.store.identity import WRITER_META
from fsstate.store.layout import Layout, read_layouts
from fsstate.store.record import Writer

__all__ = ["BatchState", "CheckpointCheck", "batch_state", "check_checkpoint", "planning_of"]


@dataclass(frozen=True)
class BatchState:
    """Where version ``batch`` of the lineage a checkpoint runs on is, for one operator.

    Attributes:
        prefix: the query id (the stores' prefix).
        operator: the operator.
        batch: the batch (version).
        planned_ms: when the checkpoint planned it (None: not readable).
        layout: the layout generation directory holding it.
        partitions: that generation's partition count.
        lineages: partition -> the lineage holding the version.
        missing: partitions holding no such version.
        damaged: (partition, what is wrong) of partitions whose version is there but not whole.
    """

    prefix: str
    operator: str
    batch: int
    planned_ms: int | None
    layout: str
    partitions: int
    lineages: dict[int, str]
    missing: tuple[int, ...] = ()
    damaged: tuple[tuple[int, str], ...] = ()

    @property
    def whole(self) -> bool:
        """Whether every partition holds the version, whole."""
        return not self.missing and not self.damaged

    @property
    def lineage(self) -> str | None:
        """The one lineage every partition found holds it on (None: several, or none)."""
        names = set(self.lineages.values())
        return next(iter(names)) if len(names) == 1 else None

    def describe(self) -> str:
        """One line: where the version is, and what is missing or damaged."""
        names = sorted({n or "the trunk" for n in self.lineages.values()})
        where = f"operator {self.operator!r}, batch {self.batch} on {', '.join(names) or '-'}"
        said = []
        if self.missing:
            said.append(f"missing in partition(s) {list(self.missing)} of {self.partitions}")
        said += [f"partition {p}: {error}" for p, error in self.damaged]
        return where + (": " + "; ".join(said) if said else ": whole")


def planning_of(ckpt: SparkCheckpoint, batch: int) -> int | None:
    """When ``ckpt`` planned ``batch`` (None: its offsets entry is gone or does not say)."""
    try:
        return batch_timestamp_ms(ckpt.fileio, batch)
    except (ConfigError, StorageNotFoundError):
        return None


def batch_state(
    state: FileIO,
    stores: Sequence[StoreRef],
    batch: int,
    planned_ms: int | None,
    *,
    count: int | None = None,
    files: bool = False,
) -> BatchState:
    """Where version ``batch`` planned at ``planned_ms`` is among one operator's ``stores``
    (every generation: :func:`fsstate.inspect.catalog.all_stores`), see the module docstring.

    Args:
        state: the root the stores were found under.
        stores: one operator's stores, of one query.
        batch: the version.
        planned_ms: the checkpoint's planning of it (None: match none, take the default
            lineage).
        count: the checkpoint's partition count at ``batch`` (None: not known).
        files: also check that every file of each version found is on storage.
    """
    first = stores[0]
    root = first.root(state)
    layouts = read_layouts(root, first.operator)
    best: BatchState | None = None
    for gen in sorted(layouts, key=lambda g: -g.generation):
        if count is not None and gen.partitions not in (None, count):
            continue
        members = [s for s in stores if s.layout == gen.dir]
        if not members:
            continue
        got = _in_generation(root, first, gen, members, batch, planned_ms, files, count)
        if best is None or len(got.lineages) > len(best.lineages):
            best = got
        if got.whole:
            return got
    if best is not None:
        return best
    n = count if count is not None else 0
    return BatchState(first.prefix, first.operator, batch, planned_ms, "", n, {}, tuple(range(n)))


def _in_generation(
    root: FileIO,
    first: StoreRef,
    gen: Layout,
    members: list[StoreRef],
    batch: int,
    planned_ms: int | None,
    files: bool,
    count: int | None,
) -> BatchState:
    n = gen.partitions if gen.partitions is not None else count
    if n is None:
        n = max(s.partition for s in members) + 1
    default = current_lineage(members)
    found: dict[int, str] = {}
    damaged: list[tuple[int, str]] = []
    for s in members:
        if s.partition >= n:
            continue
        pick = _pick(root, s, batch, planned_ms, default)
        if pick is None:
            continue
        lineage, manifest, error = pick
        if error is None and files and manifest is not None:
            error = _files_missing(root, s, manifest)
        found[s.partition] = lineage
        if error is not None:
            damaged.append((s.partition, error))
    missing = tuple(p for p in range(n) if p not in found)
    return BatchState(
        first.prefix,
        first.operator,
        batch,
        planned_ms,
        gen.dir,
        n,
        found,
        missing,
        tuple(damaged),
    )


def _pick(
    root: FileIO, s: StoreRef, batch: int, planned_ms: int | None, default: str
) -> tuple[str, Manifest | None, str | None] | None:
    """(lineage, manifest, error) of the version ``batch`` of store ``s`` the checkpoint's
    planning names (None: no lineage of the store holds it)."""
    holding = [b for b in s.lineages if batch in b.versions]
    read: dict[str, Manifest] = {}
    unread: dict[str, str] = {}
    matches: list[tuple[int, int, str]] = []
    for b in holding:
        try:
            m = read[b.name] = read_manifest(root, s.store_dir, batch, b.name)
        except FsStateError as exc:
            unread[b.name] = str(exc)
            continue
        writer = Writer.from_meta(m.meta.get(WRITER_META))
        if planned_ms is not None and writer is not None and writer.planned_ms == planned_ms:
            matches.append((b.latest, b.newest_ms or 0, b.name))
    if matches:
        name = max(matches)[2]
        return name, read[name], None
    if planned_ms is None and holding:  # nothing to match: the lineage readers default to
        names = [b.name for b in holding]
        name = default if default in names else names[-1]
        error = unread.get(name)
        said = None if error is None else f"version {batch} is unreadable: {error}"
        return name, read.get(name), said
    if unread:  # its version may be the one that cannot be read
        name, error = next(iter(unread.items()))
        return name, None, f"version {batch} on {name or 'the trunk'} is unreadable: {error}"
    return None


def _files_missing(root: FileIO, s: StoreRef, manifest: Manifest) -> str | None:
    """What of ``manifest``'s files is not on storage at its size (None: all is; one LIST)."""
    prefix = f"{s.store_dir}/"
    have = {
        e.path[len(prefix) :]: e.size_bytes
        for e in root.list(f"{s.store_dir}/data")
        if e.path.startswith(prefix)
    }
    for entry in manifest.tables.values():
        for ref in [*entry.runs, *entry.ttl_runs]:
            size = have.get(ref.path)
            if size is None:
                return f"version {manifest.version} needs {ref.path}, which is gone"
            if size != ref.size_bytes:
                return (
                    f"version {manifest.version} needs {ref.path} of {ref.size_bytes} bytes, "
                    f"which has {size}"
                )
    return None


@dataclass(frozen=True)
class CheckpointCheck:
    """What :func:`check_checkpoint` found.

    Attributes:
        location: the checkpoint directory (full location).
        query: its query id.
        batch: its last committed batch (None: none).
        in_flight: the batch planned after it and never committed (None: none); its restart
            plans it anew and runs it on a lineage of its own.
        states: per operator, where the checkpoint's lineage holds ``batch``.
        ahead: (operator, partitions) whose lineage holds versions after ``batch`` (the
            checkpoint is older than its state: restored, copied or rolled back); a note.
        state: where the query's state was looked for (full location).
        stores: stores found there.
    """

    location: str
    query: str
    batch: int | None
    in_flight: int | None
    states: tuple[BatchState, ...]
    ahead: tuple[tuple[str, tuple[int, ...]], ...]
    state: str
    stores: int

    @property
    def no_state(self) -> bool:
        """Whether the checkpoint committed a batch and no state of its query was found."""
        return self.batch is not None and not self.stores

    @property
    def ok(self) -> bool:
        """Whether the checkpoint committed a batch and its lineage holds it whole."""
        return self.batch is not None and not self.no_state and all(s.whole for s in self.states)

    def describe(self) -> list[str]:
        """One line per thing that does not match (empty when it all does)."""
        if self.batch is None:
            return [
                f"query {self.query}: the checkpoint committed no batch, so there is no state "
                "to check against it (run the query first, or give the checkpoint it runs on)"
            ]
        lines = [f"{s.describe()}. {_REMEDY}" for s in self.states if not s.whole]
        if self.no_state:
            lines.append(
                f"query {self.query}: the checkpoint committed batch {self.batch}, but no state "
                f"of the query is under {self.state}. If that is where its tiered() state lives "
                f"(<state_uri>/<query id>), {_REMEDY}; else give the query's state_uri"
            )
        return lines

    def to_doc(self) -> dict[str, Any]:
        """The check as a JSON document."""
        return {
            "location": self.location,
            "query": self.query,
            "committed_batch": self.batch,
            "in_flight_batch": self.in_flight,
            "state": self.state,
            "stores": self.stores,
            "operators": [
                {
                    "operator": s.operator,
                    "layout": s.layout,
                    "lineages": {str(p): n for p, n in sorted(s.lineages.items())},
                    "missing": list(s.missing),
                    "damaged": {str(p): e for p, e in s.damaged},
                }
                for s in self.states
            ],
            "gaps": [s.describe() for s in self.states if not s.whole],
            "ahead": {op: list(ps) for op, ps in self.ahead},
        }


_REMEDY = (
    "The query's restart fails there: restore the state directory and the checkpoint from one "
    "backup, or roll the query back to the newest batch whose state is whole "
    "(fsstate-spark repair <checkpoint>)"
)


def check_checkpoint(
    ckpt: SparkCheckpoint, stores: Sequence[StoreRef], state: FileIO, where: str
) -> CheckpointCheck:
    """Whether the lineage ``ckpt`` runs on holds its last committed batch whole, in every
    partition of every operator of ``stores`` (every generation of the query's stores,
    :func:`fsstate.inspect.catalog.all_stores`, found under ``state``; ``where`` names the
    query's state root in messages). Files are checked to be present at their sizes."""
    c = ckpt.committed
    flight = None
    if (c if c is not None else -1) >= -1 and ckpt.planned((-1 if c is None else c) + 1):
        flight = (-1 if c is None else c) + 1
    groups: dict[str, list[StoreRef]] = {}
    for s in stores:
        groups.setdefault(s.operator, []).append(s)
    states: list[BatchState] = []
    ahead: list[tuple[str, tuple[int, ...]]] = []
    if c is not None:
        planned = planning_of(ckpt, c)
        try:
            count: int | None = ckpt.partitions_at(c)
        except ConfigError:
            count = None
        for op, members in sorted(groups.items()):
            got = batch_state(state, members, c, planned, count=count, files=True)
            states.append(got)
            later = tuple(
                sorted(
                    s.partition
                    for s in members
                    if s.layout == got.layout
                    and any(
                        b.name == got.lineages.get(s.partition) and b.latest > c for b in s.lineages
                    )
                )
            )
            if later:
                ahead.append((op, later))
    location = ckpt.fileio.describe("")
    return CheckpointCheck(
        location, ckpt.query_id, c, flight, tuple(states), tuple(ahead), where, len(stores)
    )
