"""Garbage collection across lineages and layout generations: delete only what nothing reaches.

:func:`collect` decides, for one operator's state (every layout generation, every partition, or
the stores it is given), what no lineage needs, and deletes it:

* **Versions.** A store retains, for each live head (:mod:`fsstate.store.lineage` rule 4), the
  newest ``retain`` versions of its history (into its fork sources; below a generation's first
  version, into the generation its rescale read, in every partition of it). A lineage continued
  by a rescale (the layout record names the lineage it read in each old partition,
  :mod:`fsstate.store.layout`) is no live head there. Every other manifest goes.
* **Files.** A data file goes when no retained manifest names it, it is older than
  ``grace_ms`` (by its modification time), and it is not under a writer's lease: its name's tag
  has no lease in force (:mod:`fsstate.storage.leases`, read before the manifests are listed and
  again after the data is listed). A file named before origins were recorded has no tag: it
  goes by age alone, and only if the decision took less than half the grace time.
* **Directories.** A layout generation directory no record names (a rescale that died) goes
  once its newest file is older than ``grace_ms``; a fork mark whose lineage holds no version
  any more goes once older than ``grace_ms``.

Order of the deletions: manifests first; then the fork marks of each store whose manifests were
deleted are listed again, and a store that meets a new mark of a deleted version (a fork that
raced the collection, :mod:`fsstate.store.lineage` rule 2) keeps all its files this time; then
the files.

Invariants:

* Fails closed: any error while listing or reading what it decides from raises
  :class:`fsstate.errors.GarbageCollectionError` before anything is deleted.
* A crashed run's leftover and a lineage a restart went on from stop being live heads only once
  their newest version is older than ``abandoned_ms`` (the writer is gone by then, not just
  idle).
* Memory: the listing and the file sets of the retained manifests, counted in the process's
  memory budget while the collection runs (:meth:`fsstate.controller.MemoryController.reserved`);
  the file sets of manifests read are cached per process (immutable files), at most
  :data:`CACHED_MAX` manifests.
* Requests: one recursive LIST of the operator's directory (or one per store given), one
  GET of each layout record, two LISTs of the leases, one GET per retained manifest not read
  before in this process (and per branch first manifest whose fork has no mark), one LIST of
  fork marks per store whose manifests were deleted, bulk DELETEs.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from fsstate.controller import get_controller
from fsstate.errors import FsStateError, GarbageCollectionError
from fsstate.storage.fileio import FileEntry, FileIO
from fsstate.storage.leases import lease_in_force, read_leases
from fsstate.storage.manifest import BRANCH_DIR, MANIFEST_DIR, Manifest, manifest_path
from fsstate.storage.naming import origin_of
from fsstate.store.identity import LAYOUT_PREFIX, WRITER_META, operator_dir
from fsstate.store.layout import Layout, read_layouts, source_of
from fsstate.store.lineage import (
    FORKS_DIR,
    ForkMark,
    Graph,
    fork_marks,
    fork_source,
    history,
    live_heads,
)
from fsstate.store.record import Writer

__all__ = ["ABANDONED_MS", "CACHED_MAX", "Collection", "StoreCollection", "collect"]

ABANDONED_MS = 24 * 3600 * 1000  # a lineage nobody committed to for this long may be continued
CACHED_MAX = 50_000  # manifests whose file sets a process keeps


@dataclass(frozen=True)
class StoreCollection:
    """What one store's collection deleted (or would: ``dry_run``).

    Attributes:
        layout: the store's generation directory (``""``: generation 0).
        partition: the partition.
        manifests: manifests deleted, as (lineage, version).
        files: data files deleted.
        bytes: their bytes.
        kept_files: whether its files were all kept (a fork raced the collection).
    """

    layout: str
    partition: int
    manifests: tuple[tuple[str, int], ...]
    files: int
    bytes: int
    kept_files: bool = False


@dataclass(frozen=True)
class Collection:
    """What :func:`collect` did for one operator.

    Attributes:
        operator: the operator.
        stores: per store.
        dead_dirs: generation directories of rescales that died, deleted.
        requests: storage requests made.
        elapsed_ms: wall time.
    """

    operator: str
    stores: tuple[StoreCollection, ...]
    dead_dirs: tuple[str, ...]
    requests: int
    elapsed_ms: float

    @property
    def manifests(self) -> int:
        """Manifests deleted in all."""
        return sum(len(s.manifests) for s in self.stores)

    @property
    def files(self) -> int:
        """Data files deleted in all."""
        return sum(s.files for s in self.stores)


@dataclass
class _Store:
    """One store directory as listed."""

    layout: str
    partition: int
    versions: dict[str, list[int]] = field(default_factory=dict)
    manifests: dict[tuple[str, int], FileEntry] = field(default_factory=dict)
    marks: list[tuple[ForkMark, FileEntry]] = field(default_factory=list)
    data: list[FileEntry] = field(default_factory=list)
    other: list[FileEntry] = field(default_factory=list)

    @property
    def store_dir(self) -> str:
        return f"{self.layout + '/' if self.layout else ''}{self.partition}"


_cache: OrderedDict[tuple[str, str, int | None], tuple[frozenset[str], int | None, object]] = (
    OrderedDict()
)
_cache_lock = threading.Lock()


def _read(fileio: FileIO, path: str, entry: FileEntry) -> tuple[frozenset[str], int | None, object]:
    """(files, planned_ms, fork source) of the manifest at ``path`` (cached per process)."""
    key = (fileio.describe(path), path, entry.mtime_ms)
    with _cache_lock:
        got = _cache.get(key)
        if got is not None:
            _cache.move_to_end(key)
            return got
    m = Manifest.from_bytes(fileio.read_bytes(path), fileio.describe(path))
    writer = Writer.from_meta(m.meta.get(WRITER_META))
    files = frozenset(sys.intern(f) for f in m.files())
    got = (files, None if writer is None else writer.planned_ms, fork_source(m))
    with _cache_lock:
        _cache[key] = got
        while len(_cache) > CACHED_MAX:
            _cache.popitem(last=False)
    return got


def _parse(
    base: str, entries: Iterable[FileEntry]
) -> tuple[dict[tuple[str, int], _Store], dict[str, list[FileEntry]]]:
    """The stores under an operator directory ``base`` and the files of its generation
    directories by name (for the dead ones)."""
    stores: dict[tuple[str, int], _Store] = {}
    gen_dirs: dict[str, list[FileEntry]] = {}
    for e in entries:
        rel = e.path[len(base) + 1 :] if e.path.startswith(base + "/") else e.path
        parts = rel.split("/")
        layout = ""
        if parts[0].startswith(LAYOUT_PREFIX):
            gen_dirs.setdefault(parts[0], []).append(e)
            layout, parts = parts[0], parts[1:]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        s = stores.setdefault((layout, int(parts[0])), _Store(layout, int(parts[0])))
        _place(s, parts[1:], e)
    return stores, gen_dirs


def _place(s: _Store, rest: list[str], e: FileEntry) -> None:
    """File ``e`` (``rest``: its path within the store directory) into ``s``."""
    name = rest[-1]
    version = name[:-5] if name.endswith(".json") else ""
    if rest[0] == MANIFEST_DIR and len(rest) == 2 and version.isdigit() and len(version) == 20:
        s.versions.setdefault("", []).append(int(version))
        s.manifests[("", int(version))] = e
    elif rest[0] == BRANCH_DIR and len(rest) == 3 and version.isdigit() and len(version) == 20:
        s.versions.setdefault(rest[1], []).append(int(version))
        s.manifests[(rest[1], int(version))] = e
    elif rest[0] == FORKS_DIR and len(rest) == 3:
        v, sep, child = name[:-5].partition("~") if name.endswith(".json") else ("", "", "")
        if sep and v.isdigit() and child:
            src = "" if rest[1] == "_" else rest[1]
            s.marks.append((ForkMark(src, int(v), child), e))
    elif rest[0] == "data" and len(rest) == 2:
        s.data.append(e)
    else:
        s.other.append(e)


class _Run:
    """One collection: its inputs, clock and decisions."""

    def __init__(
        self,
        fileio: FileIO,
        operator: str,
        retain: int,
        grace_ms: int,
        abandoned_ms: int,
        clock: Callable[[], int],
    ) -> None:
        self.fileio = fileio
        self.operator = operator
        self.base = operator_dir(operator)
        self.retain = retain
        self.grace_ms = grace_ms
        self.abandoned_ms = abandoned_ms
        self.clock = clock
        self.t0 = clock()
        self.stores: dict[tuple[str, int], _Store] = {}
        self.retained: dict[tuple[str, int], set[tuple[str, int]]] = {}

    def path(self, s: _Store, rel: str) -> str:
        return f"{self.base}/{s.store_dir}/{rel}"

    def info(
        self, s: _Store, lineage: str, version: int
    ) -> tuple[frozenset[str], int | None, object]:
        rel = manifest_path(s.store_dir, version, lineage)
        return _read(self.fileio, f"{self.base}/{rel}", s.manifests[(lineage, version)])

    def graph(self, s: _Store) -> Graph:
        """The store's lineage graph: fork marks, and the first manifest of each branch
        without one."""
        marks = [m for m, _ in s.marks]
        marked = {m.lineage for m in marks}
        for lineage, versions in s.versions.items():
            if lineage and lineage not in marked:
                src = self.info(s, lineage, min(versions))[2]
                if isinstance(src, ForkMark):
                    marks.append(ForkMark(src.source, src.version, lineage))
        return Graph.of(s.versions, marks)

    def planning(self, s: _Store) -> Callable[[str, int], int | None]:
        """Planning times of the store's versions, for versions settled long enough."""

        def planned(lineage: str, version: int) -> int | None:
            entry = s.manifests.get((lineage, version))
            if entry is None or not self.settled(entry):
                return None
            return self.info(s, lineage, version)[1]

        return planned

    def settled(self, entry: FileEntry) -> bool:
        return entry.mtime_ms is not None and self.t0 - entry.mtime_ms >= self.abandoned_ms


