"""Verifying stored state: every file a retained version references is present and intact,
and the partitions of each operator agree on their latest version.

For each store and each retained version (or only the newest) of its trunk and of every
branch (:mod:`fsstate.store.lineage`: a lineage that forked; damage on a branch is damage),
the manifest is read and checked (its SHA-256 checksum, format version), then every file it
references (data runs and TTL index runs, each once however many versions and branches share
it) is read whole and checked against the manifest's record: size, CRC-32, that it decodes as
Parquet, and its row count (:func:`fsstate.storage.runfile.read_table_file`, the same checks a
restore makes). Skews and missing partitions are the trunk's (a branch's partitions are what
its lineage reached: ``fsstate branches`` lists them).

The partitions of one operator (one query's, one layout generation's) commit one version per
batch each, so once a query stopped they all have the same latest version. :func:`skews` finds
the operators whose partitions do not (from the listing alone, no read): the operator's latest
version is the one most of its partitions have (of several as common, the newest); a partition
with an older latest version is *behind* (its newest manifest deleted or lost, or a batch that
did not reach it), one with a newer *ahead* (a batch that reached only some partitions: a
failed or running one). Either is reported; while a query runs, a batch in flight shows as such
a skew, so verify a stopped query.

A partition with no version at all is not in the listing of stores (:func:`find_stores` lists
stores with a manifest), so :func:`missing_partitions` looks for it separately, per operator
generation the stores are of (one more listing, and one read of the operator's layout records):
a partition directory that holds data files but no manifest (every manifest deleted or lost),
and, where the generation records its partition count (every ``tiered()`` operator and every
operator of the runner), each partition below the count without a version (its directory
gone too). Generations of no store listed (a rescale that died, an older generation) are not
looked at: their directories are left to ``fsstate gc``.

Invariants:

* Read-only; a damaged file, a skew or a missing partition is reported, never repaired or
  deleted.
* Every problem names the file (its full location) and the versions that need it, with
  their branches; every skew
  the operator, its latest version, and each partition behind or ahead with its own latest;
  every missing partition its directory.
* Memory: one file at a time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fsstate.errors import ConfigError, CorruptFileError, VersionNotFoundError
from fsstate.format.refs import FileRef
from fsstate.inspect.catalog import StoreRef, current_lineage
from fsstate.inspect.completeness import Gap, Seen, check_operator
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import Manifest, read_manifest
from fsstate.storage.naming import origin_of
from fsstate.storage.runfile import read_table_file
from fsstate.store.identity import WRITER_META, operator_dir, store_dir_for
from fsstate.store.layout import read_layouts
from fsstate.store.lineage import FORKED_PATH, fork_source
from fsstate.store.record import Writer

# a data file of a store: <prefix>/<operator dir>/[<layout>/]<partition>/data/<file>
_DATA = re.compile(r"^(?:(.*)/)?([^/@]+)/(?:(@[^/]+)/)?(\d+)/data/[^/]+$")


@dataclass(frozen=True)
class Problem:
    """A damaged or missing file.

    Attributes:
        path: full location of the file.
        versions: the trunk versions whose manifest is damaged or references the file.
        error: what is wrong.
        branches: (branch, its versions) of each branch whose versions' manifest is damaged
            or references the file (:mod:`fsstate.store.lineage`; empty: the trunk's alone).
    """

    path: str
    versions: tuple[int, ...]
    error: str
    branches: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def needed_by(self) -> str:
        """``versions 3..5; branch v2-... versions 3..4``: which versions need the file."""
        said = [f"versions {_range(self.versions)}"] if self.versions else []
        said += [f"branch {b} versions {_range(vs)}" for b, vs in self.branches]
        return "; ".join(said)


@dataclass(frozen=True)
class Skew:
    """The partitions of one operator that disagree on their latest version.

    Attributes:
        prefix: the operator's prefix (a tiered query's id; '' for the operators' runner).
        operator: the operator (store) name.
        latest: the latest version most of its partitions have (of several, the newest).
        behind: (partition, its latest version) of each partition with an older one.
        ahead: (partition, its latest version) of each partition with a newer one.
        common: the newest version every partition has (None: none).
    """

    prefix: str
    operator: str
    latest: int
    behind: tuple[tuple[int, int], ...]
    ahead: tuple[tuple[int, int], ...]
    common: int | None

    def describe(self) -> str:
        """One line naming the operator and each partition behind or ahead."""
        where = f"operator {self.operator!r}" + (f" of query {self.prefix}" if self.prefix else "")
        parts = [f"partition {p} is behind at {v}" for p, v in self.behind]
        parts += [f"partition {p} is ahead at {v}" for p, v in self.ahead]
        return f"{where}: most partitions are at version {self.latest}; " + ", ".join(parts)

    def to_doc(self) -> dict[str, Any]:
        """The skew as a JSON document."""
        return {
            "query": self.prefix,
            "operator": self.operator,
            "latest_version": self.latest,
            "behind": dict(self.behind),
            "ahead": dict(self.ahead),
            "common_version": self.common,
        }


def skews(stores: list[StoreRef]) -> list[Skew]:
    """The operators among ``stores`` whose partitions disagree on their latest version (see
    the module docstring), in the order of ``stores``; nothing is read."""
    groups: dict[tuple[str, str], list[StoreRef]] = {}
    for store in stores:
        groups.setdefault((store.prefix, store.operator), []).append(store)
    out: list[Skew] = []
    for (prefix, operator), members in groups.items():
        latest = Counter(s.latest for s in members)
        if len(latest) == 1:
            continue
        top = max(latest.values())
        usual = max(v for v, n in latest.items() if n == top)
        behind = tuple((s.partition, s.latest) for s in members if s.latest < usual)
        ahead = tuple((s.partition, s.latest) for s in members if s.latest > usual)
        shared = set.intersection(*(set(s.versions) for s in members))
        out.append(Skew(prefix, operator, usual, behind, ahead, max(shared, default=None)))
    return out


@dataclass(frozen=True)
class MissingPartition:
    """A partition of an operator with no committed version (see :func:`missing_partitions`).

    Attributes:
        prefix: the operator's prefix (a tiered query's id; '' for the operators' runner).
        operator: the operator (store) name.
        partition: the partition.
        path: full location of its store directory.
        files: data files the directory holds (0: none, or no directory).
        partitions: the operator's recorded partition count (None: not recorded).
    """

    prefix: str
    operator: str
    partition: int
    path: str
    files: int
    partitions: int | None

    def describe(self) -> str:
        """One line naming the partition, its directory and what it holds."""
        where = f"operator {self.operator!r}" + (f" of query {self.prefix}" if self.prefix else "")
        held = (
            f"holds {self.files} data file(s) but no manifest (its versions were deleted or lost)"
            if self.files
            else "does not exist"
        )
        count = f" of {self.partitions}" if self.partitions is not None else ""
        return f"{where}: partition {self.partition}{count} has no version; {self.path} {held}"

    def to_doc(self) -> dict[str, Any]:
        """The missing partition as a JSON document."""
        return {
            "query": self.prefix,
            "operator": self.operator,
            "partition": self.partition,
            "path": self.path,
            "data_files": self.files,
            "partitions": self.partitions,
        }


def missing_partitions(fileio: FileIO, stores: list[StoreRef]) -> list[MissingPartition]:
    """The partitions without any version of the operators (and layout generations) of
    ``stores``, found under ``fileio`` (see the module docstring), in the order of ``stores``.

    Costs one recursive listing of ``fileio`` and one :func:`read_layouts` per operator.
    """
    groups: dict[tuple[str, str, str], list[StoreRef]] = {}
    for store in stores:
        groups.setdefault((store.prefix, operator_dir(store.operator), store.layout), []).append(
            store
        )
    bare: dict[tuple[str, str, str], Counter[int]] = {}
    for entry in fileio.list("", recursive=True):
        m = _DATA.match(entry.path)
        if m:
            key = (m.group(1) or "", m.group(2), m.group(3) or "")
            if key in groups:
                bare.setdefault(key, Counter())[int(m.group(4))] += 1
    out: list[MissingPartition] = []
    for key, members in groups.items():
        first = members[0]
        root = first.root(fileio)
        try:
            layouts = read_layouts(root, first.operator)
        except ConfigError:  # reported by the completeness check; the rest is checked
            layouts = []
        count = next((g.partitions for g in layouts if g.dir == first.layout), None)
        have = {s.partition for s in members}
        files = bare.get(key, Counter())
        lacking = {p for p in files if p not in have}
        lacking |= {p for p in range(count or 0) if p not in have}
        for p in sorted(lacking):
            path = root.describe(store_dir_for(first.operator, p, first.layout))
            out.append(MissingPartition(first.prefix, first.operator, p, path, files[p], count))
    return out


def latest_text(latest: int, behind: dict[int, int], ahead: dict[int, int]) -> str:
    """An operator's latest version with the partitions off it (``3 (p5 behind at 2)``)."""
    off = [f"p{p} behind at {v}" for p, v in behind.items()]
    off += [f"p{p} ahead at {v}" for p, v in ahead.items()]
    return str(latest) + (f" ({', '.join(off)})" if off else "")


def mixed_versions(operator: str, stores: list[StoreRef], version: int | None) -> str | None:
    """Why reading the partitions ``stores`` of ``operator`` would mix versions, in one line
    naming the partitions and the version to pass (None: it would not): without ``version``
    (each partition's newest) if they disagree on their latest, else if one lacks ``version``."""
    if version is None:
        for skew in skews(stores):
            return (
                f"the partitions of {skew.describe()}: their newest versions would mix, nothing "
                f"was read. {_pass_common(skew.common)}, or see fsstate verify"
            )
        return None
    lacking = [s for s in stores if version not in s.versions]
    if not lacking:
        return None
    have = "; ".join(f"partition {s.partition} has {_span(s.versions)}" for s in lacking)
    shared = set.intersection(*(set(s.versions) for s in stores))
    return (
        f"version {version} of operator {operator!r} is missing in {len(lacking)} of "
        f"{len(stores)} partitions ({have}); nothing was read. "
        f"{_pass_common(max(shared, default=None))}, or pick partitions with --partition"
    )


def _pass_common(common: int | None) -> str:
    if common is None:
        return "No version is retained by every partition"
    return f"Pass --version {common} (the newest version every partition has)"


def _span(versions: tuple[int, ...]) -> str:
    return (
        f"versions {versions[0]}..{versions[-1]}" if len(versions) > 1 else f"version {versions[0]}"
    )


def _range(versions: tuple[int, ...]) -> str:
    return f"{versions[0]}..{versions[-1]}" if len(versions) > 1 else str(versions[0])


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_stores`.

    Attributes:
        stores: stores checked.
        versions: manifests checked.
        files: data and index files checked.
        bytes: their total size.
        problems: what is wrong (empty when everything is intact).
        skews: operators whose partitions disagree on their latest version (:func:`skews`).
        missing: partitions with no version at all (:func:`missing_partitions`).
    """

    stores: int = 0
    versions: int = 0
    files: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    skews: list[Skew] = field(default_factory=list)
    missing: list[MissingPartition] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every file is intact, every operator's partitions agree, and nothing the
        state needs is gone."""
        return not self.problems and not self.skews and not self.missing and not self.gaps

    def to_doc(self) -> dict[str, Any]:
        """The report as a JSON document."""
        return {
            "ok": self.ok,
            "stores": self.stores,
            "versions": self.versions,
            "files": self.files,
            "bytes": self.bytes,
            "problems": [
                {
                    "path": p.path,
                    "versions": list(p.versions),
                    "branches": {b: list(vs) for b, vs in p.branches},
                    "error": p.error,
                }
                for p in self.problems
            ],
            "skews": [k.to_doc() for k in self.skews],
            "missing_partitions": [m.to_doc() for m in self.missing],
            "gaps": [g.to_doc() for g in self.gaps],
        }

    def lines(self) -> list[str]:
        """One line per thing wrong: ``DAMAGED`` files, ``SKEWED`` operators, ``MISSING``
        partitions."""
        out = [f"DAMAGED {p.path} ({p.needed_by()}): {p.error}" for p in self.problems]
        out += [f"SKEWED {k.describe()}" for k in self.skews]
        out += [f"MISSING {m.describe()}" for m in self.missing]
        out += [f"INCOMPLETE {g.describe()}" for g in self.gaps]
        return out

    @property
    def verdict(self) -> str:
        """The outcome in a few words (``all intact``, or what was found)."""
        if self.ok:
            return "all intact"
        said = [f"{len(self.problems)} damaged or missing"] if self.problems else []
        if self.skews:
            said.append(f"{len(self.skews)} operator(s) with partitions at different versions")
        if self.missing:
            said.append(f"{len(self.missing)} partition(s) with no version")
        if self.gaps:
            said.append(f"{len(self.gaps)} thing(s) the state needs gone")
        return ", ".join(said)


_Users = list[tuple[str, int]]  # (branch, version) of each manifest that needs a file


def _problem(path: str, users: _Users, error: str) -> Problem:
    by: dict[str, list[int]] = {}
    for branch, v in users:
        by.setdefault(branch, []).append(v)
    trunk = tuple(sorted(by.pop("", [])))
    on = tuple((b, tuple(sorted(vs))) for b, vs in sorted(by.items()))
    return Problem(path, trunk, error, on)


def plan_files(
    fileio: FileIO,
    views: list[tuple[StoreRef, list[int]]],
    report: VerifyReport,
    seen: dict[tuple[str, int, str, int], Seen] | None = None,
) -> dict[str, tuple[FileRef, _Users]]:
    """The files the given versions of one store's lineages reference (``views``: the store
    seen on each, :meth:`StoreRef.on`, with the versions to check), each once: path ->
    (record, the (lineage, version)s that need it). Damaged manifests go to ``report``;
    versions deleted since the listing are skipped; what each manifest read says of its
    lineage goes to ``seen``."""
    refs: dict[str, FileRef] = {}
    users: dict[str, _Users] = {}
    for view, versions in views:
        for v in versions:
            try:
                manifest = read_manifest(view.root(fileio), view.store_dir, v, view.branch)
            except VersionNotFoundError:
                continue  # retention deleted it since the listing: not damage
            except CorruptFileError as exc:
                report.versions += 1
                report.problems.append(_problem(exc.path, [(view.branch, v)], str(exc)))
                continue
            report.versions += 1
            if seen is not None:
                seen[(view.layout, view.partition, view.branch, v)] = _seen(manifest)
            for entry in manifest.tables.values():
                for ref in [*entry.runs, *entry.ttl_runs]:
                    refs.setdefault(ref.path, ref)
                    users.setdefault(ref.path, []).append((view.branch, v))
    return {p: (refs[p], users[p]) for p in sorted(refs)}


def _seen(manifest: Manifest) -> Seen:
    writer = Writer.from_meta(manifest.meta.get(WRITER_META))
    return Seen(
        manifest.parent_version,
        fork_source(manifest),
        None if writer is None else writer.planned_ms,
        any(origin_of(f) is not None for f in manifest.files()),
    )


def _views(store: StoreRef, latest_only: bool) -> list[tuple[StoreRef, list[int]]]:
    """The store on each of its lineages, with the versions to check."""
    seen = [v for b in store.lineages if (v := store.on(b.name)) is not None]
    return [(v, [v.latest] if latest_only else list(v.versions)) for v in seen]


def current_views(stores: list[StoreRef]) -> list[StoreRef]:
    """Of ``stores`` (every generation, :func:`fsstate.inspect.catalog.all_stores`), each
    operator's newest generation seen on its current lineage (what readers read)."""
    groups: dict[tuple[str, str], list[StoreRef]] = {}
    for s in stores:
        groups.setdefault((s.prefix, s.operator), []).append(s)
    out: list[StoreRef] = []
    for members in groups.values():
        newest = max({s.layout for s in members}, key=lambda d: (d != "", d))
        gen = [s for s in members if s.layout == newest]
        line = current_lineage(gen)
        out += [v for s in gen if (v := s.on(line)) is not None]
    return out


def verify_stores(
    fileio: FileIO,
    stores: list[StoreRef],
    *,
    latest_only: bool = False,
    on_file: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Check every file the retained versions of ``stores`` reference, on every lineage; that
    each operator's partitions agree on their latest version on its current lineage; that
    none has no version at all; and that nothing the state needs is gone
    (:mod:`fsstate.inspect.completeness`).

    Args:
        fileio: the root the stores were found under.
        stores: from :func:`fsstate.inspect.catalog.all_stores` (every generation; stores
            found by :func:`fsstate.inspect.catalog.find_stores` check their generation only).
        latest_only: check only the newest version of each store's lineages.
        on_file: called with a file's size after each file is checked (progress).
        on_plan: called once with the number of files to check, before checking them.
    """
    current = current_views(stores)
    report = VerifyReport(skews=skews(current), missing=missing_partitions(fileio, current))
    seen: dict[tuple[str, str], dict[tuple[str, int, str, int], Seen]] = {}
    plans: list[tuple[StoreRef, dict[str, tuple[FileRef, _Users]]]] = []
    for store in stores:
        report.stores += 1
        mine = seen.setdefault((store.prefix, store.operator), {})
        plans.append((store, plan_files(fileio, _views(store, latest_only), report, mine)))
    report.gaps = _gaps(fileio, stores, seen)
    if on_plan is not None:
        on_plan(sum(len(p) for _, p in plans))
    for store, files in plans:
        root = store.root(fileio)
        for _path, (ref, users) in files.items():
            report.files += 1
            report.bytes += ref.size_bytes
            try:
                read_table_file(root, store.store_dir, ref)
            except CorruptFileError as exc:
                report.problems.append(_problem(exc.path, users, str(exc)))
            if on_file is not None:
                on_file(ref.size_bytes)
    return report


def _gaps(
    fileio: FileIO,
    stores: list[StoreRef],
    seen: dict[tuple[str, str], dict[tuple[str, int, str, int], Seen]],
) -> list[Gap]:
    """Every operator's gaps (:func:`fsstate.inspect.completeness.check_operator`)."""
    groups: dict[tuple[str, str], list[StoreRef]] = {}
    for s in stores:
        groups.setdefault((s.prefix, s.operator), []).append(s)
    flagged = {
        e.path.rsplit("/", 1)[0]
        for e in fileio.list("", recursive=True)
        if e.path.endswith("/" + FORKED_PATH)
    }
    out: list[Gap] = []
    for (prefix, operator), members in groups.items():
        forked = {
            (s.layout, s.partition)
            for s in members
            if (f"{prefix}/" if prefix else "") + s.store_dir in flagged
        }
        out += check_operator(fileio, members, seen.get((prefix, operator), {}), forked)
    return out
