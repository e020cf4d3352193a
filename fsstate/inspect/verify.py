"""Verifying stored state: every file a retained version references is present and intact.

For each store and each retained version (or only the newest), the manifest is read and
checked (its SHA-256 checksum, format version), then every file it references (data runs and
TTL index runs, each once however many versions share it) is read whole and checked against
the manifest's record: size, CRC-32, that it decodes as Parquet, and its row count
(:func:`fsstate.storage.runs.read_table_file`, the same checks a restore makes).

Invariants:

* Read-only; a damaged file is reported, never repaired or deleted.
* Every problem names the file (its full location) and the versions that need it.
* Memory: one file at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fsstate.errors import CorruptFileError, VersionNotFoundError
from fsstate.format.refs import FileRef
from fsstate.inspect.catalog import StoreRef, read_store_manifest
from fsstate.storage.fileio import FileIO
from fsstate.storage.runs import read_table_file


@dataclass(frozen=True)
class Problem:
    """A damaged or missing file.

    Attributes:
        path: full location of the file.
        versions: the versions whose manifest is damaged or references the file.
        error: what is wrong.
    """

    path: str
    versions: tuple[int, ...]
    error: str


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_stores`.

    Attributes:
        stores: stores checked.
        versions: manifests checked.
        files: data and index files checked.
        bytes: their total size.
        problems: what is wrong (empty when everything is intact).
    """

    stores: int = 0
    versions: int = 0
    files: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every file is intact."""
        return not self.problems


def plan_files(
    fileio: FileIO, store: StoreRef, versions: list[int], report: VerifyReport
) -> dict[str, tuple[FileRef, list[int]]]:
    """The files ``versions`` of ``store`` reference (path -> (record, versions)); damaged
    manifests go to ``report``, versions deleted since the listing are skipped."""
    refs: dict[str, FileRef] = {}
    users: dict[str, list[int]] = {}
    for v in versions:
        try:
            manifest = read_store_manifest(fileio, store, v)
        except VersionNotFoundError:
            continue  # retention deleted it since the listing: not damage
        except CorruptFileError as exc:
            report.versions += 1
            report.problems.append(Problem(exc.path, (v,), str(exc)))
            continue
        report.versions += 1
        for entry in manifest.tables.values():
            for ref in [*entry.runs, *entry.ttl_runs]:
                refs.setdefault(ref.path, ref)
                users.setdefault(ref.path, []).append(v)
    return {p: (refs[p], users[p]) for p in sorted(refs)}


def verify_stores(
    fileio: FileIO,
    stores: list[StoreRef],
    *,
    latest_only: bool = False,
    on_file: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Check every file the retained versions of ``stores`` reference.

    Args:
        fileio: the root the stores were found under.
        stores: from :func:`fsstate.inspect.catalog.find_stores`.
        latest_only: check only each store's newest version.
        on_file: called with a file's size after each file is checked (progress).
        on_plan: called once with the number of files to check, before checking them.
    """
    report = VerifyReport()
    plans: list[tuple[StoreRef, dict[str, tuple[FileRef, list[int]]]]] = []
    for store in stores:
        report.stores += 1
        versions = [store.latest] if latest_only else list(store.versions)
        plans.append((store, plan_files(fileio, store, versions, report)))
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
                report.problems.append(Problem(exc.path, tuple(users), str(exc)))
            if on_file is not None:
                on_file(ref.size_bytes)
    return report
