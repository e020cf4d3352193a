"""Layout generations: how many partitions an operator's state has, and where each version lives.

An operator's stores are cut into partitions by key; changing the partition count (a rescale,
:mod:`fsstate.store.rescale`) writes the state again, cut the new way, into a new *generation*
of stores. Every generation has a record:

* generation 0: ``<operator>/operator.json`` (``{"partitions": N, "kind": ...}``), written when
  the state is first used; its stores are ``<operator dir>/<partition>`` (every store written
  before rescaling existed is of generation 0);
* generation ``k >= 1``: ``<operator dir>/layouts/<k:06d>.json`` (``partitions``, ``dir``,
  ``since``, the partition ``keys``), its stores ``<operator dir>/<dir>/<partition>``
  (:func:`fsstate.store.identity.store_dir_for`), ``dir`` being ``@g<k>-<8 hex digits>``,
  unique to the rescale that wrote it.

Invariants:

* A record is published once, with put-if-absent, and never changes. A generation's record is
  published only after every store of the generation committed its first version, so a
  generation whose record exists is complete; a rescale that died left at most an unreferenced
  directory (no record), and generation ``k - 1`` stays in force.
* Generation ``k`` holds the versions ``>= since`` (its first version, ``since``, holds the same
  rows as version ``since`` of generation ``k - 1``, cut the new way; ``since = -1``: every
  version). The generation *in force* at version ``v`` (:func:`in_force`) is the newest one with
  ``since <= v``; older generations keep their versions until their retention or a gc deletes
  them, so a version from before a rescale stays readable where it was written.
* Resolving costs one GET of ``operator.json`` and one LIST of ``layouts/`` plus one GET per
  generation record (:func:`read_layouts`): done when a query starts or a reader opens an
  operator, never on the per-batch path (the driver hands the resolved generation to its
  tasks).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError, StorageNotFoundError
from fsstate.storage.fileio import FileIO
from fsstate.store.identity import LAYOUT_PREFIX, operator_dir

__all__ = [
    "LAYOUTS_DIR",
    "LAYOUT_FILE",
    "Layout",
    "continued_operator",
    "in_force",
    "new_layout_dir",
    "operators_by_kind",
    "operators_of_kind",
    "publish_layout",
    "read_layouts",
    "record_path",
    "source_of",
]

log = logging.getLogger(__name__)

LAYOUT_FILE = "operator.json"  # <operator>/operator.json: generation 0, written once
LAYOUTS_DIR = "layouts"  # <operator dir>/layouts/<k:06d>.json: generations 1, 2, ...
LAYOUT_FORMAT = 1


@dataclass(frozen=True)
class Layout:
    """One layout generation of an operator's state (see the module docstring).

    Attributes:
        generation: 0 for the stores written first, then 1, 2, ... per rescale.
        partitions: the partition count (None: generation 0 without a record, e.g. tiered
            state, whose count is not recorded here).
        dir: the generation's directory under the operator's (``""`` for generation 0).
        since: the first version the generation holds (-1: every version).
        keys: the columns the partition of a row was computed from (None: not recorded).
        kind: the operator's class name, as generation 0 recorded it (None: not recorded).
        source: the directory of the generation the rescale read (None: not recorded, the
            generation before it).
        lineages: the lineage (branch) the rescale read in each old partition (empty: the
            trunk in every one); the new generation's trunk continues them
            (:mod:`fsstate.store.lineage`).
        read: the version of ``source`` the rescale read (None: not recorded; ``since``).
    """

    generation: int
    partitions: int | None
    dir: str = ""
    since: int = -1
    keys: tuple[str, ...] | None = None
    kind: str | None = None
    source: str | None = None
    lineages: tuple[str, ...] = ()
    read: int | None = None


def record_path(operator: str, generation: int) -> str:
    """The path of generation ``generation``'s record (relative to the state root)."""
    if generation == 0:
        return f"{operator}/{LAYOUT_FILE}"
    return f"{operator_dir(operator)}/{LAYOUTS_DIR}/{generation:06d}.json"


def new_layout_dir(generation: int) -> str:
    """A fresh directory name for generation ``generation`` (unique per rescale attempt)."""
    return f"{LAYOUT_PREFIX}g{generation}-{uuid.uuid4().hex[:8]}"


def _doc(operator: str, layout: Layout) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": LAYOUT_FORMAT,
        "operator": operator,
        "partitions": layout.partitions,
    }
    if layout.kind is not None:
        doc["kind"] = layout.kind
    if layout.generation:
        doc.update(
            generation=layout.generation,
            dir=layout.dir,
            since=layout.since,
            keys=None if layout.keys is None else list(layout.keys),
            created_ms=int(time.time() * 1000),
        )
        if layout.source is not None:
            doc.update(source=layout.source, lineages=list(layout.lineages), read=layout.read)
    return doc


