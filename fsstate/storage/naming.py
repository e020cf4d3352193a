"""Data file names: every file says which lineage wrote it, from which version on, and under
which writer lease.

A data file (a run, a TTL index file) is written once under a name no other attempt uses::

    data/<prefix>~<lineage>~<birth>~<tag>~<unique>.parquet

=============  =================================================================================
part           meaning
=============  =================================================================================
``prefix``     the table's file prefix (its name made path-safe, ``[A-Za-z0-9._=-]``)
``lineage``    the lineage (branch) of the store that wrote it; ``_`` for the trunk
               (:mod:`fsstate.store.lineage`); a lineage name never holds ``~``
``birth``      the first version that can reference the file: the writer's version + 1 when
               it wrote it (a version ``< birth`` of that lineage never names it)
``tag``        the writer's lease tag (:mod:`fsstate.storage.leases`): while a lease of that tag
               is in force, no unreferenced file of it is collected
``unique``     12 random hex digits
=============  =================================================================================

Files written before this naming (``data/<prefix>-<32 hex digits>.parquet``) have no origin:
:func:`origin_of` returns None for them and every rule that needs an origin treats them
conservatively (the garbage collection by age alone, as they were written; the per-commit
retention only where the store was never forked).

Invariants:

* :func:`origin_of` is the inverse of :func:`data_path` for every lineage name, birth and tag
  the writers make, and returns None for any other name (``~`` never appears in a prefix).
* Names are unique per call (a random part), so attempts never clobber each other.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = ["TRUNK_TAG", "Origin", "data_path", "origin_of"]

TRUNK_TAG = "_"  # the trunk's lineage part (no lineage name starts with "_")
_SEP = "~"


@dataclass(frozen=True)
class Origin:
    """Who wrote a data file (parsed from its name).

    Attributes:
        lineage: the lineage (branch) that wrote it (``""``: the trunk).
        birth: the first version that can reference it.
        tag: the writer's lease tag.
    """

    lineage: str
    birth: int
    tag: str


def data_path(prefix: str, origin: Origin) -> str:
    """A new unique path (relative to the store directory) for a data file of ``origin``."""
    lineage = origin.lineage or TRUNK_TAG
    unique = uuid.uuid4().hex[:12]
    return (
        f"data/{prefix}{_SEP}{lineage}{_SEP}{origin.birth}{_SEP}{origin.tag}{_SEP}{unique}.parquet"
    )


def origin_of(path: str) -> Origin | None:
    """The origin a data file's name records (None: a file named before origins were)."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(".parquet"):
        return None
    parts = name[: -len(".parquet")].split(_SEP)
    if len(parts) != 5 or not parts[2].isdigit() or not parts[3]:
        return None
    lineage = "" if parts[1] == TRUNK_TAG else parts[1]
    return Origin(lineage, int(parts[2]), parts[3])
