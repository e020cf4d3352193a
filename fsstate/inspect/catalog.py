"""The catalog of a state root: which partition stores it holds, and their committed versions.

A partition store lives at ``<root>/<operator dir>/<partition>/`` (:func:`store_dir_for`); a
tiered Spark query puts its stores under ``<state_uri>/<query id>/``, the operators' runner
under its state URI directly. :func:`find_stores` finds every store at any depth below the
URI it is given from one recursive listing: a store is a directory ``<dir>/<digits>`` holding
``manifests/<20 digits>.json``; everything above ``<dir>`` is the store's ``prefix`` (the
query id for tiered queries, empty for the runner).

A rescaled operator (:mod:`fsstate.store.rescale`) has its later stores in layout generation
directories, ``<dir>/@g<k>-<hex>/<digits>`` (a ``@`` never starts a path-safe operator name,
so these never read as an operator under a prefix), and the generations' records in
``<dir>/layouts/``. :func:`find_stores` returns the stores of one generation per operator: the
one in force at ``version`` (default the newest; :func:`fsstate.store.layout.in_force`);
directories without a published record (a rescale that died) are never returned.

Branches (:mod:`fsstate.store.branches`): a store's trunk manifests are
``manifests/<v>.json``, each branch's ``branches/<branch>/<v>.json`` in the store directory.
The same listing finds both: a :class:`StoreRef` holds its trunk versions and its
:attr:`StoreRef.branches` (name and versions of each); :meth:`StoreRef.on` is the same store seen
on one branch (its ``versions`` those of the branch, :attr:`StoreRef.branch` naming it), which
every reader here takes (:func:`read_store_manifest`, :class:`fsstate.inspect.Snapshot`,
:func:`fsstate.inspect.verify_stores`). Where a branch started (source branch and version) is
recorded only in its first manifest: :func:`read_fork` reads it (one read), and knows it while
that version is retained.

Invariants:

* A path is a trunk manifest only as ``<digits>/manifests/<20 digits>.json`` and a branch
  manifest only as ``<digits>/branches/<name>/<20 digits>.json``, so neither is taken for the
  other, nor for a layout record (``layouts/<6 digits>.json``; tried after both), whatever a
  branch is named.
* A store is found by its trunk versions (a store whose trunk holds no manifest is not listed,
  whatever its branches hold: :func:`fsstate.inspect.missing_partitions` names it).
* Nothing here writes, and nothing is opened beyond what is asked: :func:`find_stores` costs
  one listing (plus one manifest read per store whose directory name may be a name
  :func:`store_dir_for` made path-safe: it ends in ``-`` and 8 hex digits, and one read per
  layout generation record of a rescaled operator);
  :func:`read_store_manifest` one read.
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
from fsstate.storage.manifest import BRANCH_DIR, Manifest, read_manifest
from fsstate.store import store_dir_for
from fsstate.store.branches import FORKED_META
from fsstate.store.layout import LAYOUTS_DIR, Layout, in_force, read_layouts

_MANIFEST = re.compile(r"^(?:(.*)/)?([^/@]+)/(?:(@[^/]+)/)?(\d+)/manifests/(\d{20})\.json$")
_BRANCH = re.compile(
    r"^(?:(.*)/)?([^/@]+)/(?:(@[^/]+)/)?(\d+)/" + BRANCH_DIR + r"/([^/]+)/(\d{20})\.json$"
)
_RECORD = re.compile(r"^(?:(.*)/)?([^/@]+)/" + LAYOUTS_DIR + r"/\d+\.json$")
_HASHED = re.compile(r"-[0-9a-f]{8}$")  # the suffix store_dir_for adds to a made-safe name


@dataclass(frozen=True)
class BranchRef:
    """A branch of a partition store (:mod:`fsstate.store.branches`) as the listing found it.

    Attributes:
        name: the branch name.
        versions: its committed versions found, ascending.
    """

    name: str
    versions: tuple[int, ...]

    @property
    def latest(self) -> int:
        """The branch's newest committed version."""
        return self.versions[-1]


@dataclass(frozen=True)
class Fork:
    """Where a branch started: a version of its source branch (``""``: the trunk)."""

    source: str
    version: int

    def describe(self) -> str:
        """``version 12 of the trunk`` / ``version 12 of branch v9-...``."""
        of = f"branch {self.source}" if self.source else "the trunk"
        return f"version {self.version} of {of}"