def publish_layout(fileio: FileIO, operator: str, layout: Layout) -> bool:
    """Publish ``layout``'s record (put-if-absent); False if that generation has one already."""
    data = json.dumps(_doc(operator, layout), sort_keys=True).encode()
    return fileio.publish_if_absent(record_path(operator, layout.generation), data)


def _parse(fileio: FileIO, operator: str, generation: int, data: bytes) -> Layout:
    path = record_path(operator, generation)
    try:
        doc = json.loads(data)
        parts = doc.get("partitions")
        keys = doc.get("keys")
        source = doc.get("source")
        layout = Layout(
            generation,
            None if parts is None else int(parts),
            str(doc.get("dir") or ""),
            int(doc.get("since", -1)),
            None if keys is None else tuple(str(k) for k in keys),
            doc.get("kind"),
            None if source is None else str(source),
            tuple(str(x) for x in doc.get("lineages") or ()),
            None if doc.get("read") is None else int(doc["read"]),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"operator {operator!r}: the layout record {fileio.describe(path)} is unreadable "
            f"({exc}); restore it from a backup or start the query with new state"
        ) from None
    if generation and not layout.dir.startswith(LAYOUT_PREFIX):
        raise ConfigError(
            f"operator {operator!r}: the layout record {fileio.describe(path)} names no "
            f"generation directory ({layout.dir!r}); restore it from a backup"
        )
    return layout


def read_layouts(fileio: FileIO, operator: str) -> list[Layout]:
    """Every published generation of ``operator``'s state, oldest first (at least generation
    0, with ``partitions=None`` if it has no record).

    Raises:
        ConfigError: a record is unreadable.
    """
    try:
        first = _parse(fileio, operator, 0, fileio.read_bytes(record_path(operator, 0)))
    except StorageNotFoundError:
        first = Layout(0, None)
    out = [first]
    found: list[int] = []
    for entry in fileio.list(f"{operator_dir(operator)}/{LAYOUTS_DIR}"):
        name = entry.path.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            found.append(int(name[:-5]))
    for k in sorted(found):
        if k > 0:
            out.append(_parse(fileio, operator, k, fileio.read_bytes(record_path(operator, k))))
    return out


def operators_by_kind(
    fileio: FileIO, read: Callable[[FileIO, str], Sequence[Layout]] | None = None
) -> dict[str, str | None]:
    """Every operator under a state root with a generation-0 record, sorted, to the ``kind``
    that record says (one recursive LIST of the root and one ``read`` per operator found,
    :func:`read_layouts` by default: not for the per-batch path)."""
    names = sorted(
        {
            e.path.split("/")[0]
            for e in fileio.list("", recursive=True)
            if e.path.count("/") == 1 and e.path.endswith("/" + LAYOUT_FILE)
        }
    )
    reader = read_layouts if read is None else read
    return {n: reader(fileio, n)[0].kind for n in names}


def operators_of_kind(fileio: FileIO, kind: str) -> list[str]:
    """The operators under a state root whose generation-0 record says ``kind``, sorted
    (:func:`operators_by_kind`)."""
    return [n for n, k in operators_by_kind(fileio).items() if k == kind]


def continued_operator(
    fileio: FileIO,
    name: str,
    kind: str,
    who: str,
    *,
    claimed: Collection[str] = (),
    several: str = "operators",
    remedy: str = "name=<the one it continues>",
) -> str:
    """The operator a processor named ``name`` continues: ``name`` when its generation-0
    record exists; else the only operator of ``kind`` under the root not in ``claimed`` (a
    renamed or replaced class: state follows the query's operator, as Spark's does; logged);
    else ``name`` (no state yet). ``who`` names the processor in messages, ``several`` the
    operators found, ``remedy`` what says which.

    Raises:
        ConfigError: several operators of ``kind`` could be the one ``name`` continues.
    """
    if fileio.exists(record_path(name, 0)):
        return name
    found = [n for n in operators_of_kind(fileio, kind) if n not in claimed]
    if len(found) > 1:
        raise ConfigError(
            f"{who} has no state under that name, and the state holds several {several} "
            f"{found}: pass {remedy}"
        )
    if not found:
        return name
    log.warning("fsstate: %s takes over the state of %r; pass %s to say so", who, found[0], remedy)
    return found[0]


def source_of(layouts: Sequence[Layout], layout: Layout) -> Layout | None:
    """The generation ``layout``'s rescale read (None: generation 0, or none recorded that
    exists)."""
    if layout.generation == 0:
        return None
    if layout.source is not None:
        return next((g for g in layouts if g.dir == layout.source), None)
    older = [g for g in layouts if g.generation < layout.generation]
    return older[-1] if older else None


def in_force(layouts: Sequence[Layout], version: int | None = None) -> Layout:
    """The generation holding ``version`` (None: the newest generation)."""
    if version is None:
        return layouts[-1]
    best = layouts[0]
    for layout in layouts:
        if layout.since <= version and layout.generation >= best.generation:
            best = layout
    return best
