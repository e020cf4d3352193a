"""The catalog of a state root: which partition stores it holds, their lineages and versions.

A partition store lives at ``<root>/<operator dir>/<partition>/`` (:func:`store_dir_for`); a
tiered Spark query puts its stores under ``<state_uri>/<query id>/``, the operators' runner
under its state URI directly. :func:`find_stores` finds every store at any depth below the
URI it is given from one recursive listing: a store is a directory ``<dir>/<digits>`` holding
manifests of any lineage; everything above ``<dir>`` is the store's ``prefix`` (the query id
for tiered queries, empty for the runner).

A rescaled operator (:mod:`fsstate.store.rescale`) has its later stores in layout generation
directories, ``<dir>/@g<k>-<hex>/<digits>`` (a ``@`` never starts a path-safe operator name,
so these never read as an operator under a prefix), and the generations' records in
``<dir>/layouts/``. :func:`find_stores` returns the stores of one generation per operator: the
one in force at ``version`` (default the newest; :func:`fsstate.store.layout.in_force`), or the
one holding the lineage asked for; directories without a published record (a rescale that
died) are never returned.

Lineages (:mod:`fsstate.store.lineage`): a store's trunk manifests are ``manifests/<v>.json``,
each branch's ``branches/<branch>/<v>.json``, the forks' marks ``forks/<source>/...``. The same
listing finds them all: a :class:`StoreRef` holds every lineage of its store
(:attr:`StoreRef.lineages`) and is *seen on* one of them (:attr:`StoreRef.branch`, its
``versions``); :meth:`StoreRef.on` is the same store seen on another. Without a lineage asked
for, each operator is seen on its *current* lineage (:func:`current_lineage`): of the lineages
no other one continues (live heads), the one committed to last; a ``tiered()`` query's state
is on a lineage per query run, so this is the one its last run wrote. Every reader here takes
the view (:func:`read_store_manifest`, :class:`fsstate.inspect.Snapshot`,
:func:`fsstate.inspect.verify_stores`); a version below a branch's fork point is read from the
branch's source (:func:`fsstate.store.lineage.read_version`).

Invariants:

* A path is a trunk manifest only as ``<digits>/manifests/<20 digits>.json``, a branch manifest
  only as ``<digits>/branches/<name>/<20 digits>.json`` and a fork mark only as
  ``<digits>/forks/<source>/<20 digits>~<name>.json``, so none is taken for another, nor for a
  layout record (``layouts/<6 digits>.json``; tried after them), whatever a branch is named.
* A store is found if any lineage of it holds a manifest; a view on a lineage the store does
  not hold is absent (:func:`missing_partitions` says which partitions an operator lacks).
* Nothing here writes, and nothing is opened beyond what is asked: :func:`find_stores` costs
  one listing (plus one manifest read per store whose directory name may be a name
  :func:`store_dir_for` made path-safe: it ends in ``-`` and 8 hex digits, and one read per
  layout generation record of a rescaled operator); :func:`read_store_manifest` one read (a
  few along a fork chain).
* The versions a :class:`StoreRef` lists are the manifests present when the listing ran
  (a retained window; older ones may have been deleted by retention since).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from fsstate.errors import VersionNotFoundError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import BRANCH_DIR, MANIFEST_DIR, Manifest, read_manifest
from fsstate.store import store_dir_for
from fsstate.store.layout import LAYOUTS_DIR, Layout, in_force, read_layouts
from fsstate.store.lineage import (
    FORKS_DIR,
    ForkMark,
    Graph,
    history,
    live_heads,
    read_version,
)

_MANIFEST = re.compile(r"^(?:(.*)/)?([^/@]+)/(?:(@[^/]+)/)?(\d+)/manifests/(\d{20})\.json$")
_BRANCH = re.compile(
    r"^(?:(.*)/)?([^/@]+)/(?:(@[^/]+)/)?(\d+)/" + BRANCH_DIR + r"/([^/]+)/(\d{20})\.json$"
)
_MARK = re.compile(
    r"^(?:(.*)/)?([^/@]+)/(?:(@[^/]+)/)?(\d+)/" + FORKS_DIR + r"/([^/]+)/(\d{20})~([^/]+)\.json$"
)
_RECORD = re.compile(r"^(?:(.*)/)?([^/@]+)/" + LAYOUTS_DIR + r"/\d+\.json$")
_HASHED = re.compile(r"-[0-9a-f]{8}$")  # the suffix store_dir_for adds to a made-safe name


@dataclass(frozen=True)
class BranchRef:
    """A lineage of a partition store (:mod:`fsstate.store.lineage`) as the listing found it.

    Attributes:
        name: the lineage name (``""``: the trunk).
        versions: its committed versions found, ascending.
        newest_ms: when its newest manifest was written (storage's clock; None: unknown).
    """

    name: str
    versions: tuple[int, ...]
    newest_ms: int | None = None

    @property
    def latest(self) -> int:
        """The lineage's newest committed version."""
        return self.versions[-1]


@dataclass(frozen=True)
class Fork:
    """Where a branch started: a version of its source lineage (``""``: the trunk)."""

    source: str
    version: int

    def describe(self) -> str:
        """``version 12 of the trunk`` / ``version 12 of branch v9-...``."""
        of = f"branch {self.source}" if self.source else "the trunk"
        return f"version {self.version} of {of}"


@dataclass(frozen=True)
class StoreRef:
    """One partition store found under a state root, seen on one of its lineages.

    Attributes:
        prefix: the path from the scanned root to the store's root ('' or a query id).
        operator: the operator (store) name, as :meth:`PartitionStore.open` takes it.
        partition: partition id.
        versions: committed versions found on :attr:`branch`, ascending (empty: the store
            does not hold that lineage).
        layout: the directory of its layout generation (``""``: generation 0).
        since: the first version its generation holds (-1: every version).
        branch: the lineage ``versions`` are of and readers read (``""``: the trunk).
        lineages: every lineage of the store holding versions, trunk first.
        marks: the forks marked in the store.
    """

    prefix: str
    operator: str
    partition: int
    versions: tuple[int, ...]
    layout: str = ""
    since: int = -1
    branch: str = ""
    lineages: tuple[BranchRef, ...] = ()
    marks: tuple[ForkMark, ...] = ()

    @property
    def latest(self) -> int:
        """The newest committed version of the lineage seen."""
        return self.versions[-1]

    def root(self, fileio: FileIO) -> FileIO:
        """A FileIO rooted where :meth:`PartitionStore.open` finds this store."""
        return fileio.child(self.prefix) if self.prefix else fileio

    @property
    def store_dir(self) -> str:
        """Directory of the store relative to its root."""
        return store_dir_for(self.operator, self.partition, self.layout)

    @property
    def branches(self) -> tuple[BranchRef, ...]:
        """The store's branches (its lineages but the trunk)."""
        return tuple(b for b in self.lineages if b.name)

    @property
    def branch_names(self) -> tuple[str, ...]:
        """The names of the store's branches, sorted."""
        return tuple(b.name for b in self.branches)

    @property
    def trunk(self) -> tuple[int, ...]:
        """The trunk's versions (empty: none)."""
        return next((b.versions for b in self.lineages if not b.name), ())

    def graph(self) -> Graph:
        """The store's lineage graph, from the listing (forks without a mark are roots)."""
        return Graph.of({b.name: b.versions for b in self.lineages}, self.marks)

    def history(self) -> tuple[int, ...]:
        """Every version of the lineage seen that the store holds, its own and, below its fork
        point, its sources' (ascending): what reads of this lineage can open."""
        if not self.versions:
            return ()
        got = history(self.graph(), self.branch, self.latest, self.latest + 1)
        return tuple(sorted(v for _, v in got))

    def on(self, branch: str) -> StoreRef | None:
        """The store seen on lineage ``branch`` (``""``: the trunk); None if it holds no
        version of it."""
        found = next((b for b in self.lineages if b.name == branch), None)
        if found is None:
            return None
        return dataclasses.replace(self, versions=found.versions, branch=branch)


def as_fileio(uri: str | Location | FileIO) -> FileIO:
    """A FileIO for a URI, a location or a FileIO."""
    return uri if isinstance(uri, FileIO) else FileIO(uri)


def find_stores(
    uri: str | Location | FileIO,
    *,
    prefix: str | None = None,
    operator: str | None = None,
    partition: int | None = None,
    version: int | None = None,
    branch: str | None = None,
) -> list[StoreRef]:
    """Every partition store under ``uri`` with a committed version, of the layout generation
    in force at ``version`` for a rescaled operator (or the one holding ``branch``), each seen
    on ``branch`` or its operator's current lineage (see the module docstring).

    Args:
        uri: a state root (local path or object store URI), a location or a FileIO.
        prefix: only stores under this prefix (a tiered query's id).
        operator: only this operator.
        partition: only this partition.
        version: pick each operator's generation in force at this version (None: the newest).
        branch: see every store on this lineage (None: its operator's current one). A store
            without it is returned with no versions.

    Returns:
        Stores sorted by (prefix, operator, partition).
    """
    fileio = as_fileio(uri)
    out: list[StoreRef] = []
    for (pre, _op), (rescaled, refs) in _grouped(fileio, prefix, operator, partition).items():
        out += _one_generation(fileio, pre, rescaled, refs, version, branch)
    return sorted(out, key=lambda s: (s.prefix, s.operator, s.partition))


def all_stores(
    uri: str | Location | FileIO, *, prefix: str | None = None, operator: str | None = None
) -> list[StoreRef]:
    """Every partition store under ``uri`` of every layout generation (directories of no
    published record included), seen on its trunk: what checks and collections look at.
    One listing, as :func:`find_stores`."""
    fileio = as_fileio(uri)
    out = [r for _, refs in _grouped(fileio, prefix, operator, None).values() for r in refs]
    return sorted(out, key=lambda s: (s.prefix, s.operator, s.layout, s.partition))


def _grouped(
    fileio: FileIO, prefix: str | None, operator: str | None, partition: int | None
) -> dict[tuple[str, str], tuple[bool, list[StoreRef]]]:
    """The stores of one listing by (prefix, operator directory): whether the operator has
    layout records, and its stores of every generation, seen on the trunk."""
    found, rescaled = _scan(fileio)
    by_op: dict[tuple[str, str], list[StoreRef]] = {}
    for (pre, op_dir, layout, part), (lines, marks) in found.items():
        if (prefix is not None and pre != prefix) or (partition is not None and part != partition):
            continue
        name = _operator_name(fileio, pre, op_dir, layout, part, lines)
        if operator is not None and name != operator:
            continue
        refs = tuple(
            BranchRef(b, tuple(sorted(vs)), newest) for b, (vs, newest) in sorted(lines.items())
        )
        trunk = next((b.versions for b in refs if not b.name), ())
        ref = StoreRef(pre, name, part, trunk, layout, lineages=refs, marks=tuple(marks))
        by_op.setdefault((pre, op_dir), []).append(ref)
    return {
        (pre, op_dir): (op_dir in rescaled.get(pre, set()), refs)
        for (pre, op_dir), refs in by_op.items()
    }


def _operator_name(
    fileio: FileIO,
    pre: str,
    op_dir: str,
    layout: str,
    part: int,
    lines: dict[str, tuple[list[int], int | None]],
) -> str:
    """The operator a store directory holds (read from a manifest when the directory name
    may be one :func:`store_dir_for` made path-safe)."""
    if not _HASHED.search(op_dir):
        return op_dir
    root = fileio.child(pre) if pre else fileio
    lineage, (versions, _) = next(iter(sorted(lines.items())))
    store_dir = f"{op_dir}/{layout + '/' if layout else ''}{part}"
    return read_manifest(root, store_dir, max(versions), lineage).operator


def _one_generation(
    fileio: FileIO,
    pre: str,
    rescaled: bool,
    refs: list[StoreRef],
    version: int | None,
    branch: str | None,
) -> list[StoreRef]:
    """The stores of one operator of the generation to read, seen on the lineage to read."""
    since = -1
    if rescaled or any(r.layout for r in refs):
        layouts = read_layouts(fileio.child(pre) if pre else fileio, refs[0].operator)
        named = {g.dir: g for g in layouts}
        refs = [r for r in refs if r.layout in named]  # no record: a rescale that died
        gen = _generation(layouts, refs, version, branch)
        refs = [r for r in refs if r.layout == gen.dir]
        since = gen.since
    line = current_lineage(refs) if branch is None else branch
    out = []
    for r in refs:
        view = r.on(line)
        out.append(view if view is not None else dataclasses.replace(r, branch=line))
    return [dataclasses.replace(r, since=since) for r in out]


def _generation(
    layouts: list[Layout], refs: list[StoreRef], version: int | None, branch: str | None
) -> Layout:
    """The generation to read: the one in force at ``version``, unless ``branch`` lives only
    in another (then the newest generation holding it)."""
    gen = in_force(layouts, version)
    if branch is None:
        return gen
    holding = {r.layout for r in refs if r.on(branch) is not None}
    if gen.dir in holding or not holding:
        return gen
    return max((g for g in layouts if g.dir in holding), key=lambda g: g.generation)


def current_lineage(stores: list[StoreRef]) -> str:
    """The lineage an operator's stores are read on by default: of their live heads, the one
    committed to last (see the module docstring); the trunk if they hold none."""
    best: tuple[int, str] | None = None
    for s in stores:
        heads = set(live_heads(s.graph()))
        for b in s.lineages:
            if b.name in heads:
                key = (b.newest_ms or 0, b.name)
                best = key if best is None or key > best else best
    return "" if best is None else best[1]


def current_branch(fileio: FileIO, operator: str, partition: int, layout: str = "") -> str:
    """The lineage one store is read on by default (:func:`current_lineage` of that store
    alone: one listing of its directory); the trunk if it holds none."""
    base = store_dir_for(operator, partition, layout)
    lines: _Lines = {}
    marks: list[ForkMark] = []
    for entry in fileio.list(base, recursive=True):
        parts = entry.path[len(base) + 1 :].split("/")
        name = parts[-1][:-5] if parts[-1].endswith(".json") else ""
        if parts[0] in (MANIFEST_DIR, BRANCH_DIR) and len(name) == 20 and name.isdigit():
            line = "" if parts[0] == MANIFEST_DIR else parts[1]
            vs, newest = lines.get(line, ([], None))
            vs.append(int(name))
            t = entry.mtime_ms
            lines[line] = (vs, newest if t is None or (newest is not None and newest >= t) else t)
        elif parts[0] == FORKS_DIR and len(parts) == 3 and "~" in name:
            v, _, child = name.partition("~")
            if v.isdigit():
                marks.append(ForkMark("" if parts[1] == "_" else parts[1], int(v), child))
    refs = tuple(BranchRef(b, tuple(sorted(vs)), t) for b, (vs, t) in lines.items())
    store = StoreRef("", operator, partition, (), layout, lineages=refs, marks=tuple(marks))
    return current_lineage([store])


def live_lineages(stores: list[StoreRef]) -> list[str]:
    """Every lineage that is a live head in some store of ``stores``, sorted."""
    return sorted({h for s in stores for h in live_heads(s.graph())})


_Key = tuple[str, str, str, int]  # (prefix, operator dir, layout dir, partition)
_Lines = dict[str, tuple[list[int], int | None]]  # lineage -> (versions, newest mtime)


def _scan(fileio: FileIO) -> tuple[dict[_Key, tuple[_Lines, list[ForkMark]]], dict[str, set[str]]]:
    """One recursive listing: each store's lineages (versions, newest manifest's mtime) and
    fork marks, and per prefix the operator dirs with layout records (see the module
    docstring's invariants)."""
    found: dict[_Key, tuple[_Lines, list[ForkMark]]] = {}
    rescaled: dict[str, set[str]] = {}
    for entry in fileio.list("", recursive=True):
        m = _MANIFEST.match(entry.path)
        b = None if m else _BRANCH.match(entry.path)
        hit = m or b
        if hit:
            key = (hit.group(1) or "", hit.group(2), hit.group(3) or "", int(hit.group(4)))
            lines = found.setdefault(key, ({}, []))[0]
            name, v = ("", int(hit.group(5))) if m else (hit.group(5), int(hit.group(6)))
            vs, newest = lines.get(name, ([], None))
            vs.append(v)
            t = entry.mtime_ms
            lines[name] = (vs, newest if t is None or (newest is not None and newest >= t) else t)
            continue
        k = _MARK.match(entry.path)
        if k:
            key = (k.group(1) or "", k.group(2), k.group(3) or "", int(k.group(4)))
            src = "" if k.group(5) == "_" else k.group(5)
            found.setdefault(key, ({}, []))[1].append(ForkMark(src, int(k.group(6)), k.group(7)))
            continue
        r = _RECORD.match(entry.path)
        if r:
            rescaled.setdefault(r.group(1) or "", set()).add(r.group(2))
    return {k: v for k, v in found.items() if v[0]}, rescaled


def read_store_manifest(fileio: FileIO, store: StoreRef, version: int | None = None) -> Manifest:
    """The manifest of a version of ``store`` on its lineage (default its newest; a version
    below the lineage's fork point is read from its source).

    Raises:
        VersionNotFoundError: the version has no manifest (never committed, or not retained).
        ManifestCorruptError: it is damaged.
    """
    v = store.latest if version is None else version
    return read_version(store.root(fileio), store.store_dir, v, store.branch)


def read_fork(fileio: FileIO, store: StoreRef, branch: str) -> Fork | None:
    """Where ``branch`` of ``store`` started: its fork mark, else its oldest retained manifest
    (one read); None if neither says, or the store has no such branch.

    Raises:
        ManifestCorruptError: that manifest is damaged.
    """
    mark = next((m for m in store.marks if m.lineage == branch), None)
    if mark is not None:
        return Fork(mark.source, mark.version)
    found = next((b for b in store.branches if b.name == branch), None)
    if found is None:
        return None
    try:
        first = read_manifest(store.root(fileio), store.store_dir, found.versions[0], branch)
    except VersionNotFoundError:
        return None  # dropped by the branch's retention since the listing
    origin = first.meta.get("forked_from")
    if not isinstance(origin, dict) or "version" not in origin:
        return None
    return Fork(str(origin.get("branch") or ""), int(origin["version"]))


def on_branch(stores: list[StoreRef], branch: str) -> list[StoreRef]:
    """``stores`` seen on ``branch``, leaving out those without it."""
    views = [s.on(branch) for s in stores]
    return [v for v in views if v is not None]


def branch_names(stores: list[StoreRef]) -> list[str]:
    """Every branch any of ``stores`` has, sorted."""
    return sorted({b for s in stores for b in s.branch_names})


def prefixes(stores: list[StoreRef]) -> list[str]:
    """The distinct prefixes (query ids) of ``stores``, sorted."""
    return sorted({s.prefix for s in stores})


def missing_partitions(fileio: FileIO, stores: list[StoreRef]) -> dict[tuple[str, str], list[int]]:
    """Per (prefix, operator) of ``stores``: the partitions below its generation's recorded
    count that ``stores`` do not hold on the lineage they are seen on (one read of the
    operator's layout records; an operator with no recorded count: the partitions below the
    highest found)."""
    out: dict[tuple[str, str], list[int]] = {}
    groups: dict[tuple[str, str], list[StoreRef]] = {}
    for s in stores:
        groups.setdefault((s.prefix, s.operator), []).append(s)
    for (pre, op), members in groups.items():
        layouts = read_layouts(fileio.child(pre) if pre else fileio, op)
        gen = next((g for g in layouts if g.dir == members[0].layout), layouts[0])
        held = {s.partition for s in members if s.versions}
        count = gen.partitions if gen.partitions is not None else max(held, default=-1) + 1
        lacking = sorted(set(range(count)) - held)
        if lacking:
            out[(pre, op)] = lacking
    return out