@dataclass(frozen=True)
class StoreRef:
    """One partition store found under a state root.

    Attributes:
        prefix: the path from the scanned root to the store's root ('' or a query id).
        operator: the operator (store) name, as :meth:`PartitionStore.open` takes it.
        partition: partition id.
        versions: committed versions found on :attr:`branch`, ascending.
        layout: the directory of its layout generation (``""``: generation 0).
        since: the first version its generation holds (-1: every version).
        branch: the branch ``versions`` are of and readers read (``""``: the trunk).
        branches: every branch of the store with its versions, by name (whatever ``branch``
            is).
    """

    prefix: str
    operator: str
    partition: int
    versions: tuple[int, ...]
    layout: str = ""
    since: int = -1
    branch: str = ""
    branches: tuple[BranchRef, ...] = ()

    @property
    def latest(self) -> int:
        """The newest committed version."""
        return self.versions[-1]

    def root(self, fileio: FileIO) -> FileIO:
        """A FileIO rooted where :meth:`PartitionStore.open` finds this store."""
        return fileio.child(self.prefix) if self.prefix else fileio

    @property
    def store_dir(self) -> str:
        """Directory of the store relative to its root."""
        return store_dir_for(self.operator, self.partition, self.layout)

    @property
    def branch_names(self) -> tuple[str, ...]:
        """The names of the store's branches, sorted."""
        return tuple(b.name for b in self.branches)

    def on(self, branch: str) -> StoreRef | None:
        """The store as found (seen on its trunk) seen on ``branch`` instead: its versions
        those of the branch; None if the branch has no version in this store. ``""`` (the
        trunk) returns the store itself."""
        assert not self.branch, "a store is seen on a branch from its trunk's view"
        if not branch:
            return self
        found = next((b for b in self.branches if b.name == branch), None)
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
) -> list[StoreRef]:
    """Every partition store under ``uri`` with at least one committed version, of the layout
    generation in force at ``version`` for a rescaled operator (see the module docstring).

    Args:
        uri: a state root (local path or object store URI), a location or a FileIO.
        prefix: only stores under this prefix (a tiered query's id).
        operator: only this operator.
        partition: only this partition.
        version: pick each operator's generation in force at this version (None: the newest).

    Returns:
        Stores sorted by (prefix, operator, partition).
    """
    fileio = as_fileio(uri)
    found, branched, rescaled = _scan(fileio)
    chosen: dict[tuple[str, str], Layout] = {}
    out: list[StoreRef] = []
    for (pre, op_dir, layout, part), versions in found.items():
        if (prefix is not None and pre != prefix) or (partition is not None and part != partition):
            continue
        versions.sort()
        root = fileio.child(pre) if pre else fileio
        name = op_dir
        if _HASHED.search(op_dir):  # maybe a name store_dir_for made path-safe: ask the store
            name = read_manifest(
                root, f"{op_dir}/{layout + '/' if layout else ''}{part}", versions[-1]
            ).operator
        if operator is not None and name != operator:
            continue
        since = -1
        if (pre, op_dir) in rescaled or layout:
            gen = chosen.get((pre, op_dir))
            if gen is None:
                gen = chosen[(pre, op_dir)] = in_force(read_layouts(root, name), version)
            if gen.dir != layout:
                continue  # another generation, or a rescale that never published
            since = gen.since
        held = branched.get((pre, op_dir, layout, part), {})
        forks = tuple(BranchRef(b, tuple(sorted(vs))) for b, vs in sorted(held.items()))
        out.append(StoreRef(pre, name, part, tuple(versions), layout, since, branches=forks))
    return sorted(out, key=lambda s: (s.prefix, s.operator, s.partition))


_Key = tuple[str, str, str, int]  # (prefix, operator dir, layout dir, partition)


def _scan(
    fileio: FileIO,
) -> tuple[dict[_Key, list[int]], dict[_Key, dict[str, list[int]]], set[tuple[str, str]]]:
    """One recursive listing: each store's trunk versions, its branches' versions, and the
    (prefix, operator dir)s with layout records (see the module docstring's invariants)."""
    found: dict[_Key, list[int]] = {}
    branched: dict[_Key, dict[str, list[int]]] = {}
    rescaled: set[tuple[str, str]] = set()
    for entry in fileio.list("", recursive=True):
        m = _MANIFEST.match(entry.path)
        if m:
            key = (m.group(1) or "", m.group(2), m.group(3) or "", int(m.group(4)))
            found.setdefault(key, []).append(int(m.group(5)))
            continue
        b = _BRANCH.match(entry.path)
        if b:
            key = (b.group(1) or "", b.group(2), b.group(3) or "", int(b.group(4)))
            branched.setdefault(key, {}).setdefault(b.group(5), []).append(int(b.group(6)))
            continue
        r = _RECORD.match(entry.path)
        if r:
            rescaled.add((r.group(1) or "", r.group(2)))
    return found, branched, rescaled


def read_store_manifest(fileio: FileIO, store: StoreRef, version: int | None = None) -> Manifest:
    """The manifest of a version of ``store`` (default its newest).

    Raises:
        VersionNotFoundError: the version has no manifest (never committed, or not retained).
        ManifestCorruptError: it is damaged.
    """
    v = store.latest if version is None else version
    return read_manifest(store.root(fileio), store.store_dir, v, store.branch)


def read_fork(fileio: FileIO, store: StoreRef, branch: str) -> Fork | None:
    """Where ``branch`` of ``store`` started, from its oldest retained manifest (one read);
    None once retention dropped the branch's first version (only that one records it), or if
    the store has no such branch.

    Raises:
        ManifestCorruptError: that manifest is damaged.
    """
    found = next((b for b in store.branches if b.name == branch), None)
    if found is None:
        return None
    try:
        first = read_manifest(store.root(fileio), store.store_dir, found.versions[0], branch)
    except VersionNotFoundError:
        return None  # dropped by the branch's retention since the listing
    origin = first.meta.get(FORKED_META)
    if not isinstance(origin, dict) or "version" not in origin:
        return None
    return Fork(str(origin.get("branch") or ""), int(origin["version"]))


def on_branch(stores: list[StoreRef], branch: str) -> list[StoreRef]:
    """``stores`` seen on ``branch`` (``""``: as they are), leaving out those without it."""
    views = [s.on(branch) for s in stores]
    return [v for v in views if v is not None]


def branch_names(stores: list[StoreRef]) -> list[str]:
    """Every branch any of ``stores`` has, sorted."""
    return sorted({b for s in stores for b in s.branch_names})


def prefixes(stores: list[StoreRef]) -> list[str]:
    """The distinct prefixes (query ids) of ``stores``, sorted."""
    return sorted({s.prefix for s in stores})
