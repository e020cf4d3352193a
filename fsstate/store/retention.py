"""Retention: which committed versions a store keeps, and which files may be deleted.

After each commit the store keeps its newest ``retain_versions`` manifests; the files that only
dropped versions reference are deleted with them. Every ``orphan_scan_every_commits`` commits
the data directory is listed and files that no retained manifest and no live run references
(left by failed or losing attempts, or by compactions never published) are deleted once older
than ``orphan_grace_ms``.

Invariants:

* A file referenced by a retained manifest, or by a run the store holds, is never deleted.
* An unreferenced file younger than the grace time is never deleted: it may belong to a commit
  under way in another attempt.
* An unreadable manifest pins nothing (its version cannot be opened anyway).
* The file sets of manifests this store read or wrote are remembered, so a commit reads no
  manifest it already knows; the version listing is made once and then maintained.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from fsstate.config import StoreConfig
from fsstate.errors import FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import list_versions, manifest_path, read_manifest


class Retention:
    """The retained versions of one store directory and their file sets."""

    def __init__(self, fileio: FileIO, store_dir: str) -> None:
        self.fileio = fileio
        self.store_dir = store_dir
        self._versions: list[int] | None = None
        self._file_sets: dict[int, frozenset[str]] = {}

    def remember(self, version: int, files: Iterable[str]) -> None:
        """Note the files of a version this store committed or caught up to."""
        self._file_sets[version] = frozenset(files)

    def forget_listing(self) -> None:
        """The version listing is stale (other processes committed): list again when needed."""
        self._versions = None

    def files_of(self, version: int) -> frozenset[str]:
        """The files a retained version references (its manifest is read once)."""
        files = self._file_sets.get(version)
        if files is None:
            try:
                files = frozenset(read_manifest(self.fileio, self.store_dir, version).files())
            except FsStateError:
                files = frozenset()  # unreadable manifests pin nothing
            self._file_sets[version] = files
        return files

    def versions(self) -> list[int]:
        """Committed versions currently kept on storage, ascending."""
        if self._versions is None:
            self._versions = list_versions(self.fileio, self.store_dir)
        return list(self._versions)

    def after_commit(
        self, committed: int, commits: int, live_paths: Iterable[str], config: StoreConfig
    ) -> None:
        """Drop versions beyond the retained count and their files; scan for orphans every
        ``orphan_scan_every_commits`` commits.

        Args:
            committed: the version just committed.
            commits: commits of this store so far (the orphan scan's clock).
            live_paths: files the store's live runs reference (never deleted).
            config: the store's settings (retained versions, orphan scan and grace).
        """
        if self._versions is None:
            self._versions = list_versions(self.fileio, self.store_dir)
        elif committed not in self._versions:
            self._versions.append(committed)
            self._versions.sort()
        keep_n = config.retain_versions
        versions = self._versions
        if len(versions) > keep_n:
            drop, keep = versions[:-keep_n], versions[-keep_n:]
            live: set[str] = set()
            for v in keep:
                live |= self.files_of(v)
            doomed: set[str] = set()
            for v in drop:
                doomed |= self.files_of(v)
            for v in drop:
                self.fileio.delete(manifest_path(self.store_dir, v))
                self._file_sets.pop(v, None)
            for path in doomed - live:
                self.fileio.delete(f"{self.store_dir}/{path}")
            self._versions = keep
        if commits % config.orphan_scan_every_commits == 0:
            self.delete_orphans(live_paths, config.orphan_grace_ms)

    def delete_orphans(self, live_paths: Iterable[str], grace_ms: int) -> int:
        """Delete data files no retained manifest or live run references (after a grace time);
        returns how many were deleted."""
        live: set[str] = set(live_paths)
        for v in self.versions():
            live |= self.files_of(v)
        cutoff = int(time.time() * 1000) - grace_ms
        removed = 0
        prefix = self.store_dir + "/"
        for f in self.fileio.list(f"{self.store_dir}/data"):
            rel = f.path[len(prefix) :] if f.path.startswith(prefix) else f.path
            if rel in live or (f.mtime_ms is not None and f.mtime_ms > cutoff):
                continue
            if self.fileio.delete(f.path):
                removed += 1
        return removed