def collect(
    fileio: FileIO,
    operator: str,
    *,
    retain: int,
    grace_ms: int,
    abandoned_ms: int = ABANDONED_MS,
    stores: Sequence[tuple[str, int]] | None = None,
    dry_run: bool = False,
    clock: Callable[[], int] | None = None,
) -> Collection:
    """Collect the garbage of ``operator``'s state under ``fileio`` (see the module docstring).

    Args:
        fileio: the root the operator's stores are under.
        operator: the operator (store name).
        retain: versions each live head keeps along its history (>= 1).
        grace_ms: unreferenced files younger than this are kept (>= 0).
        abandoned_ms: how long a lineage must have been left before it counts as continued.
        stores: only these stores, as (layout directory, partition); None: every one, and the
            dead rescales' directories. A partial collection keeps, for a newer generation that
            read one of them, everything that generation could still need.
        dry_run: decide and report, delete nothing.
        clock: the wall clock in ms (tests).

    Raises:
        GarbageCollectionError: something it decides from could not be read (nothing
            deleted).
        StorageError: a delete failed (what was deleted before stays deleted; run it again).
    """
    tick = clock or (lambda: int(time.time() * 1000))
    run = _Run(fileio, operator, retain, grace_ms, abandoned_ms, tick)
    before = fileio.stats.requests
    try:
        leases = read_leases(fileio)
        layouts = read_layouts(fileio, operator)
        entries = _list(fileio, run.base, stores)
        run.stores, gen_dirs = _parse(run.base, entries)
        with get_controller().reserved(_estimate(entries)):
            _retain(run, layouts, stores is None)
            plan = _plan(run, leases)
            for tag, until in read_leases(fileio).items():  # leases taken while listing
                plan.protect_tag(tag, until, run.t0)
    except FsStateError as exc:
        if isinstance(exc, GarbageCollectionError):
            raise
        raise GarbageCollectionError(
            f"garbage collection of operator {operator!r} under {fileio.describe('')}: could "
            f"not read what it decides from ({exc}); nothing was deleted, run it again"
        ) from exc
    dead = _dead_dirs(run, layouts, gen_dirs) if stores is None else []
    done = plan.execute(run, dead, dry_run)
    return Collection(
        operator,
        done,
        tuple(sorted(dead)),
        fileio.stats.requests - before,
        float(tick() - run.t0),
    )


