"""Branches of a partition store: forks of its state in O(metadata).

A store's versions form its *trunk*; a *branch* is another sequence of versions of the same
store that starts as a copy of one version of another branch (its *fork point*) and goes on on
its own: a copied, restored or rolled-back Spark checkpoint that runs a batch again continues
on a branch of its own (:mod:`fsstate_spark.tiered.lineage` decides which), so two lineages of
one query never read or write each other's versions.

Layout (one store directory, :mod:`fsstate.storage.manifest`)::

    <store_dir>/manifests/<version>.json            the trunk
    <store_dir>/branches/<branch>/<version>.json    a branch
    <store_dir>/data/...                            the files of every branch
    <store_dir>/forked.json                         present once any fork was made

A fork writes ``forked.json`` (put-if-absent), then the branch's first manifest: the source
version's manifest with the same tables and files (nothing is copied but the manifest), no
parent, ``chain_from`` at its own version, and ``meta["forked_from"]`` naming the source
(branch, version, checksum). Then it checks that every file the version needs is still on
storage (one listing of the data directory): a fork racing the retention of the source is
refused, never left referencing a deleted file.

Invariants:

* Forking is idempotent: forking the same source version into the same branch again returns
  the branch's manifest (one LIST of the branch first), also once the branch went on from it
  (a retry of the epoch that forked); a branch that starts elsewhere raises
  :class:`fsstate.errors.CommitConflictError`.
* A branch name is path-safe (:func:`check_branch`); :func:`branch_for` derives one from
  (the source branch, the version, the lineage's planning time) alone, so every task of one
  planning of a batch, and every retry, picks the same branch without coordinating.
* Files are shared, so a file is deleted only when no branch needs it: once ``forked.json``
  exists, retention deletes files only by its listing scan, which keeps every file any
  branch's retained manifests reference (:mod:`fsstate.store.retention`), never by the
  per-commit path.
* :func:`drop_branch` deletes a branch's manifests only, never a file and never the trunk's:
  the files only it referenced go by the next listing scan of a remaining branch (``fsstate
  gc``), once older than the grace time. A branch forked from the dropped one keeps its own
  manifests, which name their files themselves, so it loses nothing. A writer still on the
  dropped branch fails its next version with :class:`fsstate.errors.VersionNotFoundError`.
* A store carries a version's meta without its writer and fork record (:func:`carried`): a
  fork record belongs to the branch's first manifest only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
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
from fsstate.store.identity import WRITER_META

__all__ = [
    "FORKED_META",
    "FORKED_PATH",
    "branch_for",
    "carried",
    "carried_meta",
    "check_branch",
    "drop_branch",
    "fork_version",
    "has_forks",
    "list_branches",
]

FORKED_PATH = "forked.json"  # relative to the store directory: present once a fork was made
FORKED_META = "forked_from"  # meta key of a branch's first manifest: its source
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_branch(branch: str) -> str:
    """``branch`` if it is a valid branch name (``""``: the trunk).

    Raises:
        ConfigError: the name is not 1-64 characters of ``[A-Za-z0-9._-]`` starting with a
            letter or digit.
    """
    if branch and not _BRANCH.match(branch):
        raise ConfigError(
            f"branch {branch!r}: a branch name is 1-64 characters of letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return branch


def branch_for(source: str, version: int, planned_ms: int) -> str:
    """The branch a lineage continues on when it meets version ``version + 1`` of ``source``
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


def drop_branch(fileio: FileIO, store_dir: str, branch: str) -> int:
    """Delete every manifest of ``branch`` (one listing, one bulk delete); returns how many
    there were (0: the store has no such branch). See the module docstring.

    Raises:
        ConfigError: ``branch`` is the trunk (``""``) or not a valid branch name.
    """
    if not check_branch(branch):
        raise ConfigError(
            f"store {fileio.describe(store_dir)}: the trunk is no branch and is never dropped"
        )
    versions = list_versions(fileio, store_dir, branch)
    fileio.delete_many([manifest_path(store_dir, v, branch) for v in reversed(versions)])
    return len(versions)


def fork_version(
    fileio: FileIO, store_dir: str, version: int, *, source: str = "", branch: str
) -> Manifest:
    """Start ``branch`` at ``version`` of ``source`` (see the module docstring).

    Returns:
        The branch's manifest of ``version``.

    Raises:
        VersionNotFoundError: the source version does not exist, or a file it needs was
            deleted (retention dropped the version while forking): nothing usable was made.
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
    mark = json.dumps({"format": "fsstate.store.branches", "format_version": 1}).encode()
    fileio.publish_if_absent(f"{store_dir}/{FORKED_PATH}", mark)
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
        checksum="",
    )
    published = publish_manifest(fileio, store_dir, fork, branch)
    if published is not fork and published.meta.get(FORKED_META) != origin:
        raise CommitConflictError(
            f"branch {branch!r} of store {fileio.describe(store_dir)} already starts at "
            f"{published.meta.get(FORKED_META)!r}, not at version {version} of "
            f"{source or 'the trunk'}; fork into another branch"
        )
    _check_files(fileio, store_dir, published)
    return published


def _check_files(fileio: FileIO, store_dir: str, manifest: Manifest) -> None:
    """Every file ``manifest`` needs is on storage (one listing of the data directory)."""
    need = manifest.files()
    if not need:
        return
    prefix = f"{store_dir}/"
    have = {
        e.path[len(prefix) :] if e.path.startswith(prefix) else e.path
        for e in fileio.list(f"{store_dir}/data", recursive=True)
    }
    missing = sorted(need - have)
    if missing:
        raise VersionNotFoundError(
            f"version {manifest.version} of store {fileio.describe(store_dir)} lost "
            f"{len(missing)} file(s) (e.g. {missing[0]}) while it was forked (retention "
            "dropped it): fork a newer retained version"
        )


def carried(manifest: Manifest | None) -> dict[str, Any]:
    """The meta a store at ``manifest`` starts from: the version's, without its writer (a
    writer is each commit's own: a commit nobody recorded a writer for records none)."""
    if manifest is None:
        return {}
    return {k: v for k, v in manifest.meta.items() if k not in (WRITER_META, FORKED_META)}


def carried_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """A store's meta as compared with :func:`carried` (no writer, no fork record)."""
    return {k: v for k, v in meta.items() if k not in (WRITER_META, FORKED_META)}
