"""Retention on the commit path: the versions one lineage keeps, and the files it may delete.

A store keeps the versions of its lineage within ``retain_versions`` of the newest it committed
(by number, as Spark's ``minBatchesToRetain``). Committing ``v`` drops version
``d = v - retain_versions`` of the store's own lineage, without listing the store:

1. its manifest is deleted first (the fork handshake, :mod:`fsstate.store.lineage` rule 2);
2. then the files version ``d + 1`` retired (the files ``d`` referenced and ``d + 1`` does not,
   recorded in the manifest of ``d + 1``) are deleted if this lineage wrote them
   (:mod:`fsstate.storage.naming`) and no fork of this lineage at a version from the file's
   birth to ``d`` can name them: the forks are read from their marks (one LIST of this
   lineage's marks, only when such files exist, after step 1);
3. a file named before origins were recorded goes as before: only where the store directory
   was never forked (one HEAD of ``forked.json`` after step 1, until it is seen).

That is done only when the versions ``d .. v`` form one chain (each version's parent the one
before: ``Manifest.chain_from <= d``), so no retained version of the lineage can reference a
retired file. Before its first drop in a process, the store lists its lineage's manifests once
and drops every one older than the window that an earlier process left (a crash between a
publish and its drop): every version of the lineage from which a fork could still be made is
then inside the window. Everything else (other lineages' versions, files shared with them,
files nobody published) goes by the collection across lineages, out of the commit
(:mod:`fsstate.store.gc`).

Invariants:

* A file referenced by a retained manifest of any lineage is never deleted here: only this
  lineage's own files, which another lineage can name only through a fork, and a fork of a
  version is either seen (its mark) or refused.
* Costs per commit, past the first ``retain_versions``: one DELETE of the dropped manifest, one
  GET of the next manifest unless this store knows it; when files are retired, one LIST of the
  lineage's fork marks (own files) or one HEAD (older files, until a fork is seen), one bulk
  DELETE. Once per process and store: one LIST of the lineage's manifests.
"""

from __future__ import annotations

from fsstate.config import StoreConfig
from fsstate.errors import FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import Manifest, list_versions, manifest_path, read_manifest
from fsstate.storage.naming import origin_of
from fsstate.store.lineage import fork_marks, has_forks

KNOWN_MAX = 128  # manifests a store keeps for retention (the window is usually within it)


class Retention:
    """The retained versions of one lineage of one store directory."""

    def __init__(self, fileio: FileIO, store_dir: str, branch: str = "") -> None:
        self.fileio = fileio
        self.store_dir = store_dir
        self.branch = branch
        self._forked = False  # forked.json seen (older files are then never deleted here)
        self._versions: list[int] | None = None
        self._known: dict[int, Manifest] = {}  # manifests this store read or wrote (bounded)
        self._swept_to: int | None = None  # every version <= this is known deleted
        self._marks: list[int] | None = None  # fork points of this lineage, when listed
        self._marks_to = -1  # ... complete for the versions up to this one

    def remember(self, manifest: Manifest) -> None:
        """Note a manifest this store committed, adopted or caught up to (the newest
        :data:`KNOWN_MAX` are kept: retention then reads none it has seen)."""
        known = self._known
        known[manifest.version] = manifest
        while len(known) > KNOWN_MAX:
            del known[min(known)]

    def forget_listing(self) -> None:
        """The version listing is stale (other processes committed): list again when needed."""
        self._versions = None

    def versions(self) -> list[int]:
        """Committed versions of the lineage currently kept on storage, ascending."""
        if self._versions is None:
            self._versions = list_versions(self.fileio, self.store_dir, self.branch)
        return list(self._versions)

    def listed(self) -> list[int] | None:
        """The retained versions as last listed and kept up to date, or None (not listed)."""
        return None if self._versions is None else list(self._versions)

    def forked(self) -> bool:
        """Whether the store directory was ever forked (one HEAD until seen)."""
        if not self._forked:
            self._forked = has_forks(self.fileio, self.store_dir)
        return self._forked

    def after_commit(self, manifest: Manifest, config: StoreConfig) -> None:
        """Drop what leaves the retained window now that ``manifest`` was committed (see the
        module docstring)."""
        v = manifest.version
        dropped = v - config.retain_versions
        if self._versions is not None and v not in self._versions:
            self._versions.append(v)
            self._versions.sort()
        if dropped < 0 or manifest.chain_from is None or manifest.chain_from > dropped:
            return
        if self._swept_to is None or self._swept_to < dropped - 1:
            self._sweep_below(dropped)
        nxt = manifest if dropped + 1 == v else self._manifest_of(dropped + 1)
        retired = nxt.retired if nxt is not None and nxt.parent_version == dropped else []
        self.fileio.delete(manifest_path(self.store_dir, dropped, self.branch))  # first
        self._swept_to = dropped
        self._known.pop(dropped, None)
        if self._versions is not None and dropped in self._versions:
            self._versions.remove(dropped)
        doomed = self._own_garbage(retired, dropped)
        if doomed:
            self.fileio.delete_many([f"{self.store_dir}/{p}" for p in doomed])

    def _sweep_below(self, dropped: int) -> None:
        """Delete the lineage's manifests older than ``dropped`` that are still there (one
        LIST): then a fork can only be made of a version this store drops itself."""
        listed = list_versions(self.fileio, self.store_dir, self.branch)
        self._versions = listed
        old = [x for x in listed if x < dropped]
        if old:
            self.fileio.delete_many([manifest_path(self.store_dir, x, self.branch) for x in old])
            self._versions = [x for x in listed if x >= dropped]
        self._swept_to = dropped - 1

    def _own_garbage(self, retired: list[str], dropped: int) -> list[str]:
        """Of the files ``dropped + 1`` retired, those this lineage may delete (steps 2, 3 of
        the module docstring; the manifest of ``dropped`` is deleted already)."""
        out: list[str] = []
        own: list[tuple[str, int]] = []
        older: list[str] = []
        for path in retired:
            origin = origin_of(path)
            if origin is None:
                older.append(path)
            elif origin.lineage == self.branch:
                own.append((path, origin.birth))
        if older and not self.forked():
            out += older
        if own:
            if self._marks is None or self._marks_to < dropped:
                self._marks = [
                    m.version for m in fork_marks(self.fileio, self.store_dir, self.branch)
                ]
                self._marks_to = dropped
            forks = self._marks
            out += [p for p, birth in own if not any(birth <= f <= dropped for f in forks)]
        return out

    def _manifest_of(self, version: int) -> Manifest | None:
        m = self._known.get(version)
        if m is not None:
            return m
        try:
            m = read_manifest(self.fileio, self.store_dir, version, self.branch)
        except FsStateError:
            return None
        return m