def _list(fileio: FileIO, base: str, stores: Sequence[tuple[str, int]] | None) -> list[FileEntry]:
    if stores is None:
        return fileio.list(base, recursive=True)
    out: list[FileEntry] = []
    for layout, p in stores:
        out += fileio.list(f"{base}/{store_dir_for_rel(layout, p)}", recursive=True)
    return out


def store_dir_for_rel(layout: str, partition: int) -> str:
    """A store's directory relative to its operator's (``<p>`` or ``<layout>/<p>``)."""
    return f"{layout + '/' if layout else ''}{int(partition)}"


def _estimate(entries: Sequence[FileEntry]) -> int:
    """Bytes the collection holds: the listing and the file sets built from it (a bound)."""
    return sum(3 * len(e.path) + 200 for e in entries)


@dataclass(frozen=True)
class _Rescale:
    """A generation's rescale as the generation it read sees it: the version read, the new
    generation's first version, the lineage read per partition, and the lowest version the
    new generation's retained histories reach (None: none below its first version)."""

    read: int
    since: int
    lineages: tuple[str, ...]
    need: int | None


def _retain(run: _Run, layouts: list[Layout], complete: bool) -> None:
    """Fill ``run.retained``: what every store keeps (newest generation first, so a newer
    generation's needs reach the ones it read)."""
    listed = {s.layout for s in run.stores.values()}
    by_source: dict[str, list[_Rescale]] = {}
    for g in sorted(layouts, key=lambda x: -x.generation):
        lowest: int | None = None
        for s in [x for x in run.stores.values() if x.layout == g.dir]:
            low = _retain_store(run, s, by_source.get(g.dir, []))
            lowest = low if lowest is None or (low is not None and low < lowest) else lowest
        src = source_of(layouts, g)
        if src is None:
            continue
        if not complete or g.dir not in listed:  # not looked at: all it could need
            need: int | None = g.since - run.retain + 1
        else:
            need = lowest if lowest is not None and lowest < g.since else None
        read = g.since if g.read is None else g.read
        by_source.setdefault(src.dir, []).append(_Rescale(read, g.since, g.lineages, need))
    for s in run.stores.values():  # stores of no recorded generation keep everything
        if not any(g.dir == s.layout for g in layouts):
            run.retained[(s.layout, s.partition)] = set(s.manifests)


