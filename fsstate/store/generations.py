"""Deleting layout generations no retained version needs, and directories of rescales that died.

A rescale (:mod:`fsstate.store.rescale`) leaves the old generation's stores in place, so that the
versions before it stay readable (:mod:`fsstate.store.layout`). :func:`collect_generations`
deletes them once nothing can want them:

* Every generation older than the newest holds only versions below the newest's first version
  (``since``). Once every store of the newest generation has dropped that first version (its
  retention, ``retain_versions``, moved past it), the retained window of versions lies wholly
  in the newest generation: the stores of every older generation are deleted (for generation
  0, the partition directories ``<operator>/<p>/``; for generation ``k``, ``<operator>/@g<k>-…/``).
  Their records stay (``operator.json``, ``layouts/``: a few hundred bytes each, the history of
  the operator's counts); a reader asking for one of their versions gets
  :class:`fsstate.errors.VersionNotFoundError`, as for any version retention dropped.
* A generation directory no record names belongs to a rescale that died before publishing its
  record (or lost a race): it is deleted once its newest file is older than ``grace_ms`` (a
  rescale under way writes there).

Invariants:

* Nothing of the newest generation, and nothing any record's generation still holds within the
  retained window, is ever deleted; records are never deleted.
* Requests: one recursive LIST of the operator's directory, then bulk deletes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import MANIFEST_DIR
from fsstate.store.identity import LAYOUT_PREFIX, operator_dir
from fsstate.store.layout import LAYOUT_FILE, LAYOUTS_DIR, read_layouts

__all__ = ["GenerationGc", "collect_generations"]


@dataclass(frozen=True)
class GenerationGc:
    """What :func:`collect_generations` deleted.

    Attributes:
        operator: the operator.
        generations: the generations whose stores were deleted.
        unreferenced: directories of dead rescales deleted.
        files: files deleted in all.
    """

    operator: str
    generations: tuple[int, ...]
    unreferenced: tuple[str, ...]
    files: int


def collect_generations(
    fileio: FileIO, operator: str, *, grace_ms: int = 3_600_000, now_ms: int | None = None
) -> GenerationGc:
    """Delete what superseded and dead generations of ``operator`` hold (see the module).

    Args:
        fileio: the state root.
        operator: the operator (store name).
        grace_ms: an unreferenced generation directory is deleted only once its newest file is
            older than this (>= 0).
        now_ms: the clock (default: the wall clock).

    Raises:
        ConfigError: a layout record is unreadable.
        StorageError: listing or deleting failed (run it again).
    """
    layouts = read_layouts(fileio, operator)
    newest = layouts[-1]
    base = operator_dir(operator)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    named = {layout.dir for layout in layouts}
    # each file by the directory under the operator's that holds it ("" for the records)
    by_dir: dict[str, list[tuple[str, int | None]]] = {}
    for entry in fileio.list(base, recursive=True):
        rel = entry.path[len(base) + 1 :] if entry.path.startswith(base + "/") else entry.path
        head, _, rest = rel.partition("/")
        if rel == LAYOUT_FILE or head == LAYOUTS_DIR or not rest:
            continue
        by_dir.setdefault(head, []).append((entry.path, entry.mtime_ms))
    superseded: list[int] = []
    if newest.generation > 0 and newest.partitions:
        first_dropped = True
        for p in range(newest.partitions):
            versions = [
                int(path.rsplit("/", 1)[-1][:-5])
                for path, _ in by_dir.get(newest.dir, [])
                if path.endswith(".json")
                and path.rsplit("/", 3)[-3:-1] == [str(p), MANIFEST_DIR]
                and path.rsplit("/", 1)[-1][:-5].isdigit()
            ]
            if not versions or min(versions) <= newest.since:
                first_dropped = False
                break
        if first_dropped:
            superseded = [layout.generation for layout in layouts[:-1]]
    doomed: list[str] = []
    for layout in layouts[:-1]:
        if layout.generation not in superseded:
            continue
        if layout.generation == 0:
            doomed += [p for d, files in by_dir.items() if d.isdigit() for p, _ in files]
        else:
            doomed += [p for p, _ in by_dir.get(layout.dir, [])]
    unreferenced = []
    for d, files in by_dir.items():
        if not d.startswith(LAYOUT_PREFIX) or d in named:
            continue
        newest_ms = max((m for _, m in files if m is not None), default=None)
        if newest_ms is not None and now - newest_ms >= grace_ms:
            unreferenced.append(d)
            doomed += [p for p, _ in files]
    if doomed:
        fileio.delete_many(sorted(doomed))
    return GenerationGc(operator, tuple(superseded), tuple(sorted(unreferenced)), len(doomed))
