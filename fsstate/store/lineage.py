"""Lineages of a partition store: its histories, who writes each, how they fork, which live.

A *lineage* is one history of versions of a store (one operator, partition and layout
generation): the *trunk* (``""``) or a named *branch*. A branch starts with a *fork*: a manifest
naming the same immutable files as one version (its *fork point*) of another lineage (its
*source*), made in O(metadata). In the store directory::

    manifests/<v>.json                   the trunk's versions
    branches/<lineage>/<v>.json          a branch's versions
    forks/<source>/<v>~<lineage>.json    one fork mark per fork ("_": the trunk as source)
    forked.json                          present once any fork was made (older readers use it)
    data/...                             every lineage's files; a file's name says which
                                         lineage wrote it, from which version on, under which
                                         lease (:mod:`fsstate.storage.naming`)

Every version names its lineage (``Manifest.lineage``) and its parent: the version it was
committed on in its lineage (``parent_version`` / ``parent_checksum``), or for a branch's first
version the fork point (``meta["forked_from"]``: source lineage, version, checksum).

The rules; every module that writes, keeps, reads or deletes versions asks this one:

1. **One writer per lineage.** A ``tiered()`` query run writes only lineages it made: at the
   first batch ``b`` of a run that did not commit ``b - 1`` itself, every task forks version
   ``b - 1`` of the lineage its checkpoint records into :func:`lineage_for` ``(b - 1, planned,
   run)``, the same name for every task, retry and partition of that run
   (:mod:`fsstate_spark.tiered.lifecycle`); batch 0 starts that lineage empty. So no version of
   a lineage is ever committed by two query runs, and one batch's versions in every partition
   belong to one lineage: a copy, a roll-back and a restart each go on on a lineage of their
   own. The engine API, the tools and the flow driver write the trunk (the flow driver keeps
   one checkpoint per state directory: :mod:`fsstate_spark.operators.lineage`); an epoch that
   meets its version committed by another planning forks to :func:`branch_for`
   (:mod:`fsstate.store.epoch`).
2. **Fork handshake.** A fork writes its fork mark *before* it reads the source version, and
   whoever deletes a version deletes its manifest *before* it lists the fork marks. So either
   the fork cannot read the version (:class:`fsstate.errors.VersionNotFoundError`, nothing
   made), or the deleter sees the mark and keeps the version's files: a fork of a version being
   dropped is refused, never half-made.
3. **Own files only, per commit.** A lineage's per-commit retention deletes only files its own
   lineage wrote, born after every fork of it that could name them
   (:mod:`fsstate.store.retention`); a file another lineage wrote or may name goes by the
   collection across lineages (:mod:`fsstate.store.gc`).
4. **Live heads.** A lineage whose newest version is a fork point of another (a restart went on
   from it), or whose versions after a fork point are a re-run of the same planning by the
   lineage that forked there (a crashed run's leftover, once it is older than the caller's
   ``abandoned_ms``), is *continued*; every other lineage is a *live head* (:func:`live_heads`).
   What a store retains is, for each live head, its newest ``retain`` versions along its
   history, into its sources (:func:`history`); everything else may be collected.

Invariants:

* Forking is idempotent: forking the same source version into the same lineage again returns
  the lineage's manifest of it (also once the lineage went on); a lineage that starts elsewhere
  raises :class:`fsstate.errors.CommitConflictError`.
* A lineage name is path-safe (:func:`check_branch`) and never holds ``~``; :func:`lineage_for`
  and :func:`branch_for` are pure functions of their arguments.
* :func:`drop_branch` deletes a lineage's manifests only, never a file and never the trunk's.
* A store carries a version's meta without its writer and fork record (:func:`carried`).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fsstate.errors import CommitConflictError, ConfigError, VersionNotFoundError
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import (
    BRANCH_DIR,
    Manifest,
    list_versions,
    manifest_path,
    publish_manifest,
    read_manifest,
)
from fsstate.storage.naming import TRUNK_TAG
from fsstate.store.identity import WRITER_META

__all__ = [
    "FORKED_META",
    "FORKED_PATH",
    "FORKS_DIR",
    "ForkMark",
    "Graph",
    "branch_for",
    "carried",
    "carried_meta",
    "check_branch",
    "drop_branch",
    "fork_marks",
    "fork_source",
    "fork_version",
    "has_forks",
    "history",
    "lineage_for",
    "list_branches",
    "live_heads",
    "mark_fork",
    "mark_forked",
    "read_version",
]

FORKED_PATH = "forked.json"  # relative to the store directory: present once a fork was made
FORKED_META = "forked_from"  # meta key of a branch's first manifest: its source
FORKS_DIR = "forks"  # <store_dir>/forks/<source>/<version:020d>~<lineage>.json
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_branch(branch: str) -> str:
    """``branch`` if it is a valid lineage name (``""``: the trunk).

    Raises:
        ConfigError: the name is not 1-64 characters of ``[A-Za-z0-9._-]`` starting with a
            letter or digit.
    """
    if branch and (not isinstance(branch, str) or not _BRANCH.match(branch)):
        raise ConfigError(
            f"branch {branch!r}: a branch name is 1-64 characters of letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return branch


def lineage_for(version: int, planned_ms: int | None, run: str | None) -> str:
    """The lineage a query run writes when its first batch starts from ``version`` (-1: from
    nothing): a pure function of its arguments (rule 1 of the module docstring)."""
    key = f"{version}\0{planned_ms}\0{run}".encode()
    return f"r{max(version, -1) + 1}-{hashlib.sha1(key).hexdigest()[:12]}"


def branch_for(source: str, version: int, planned_ms: int) -> str:
    """The branch an epoch goes on when it meets version ``version + 1`` of ``source``
    published by another planning: a pure function of its arguments."""
    digest = hashlib.sha1(f"{source}\0{version}\0{planned_ms}".encode()).hexdigest()[:12]
    return f"v{version}-{digest}"


def has_forks(fileio: FileIO, store_dir: str) -> bool:
    """Whether any fork of the store's state was made (one HEAD)."""
    return fileio.exists(f"{store_dir}/{FORKED_PATH}")


