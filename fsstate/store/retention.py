"""Retention: which committed versions a store keeps, and which files may be deleted.

A store keeps the versions within ``retain_versions`` of the newest one it committed (by
number, as Spark's ``minBatchesToRetain``). Two paths delete what falls out of that window:

* **Every commit, no listing** (the per-batch path): committing ``v`` drops version
  ``d = v - retain_versions``: its manifest and the files version ``d + 1`` retired (the
  files ``d`` referenced and ``d + 1`` no longer does, recorded in the manifest of ``d + 1``),
  in one bulk delete. That is only done when the versions ``d .. v`` form one chain (each
  version's parent the one before: ``Manifest.chain_from <= d``), so no retained version can
  reference a retired file. Cost: one GET of the manifest of ``d + 1`` (unless this store
  knows it) and one delete request.
* **Every ``orphan_scan_every_commits``-th version, a listing**: manifests older than the window
  that the per-commit path left (gaps in the version numbers, other histories) are deleted with
  the files no retained manifest references, then data files that no retained manifest and no
  live run reference (failed or losing attempts, unpublished compactions) once older than
  ``orphan_grace_ms``. Cost: two listings and a GET per retained manifest this store does not
  know.

Invariants:

* A file referenced by a retained manifest, or by a run the store holds, is never deleted.
* An unreferenced file younger than the grace time is never deleted: it may belong to a commit
  under way in another attempt.
* An unreadable manifest pins nothing (its version cannot be opened anyway).
* Branches (:mod:`fsstate.store.branches`) share the store's files: a store on a branch, or one
  whose directory holds a fork (``forked.json``, one HEAD when a per-commit deletion would
  delete files, remembered once seen), deletes files only by the listing scan, and the scan
  keeps every file any manifest of another branch references. Each branch drops only its own
  manifests.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from fsstate.config import StoreConfig
from fsstate.errors import FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import Manifest, list_versions, manifest_path, read_manifest
from fsstate.store.branches import has_forks, list_branches

KNOWN_MAX = 128  # manifests a store keeps for retention (the window is usually within it)


class Retention:
    """The retained versions of one store directory and their file sets."""

    def __init__(self, fileio: FileIO, store_dir: str, branch: str = "") -> None:
        self.fileio = fileio
        self.store_dir = store_dir
        self.branch = branch
        self._forked = bool(branch)  # files may be shared with another branch
        self._other_sets: dict[tuple[str, int], frozenset[str]] = {}
        self._versions: list[int] | None = None
        self._file_sets: dict[int, frozenset[str]] = {}
        self._known: dict[int, Manifest] = {}  # manifests this store read or wrote (bounded)

    def remember(self, manifest: Manifest) -> None:
        """Note a manifest this store committed, adopted or caught up to (the newest
        :data:`KNOWN_MAX` are kept: retention then reads none it has seen)."""
        self._file_sets[manifest.version] = frozenset(manifest.files())
        known = self._known
        known[manifest.version] = manifest
        while len(known) > KNOWN_MAX:
            del known[min(known)]

    def forget_listing(self) -> None:
        """The version listing is stale (other processes committed): list again when needed."""
        self._versions = None

    def files_of(self, version: int) -> frozenset[str]:
        """The files a retained version references (its manifest is read once)."""
        files = self._file_sets.get(version)
        if files is None:
            try:
                m = read_manifest(self.fileio, self.store_dir, version, self.branch)
                files = frozenset(m.files())
            except FsStateError:
                files = frozenset()  # unreadable manifests pin nothing
            self._file_sets[version] = files
        return files

    def versions(self) -> list[int]:
        """Committed versions currently kept on storage, ascending."""
        if self._versions is None:
            self._versions = list_versions(self.fileio, self.store_dir, self.branch)
        return list(self._versions)

    def listed(self) -> list[int] | None:
        """The retained versions as last listed and kept up to date, or None (not listed)."""
        return None if self._versions is None else list(self._versions)

    def forked(self) -> bool:
        """Whether files may be shared with another branch (one HEAD until seen)."""
        if not self._forked:
            self._forked = has_forks(self.fileio, self.store_dir)
        return self._forked

    def other_branches_files(self) -> set[str]:
        """Every file a manifest of another branch references (none if never forked)."""
        if not self.forked():
            return set()
        live: set[str] = set()
        seen: set[tuple[str, int]] = set()
        for branch in ["", *list_branches(self.fileio, self.store_dir)]:
            if branch == self.branch:
                continue
            for v in list_versions(self.fileio, self.store_dir, branch):
                key = (branch, v)
                seen.add(key)
                files = self._other_sets.get(key)
                if files is None:
                    try:
                        m = read_manifest(self.fileio, self.store_dir, v, branch)
                        files = frozenset(m.files())
                    except FsStateError:
                        files = frozenset()
                    self._other_sets[key] = files
                live |= files
        for key in set(self._other_sets) - seen:
            del self._other_sets[key]
        return live

    def after_commit(
        self, manifest: Manifest, live_paths: Iterable[str], config: StoreConfig
    ) -> None:
        """Delete what falls out of the retained window after ``manifest`` was committed.

        Args:
            manifest: the manifest just published by this store.
            live_paths: files the store's live runs reference (never deleted).
            config: the store's settings (retained versions, orphan scan and grace).
        """
        v = manifest.version
        dropped = v - config.retain_versions
        if self._versions is not None and v not in self._versions:
            self._versions.append(v)
            self._versions.sort()
        if dropped >= 0 and manifest.chain_from is not None and manifest.chain_from <= dropped:
            nxt = manifest if dropped + 1 == v else self._manifest_of(dropped + 1)
            doomed = [manifest_path(self.store_dir, dropped, self.branch)]
            retired = nxt.retired if nxt is not None and nxt.parent_version == dropped else []
            if retired and not self.forked():  # shared files go by the listing scan only
                doomed += [f"{self.store_dir}/{p}" for p in retired]
            self.fileio.delete_many(doomed)
            self._file_sets.pop(dropped, None)
            if self._versions is not None and dropped in self._versions:
                self._versions.remove(dropped)
        if v % config.orphan_scan_every_commits == 0:
            self.full_scan(v, live_paths, config)

    def _manifest_of(self, version: int) -> Manifest | None:
        m = self._known.get(version)
        if m is not None:
            return m
        try:
            m = read_manifest(self.fileio, self.store_dir, version, self.branch)
        except FsStateError:
            return None
        self._file_sets[version] = frozenset(m.files())
        return m

    def full_scan(self, newest: int, live_paths: Iterable[str], config: StoreConfig) -> None:
        """List the manifests: delete those older than the window with the files no retained
        manifest references; then delete orphan data files (see the module docstring)."""
        self._versions = list_versions(self.fileio, self.store_dir, self.branch)
        first_kept = newest - config.retain_versions + 1
        drop = [v for v in self._versions if v < first_kept]
        keep = [v for v in self._versions if v >= first_kept]
        if drop:
            live: set[str] = self.other_branches_files()
            for v in keep:
                live |= self.files_of(v)
            doomed: set[str] = set()
            for v in drop:
                doomed |= self.files_of(v)
            self.fileio.delete_many(
                [manifest_path(self.store_dir, v, self.branch) for v in drop]
                + [f"{self.store_dir}/{p}" for p in sorted(doomed - live)]
            )
            for v in drop:
                self._file_sets.pop(v, None)
            self._versions = keep
        self.delete_orphans(live_paths, config.orphan_grace_ms)

    def delete_orphans(self, live_paths: Iterable[str], grace_ms: int) -> int:
        """Delete data files no retained manifest or live run references (after a grace time);
        returns how many were deleted."""
        live: set[str] = set(live_paths) | self.other_branches_files()
        for v in self.versions():
            live |= self.files_of(v)
        cutoff = int(time.time() * 1000) - grace_ms
        prefix = self.store_dir + "/"
        doomed = []
        for f in self.fileio.list(f"{self.store_dir}/data"):
            rel = f.path[len(prefix) :] if f.path.startswith(prefix) else f.path
            if rel in live or (f.mtime_ms is not None and f.mtime_ms > cutoff):
                continue
            doomed.append(f.path)
        self.fileio.delete_many(doomed)
        return len(doomed)