def _retain_store(run: _Run, s: _Store, rescales: list[_Rescale]) -> int | None:
    """Fill what store ``s`` retains; returns the lowest version kept for its live heads and
    for the generations that read it."""
    graph = run.graph(s)
    by_rescale: set[str] = set()
    needs: list[tuple[str, int, int]] = []
    for r in rescales:
        line = r.lineages[s.partition] if s.partition < len(r.lineages) else ""
        if line in graph.versions and graph.head(line) <= r.read:
            by_rescale.add(line)  # continued, in the generation the rescale wrote
        if r.need is not None and r.need < r.since and line in graph.versions:
            needs.append((line, r.since - 1, r.since - r.need))
    keep: set[tuple[str, int]] = set()
    lows: list[int] = []
    heads = set(live_heads(graph, run.planning(s)))
    for lineage in graph.versions:
        head = graph.head(lineage)
        if lineage in by_rescale:
            continue
        if lineage not in heads and run.settled(s.manifests[(lineage, head)]):
            continue  # continued, and left long enough
        keep.update(history(graph, lineage, head, run.retain))
        lows.append(head - run.retain + 1)
    for line, top, count in needs:
        keep.update(history(graph, line, top, count))
        lows.append(top - count + 1)
    run.retained[(s.layout, s.partition)] = keep
    return min(lows, default=None)