def list_branches(fileio: FileIO, store_dir: str) -> list[str]:
    """The store's branches that hold manifests, sorted (one recursive listing)."""
    prefix = f"{store_dir}/{BRANCH_DIR}/"
    out: set[str] = set()
    for entry in fileio.list(f"{store_dir}/{BRANCH_DIR}", recursive=True):
        rel = entry.path[len(prefix) :] if entry.path.startswith(prefix) else entry.path
        parts = rel.split("/")
        if len(parts) == 2 and parts[1].endswith(".json"):
            out.add(parts[0])
    return sorted(out)


@dataclass(frozen=True)
class ForkMark:
    """A fork: ``lineage`` started at version ``version`` of ``source``."""

    source: str
    version: int
    lineage: str


def _marks_dir(store_dir: str, source: str) -> str:
    return f"{store_dir}/{FORKS_DIR}/{source or TRUNK_TAG}"


def _mark_path(store_dir: str, mark: ForkMark) -> str:
    return f"{_marks_dir(store_dir, mark.source)}/{mark.version:020d}~{mark.lineage}.json"


def mark_forked(fileio: FileIO, store_dir: str) -> None:
    """Write the store's ``forked.json``: its directory holds a branch (idempotent)."""
    flag = json.dumps({"format": "fsstate.store.lineage", "format_version": 1}).encode()
    fileio.publish_if_absent(f"{store_dir}/{FORKED_PATH}", flag)


def mark_fork(fileio: FileIO, store_dir: str, mark: ForkMark) -> None:
    """Write ``mark`` (idempotent) and the store's ``forked.json`` (rule 2: before the source
    version is read)."""
    mark_forked(fileio, store_dir)
    path = _mark_path(store_dir, mark)
    doc = {"source": mark.source, "version": mark.version, "lineage": mark.lineage}
    fileio.publish_if_absent(path, json.dumps(doc, sort_keys=True).encode())


def fork_marks(fileio: FileIO, store_dir: str, source: str | None = None) -> list[ForkMark]:
    """The forks of ``source`` (None: of every lineage) marked in the store, from the listing
    alone (one LIST)."""
    base = f"{store_dir}/{FORKS_DIR}"
    where = base if source is None else _marks_dir(store_dir, source)
    out = []
    for entry in fileio.list(where, recursive=source is None):
        rel = entry.path[len(base) + 1 :] if entry.path.startswith(base + "/") else entry.path
        parts = rel.split("/")
        if len(parts) != 2 or not parts[1].endswith(".json"):
            continue
        version, sep, child = parts[1][: -len(".json")].partition("~")
        if not sep or not version.isdigit() or not child:
            continue
        src = "" if parts[0] == TRUNK_TAG else parts[0]
        out.append(ForkMark(src, int(version), child))
    return sorted(out, key=lambda m: (m.source, m.version, m.lineage))


def drop_branch(fileio: FileIO, store_dir: str, branch: str) -> int:
    """Delete every manifest of ``branch`` (one listing, one bulk delete) and its fork mark;
    returns how many manifests there were (0: the store has no such branch).

    Raises:
        ConfigError: ``branch`` is the trunk (``""``) or not a valid branch name.
    """
    if not check_branch(branch):
        raise ConfigError(
            f"store {fileio.describe(store_dir)}: the trunk is no branch and is never dropped"
        )
    versions = list_versions(fileio, store_dir, branch)
    fileio.delete_many([manifest_path(store_dir, v, branch) for v in reversed(versions)])
    marks = [m for m in fork_marks(fileio, store_dir) if m.lineage == branch]
    fileio.delete_many([_mark_path(store_dir, m) for m in marks])  # its source may drop again
    return len(versions)


def fork_version(
    fileio: FileIO, store_dir: str, version: int, *, source: str = "", branch: str
) -> Manifest:
    """Start ``branch`` at ``version`` of ``source`` (see the module docstring).

    Returns:
        The branch's manifest of ``version``.

    Raises:
        VersionNotFoundError: the source version does not exist (or was dropped while forking:
            nothing usable was made).
        CommitConflictError: the branch already starts from another version or source.
        ConfigError: a branch name is invalid, or ``branch`` is ``source``.
    """
    check_branch(source)
    if not check_branch(branch) or branch == source:
        raise ConfigError(f"fork of {fileio.describe(store_dir)}: give a new branch name")
    have = list_versions(fileio, store_dir, branch)
    if have and have[0] != version:
        raise CommitConflictError(
            f"branch {branch!r} of store {fileio.describe(store_dir)} already starts elsewhere "
            f"(it holds versions {have[0]}..{have[-1]}), not at version {version} of "
            f"{source or 'the trunk'}; fork into another branch"
        )
    mark_fork(fileio, store_dir, ForkMark(source, version, branch))  # before reading: rule 2
    src = read_manifest(fileio, store_dir, version, source)
    origin: dict[str, Any] = {"branch": source, "version": version, "checksum": src.checksum}
    fork = dataclasses.replace(
        src,
        parent_version=None,
        parent_checksum=None,
        chain_from=version,
        retired=[],
        meta={**src.meta, FORKED_META: origin},
        created_ms=0,
        lineage=branch,
        checksum="",
    )
    published = publish_manifest(fileio, store_dir, fork, branch)
    if published is not fork and published.meta.get(FORKED_META) != origin:
        raise CommitConflictError(
            f"branch {branch!r} of store {fileio.describe(store_dir)} already starts at "
            f"{published.meta.get(FORKED_META)!r}, not at version {version} of "
            f"{source or 'the trunk'}; fork into another branch"
        )
    return published


def read_version(fileio: FileIO, store_dir: str, version: int, lineage: str = "") -> Manifest:
    """The manifest of ``version`` of ``lineage``'s history: its own, or below its fork point
    its source's (following the forks: one LIST of the fork marks, or one read of the
    branch's first manifest where it has no mark, per fork crossed).

    Raises:
        VersionNotFoundError: the history holds no such version (any more).
        ManifestCorruptError: a manifest read is damaged.
    """
    seen = {lineage}
    line = lineage
    while True:
        try:
            return read_manifest(fileio, store_dir, version, line)
        except VersionNotFoundError:
            fork = _fork_of(fileio, store_dir, line) if line else None
            if fork is None or version >= fork.version or fork.source in seen:
                raise
            line = fork.source
            seen.add(line)


def _fork_of(fileio: FileIO, store_dir: str, lineage: str) -> ForkMark | None:
    """Where ``lineage`` forked: its mark, else its oldest manifest's record (None: unknown)."""
    mark = next((m for m in fork_marks(fileio, store_dir) if m.lineage == lineage), None)
    if mark is not None:
        return mark
    versions = list_versions(fileio, store_dir, lineage)
    if not versions:
        return None
    try:
        return fork_source(read_manifest(fileio, store_dir, versions[0], lineage))
    except VersionNotFoundError:
        return None