@dataclass
class _Plan:
    """What a collection deletes, per store."""

    manifests: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)
    files: dict[tuple[str, int], list[FileEntry]] = field(default_factory=dict)
    marks: dict[tuple[str, int], list[FileEntry]] = field(default_factory=dict)
    protected: set[str] = field(default_factory=set)  # tags leased while listing
    legacy_ok: bool = True

    def protect_tag(self, tag: str, until: int, now: int) -> None:
        """A lease of ``tag`` was in force at ``now``: keep its files."""
        if now < until:
            self.protected.add(tag)

    def deletable(self, e: FileEntry, raced: bool) -> bool:
        """Whether a planned file goes (its store met no racing fork; a lease taken while
        listing keeps it; a file without origin goes only on a quick decision)."""
        if raced:
            return False
        origin = origin_of(e.path)
        if origin is None:
            return self.legacy_ok
        return origin.tag not in self.protected

    def execute(self, run: _Run, dead: list[str], dry_run: bool) -> tuple[StoreCollection, ...]:
        """Delete (unless ``dry_run``) in the order of the module docstring."""
        fileio, out = run.fileio, []
        if not self.legacy_ok or run.clock() - run.t0 > run.grace_ms // 2:
            self.legacy_ok = False
        raced: set[tuple[str, int]] = set()
        if not dry_run:
            for key, doomed in self.manifests.items():
                s = run.stores[key]
                fileio.delete_many(
                    [f"{run.base}/{manifest_path(s.store_dir, v, ln)}" for ln, v in doomed]
                )
            for key, doomed in self.manifests.items():  # the fork handshake
                s = run.stores[key]
                seen = {m for m, _ in s.marks}
                gone = set(doomed)
                for m in fork_marks(fileio, f"{run.base}/{s.store_dir}"):
                    if m not in seen and (m.source, m.version) in gone:
                        raced.add(key)
        for key, s in sorted(run.stores.items()):
            files = [e for e in self.files.get(key, []) if self.deletable(e, key in raced)]
            if not dry_run:
                fileio.delete_many(
                    [e.path for e in files] + [e.path for e in self.marks.get(key, [])]
                )
            out.append(
                StoreCollection(
                    s.layout,
                    s.partition,
                    tuple(sorted(self.manifests.get(key, []))),
                    len(files),
                    sum(e.size_bytes for e in files),
                    key in raced,
                )
            )
        if dead and not dry_run:
            fileio.delete_many(dead)
        return tuple(out)


def _plan(run: _Run, leases: dict[str, int]) -> _Plan:
    """Decide every store's deletions (reads the retained manifests)."""
    plan = _Plan()
    now = run.t0
    for key, s in run.stores.items():
        keep = run.retained.get(key, set(s.manifests))
        live: set[str] = set()
        for lineage, v in keep:
            live |= run.info(s, lineage, v)[0]
        plan.manifests[key] = sorted(k for k in s.manifests if k not in keep)
        old = [e for e in s.data if e.mtime_ms is not None and now - e.mtime_ms >= run.grace_ms]
        prefix = f"{run.base}/{s.store_dir}/"
        doomed = []
        for e in old:
            rel = e.path[len(prefix) :] if e.path.startswith(prefix) else e.path
            if rel in live:
                continue
            origin = origin_of(rel)
            if origin is not None and lease_in_force(leases, origin.tag, now):
                continue
            doomed.append(e)
        plan.files[key] = doomed
        lineages = {ln for ln, _ in keep} | set(s.versions)
        plan.marks[key] = [
            e
            for m, e in s.marks
            if m.lineage not in lineages
            and e.mtime_ms is not None
            and now - e.mtime_ms >= run.grace_ms
        ]
    return plan


def _dead_dirs(run: _Run, layouts: list[Layout], gen_dirs: dict[str, list[FileEntry]]) -> list[str]:
    """Every file of the generation directories no record names, once their newest file is
    older than the grace time."""
    named = {g.dir for g in layouts}
    out: list[str] = []
    for d, files in gen_dirs.items():
        if d in named:
            continue
        newest = max((e.mtime_ms for e in files if e.mtime_ms is not None), default=None)
        if newest is not None and run.t0 - newest >= run.grace_ms:
            out += [e.path for e in files]
    return out