def fork_source(manifest: Manifest) -> ForkMark | None:
    """The fork a branch's first manifest records (None: not a fork manifest)."""
    origin = manifest.meta.get(FORKED_META)
    if not isinstance(origin, dict) or not isinstance(origin.get("version"), int):
        return None
    lineage = manifest.lineage if manifest.lineage is not None else ""
    return ForkMark(str(origin.get("branch") or ""), int(origin["version"]), lineage)


def carried(manifest: Manifest | None) -> dict[str, Any]:
    """The meta a store at ``manifest`` starts from: the version's, without its writer (a
    writer is each commit's own: a commit nobody recorded a writer for records none)."""
    if manifest is None:
        return {}
    return {k: v for k, v in manifest.meta.items() if k not in (WRITER_META, FORKED_META)}


def carried_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """A store's meta as compared with :func:`carried` (no writer, no fork record)."""
    return {k: v for k, v in meta.items() if k not in (WRITER_META, FORKED_META)}


# -- which lineages live -------------------------------------------------------------------


@dataclass(frozen=True)
class Graph:
    """The lineages of one store as listed: each one's versions and where each branch forked.

    Attributes:
        versions: lineage -> its versions, ascending (lineages without a version left out).
        forks: branch -> its fork (source and fork point); a branch whose fork is not known
            (its mark and first manifest gone) has none and is a root.
    """

    versions: Mapping[str, tuple[int, ...]]
    forks: Mapping[str, ForkMark]

    @classmethod
    def of(cls, versions: Mapping[str, Iterable[int]], marks: Iterable[ForkMark]) -> Graph:
        """The graph of listed ``versions`` (by lineage) and fork ``marks``."""
        vs = {n: tuple(sorted(v)) for n, v in versions.items() if v}
        forks = {m.lineage: m for m in marks if m.lineage in vs and m.lineage != m.source}
        return cls(vs, forks)

    def head(self, lineage: str) -> int:
        """The newest version of ``lineage``."""
        return self.versions[lineage][-1]

    def children(self, lineage: str) -> list[ForkMark]:
        """The forks of ``lineage`` that hold versions."""
        return [m for m in self.forks.values() if m.source == lineage]


Planning = Callable[[str, int], int | None]  # (lineage, version) -> its planned_ms, if known


def _continued(graph: Graph, lineage: str, planning: Planning | None) -> bool:
    """Whether ``lineage`` is continued (rule 4 of the module docstring)."""
    head = graph.head(lineage)
    for child in graph.children(lineage):
        if child.version == head:
            return True  # a restart (or a copy) went on from its newest version
        if planning is not None and child.version == head - 1:
            mine = planning(lineage, head)
            theirs = planning(child.lineage, head)
            if mine is not None and mine == theirs:
                return True  # its last batch was run again, same planning, by the child
    return False


def live_heads(graph: Graph, planning: Planning | None = None) -> list[str]:
    """The lineages of ``graph`` nobody continues, sorted (rule 4 of the module docstring;
    ``planning`` tells a crashed run's leftover, None: only forks of a head continue it)."""
    return sorted(n for n in graph.versions if not _continued(graph, n, planning))


def history(graph: Graph, lineage: str, newest: int, count: int) -> list[tuple[str, int]]:
    """The ``count`` versions ``newest``, ``newest - 1``, ... of ``lineage``'s history as
    (lineage, version) where each is stored, newest first: below a branch's fork point, in
    its source (the fork point itself in the branch, which names the same files). Versions
    missing on storage are left out; the cost is that of the versions found, whatever
    ``count``."""
    out: list[tuple[str, int]] = []
    line, seen = lineage, {lineage}
    hi, lo = newest, newest - count + 1
    while hi >= lo:
        fork = graph.forks.get(line)
        going = fork is not None and fork.source not in seen
        floor = fork.version if going and fork is not None else lo
        versions = graph.versions.get(line, ())
        start = bisect.bisect_left(versions, max(lo, floor))
        stop = bisect.bisect_right(versions, hi)
        out += [(line, v) for v in reversed(versions[start:stop])]
        if not going or fork is None or floor <= lo:
            break
        hi, line = floor - 1, fork.source
        seen.add(line)
    return out
