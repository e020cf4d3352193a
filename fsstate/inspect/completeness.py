"""Whether an operator's state is whole: every partition, lineage, version and record there.

``fsstate verify`` reads every file the retained versions name (:mod:`fsstate.inspect.verify`);
this module checks what a file check cannot see, from the catalog's listing and the manifests
verify reads anyway (:func:`check_operator`, one :class:`Gap` per thing missing):

* ``record``: a layout record does not read; the other operators are checked all the same
  (a record gone is found against a checkpoint: :func:`fsstate.inspect.lineage.check_checkpoint`).
* ``partition``: a live lineage of a generation (:mod:`fsstate.store.lineage` rule 4) is
  missing in some of its partitions (a branch dropped, or deleted, in one of them: every
  partition of a run forks at its first batch). A partition with no version at all is
  :func:`fsstate.inspect.verify.missing_partitions`'s.
* ``version``: a manifest names a parent version of its lineage, newer than the lineage's
  oldest retained one, that is not there (a middle manifest deleted).
* ``fork``: a branch's first version records a fork with no fork mark in its store (of files
  whose names record their lineage: older ones are kept by ``forked.json`` alone), or the
  store has branches and no ``forked.json``: its source's retention would not see the fork
  and could delete files the branch needs.

Invariants:

* Read-only: nothing beyond the listing given, the manifests verify reads, and one read of the
  operator's layout records.
* Every gap names the query, the operator, the generation directory, the partitions and
  lineages concerned, and what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError
from fsstate.inspect.catalog import StoreRef
from fsstate.storage.fileio import FileIO
from fsstate.store.layout import Layout, read_layouts
from fsstate.store.lineage import FORKED_PATH, ForkMark, Graph, live_heads

__all__ = ["REMEDY", "Gap", "Seen", "check_operator"]

REMEDY = (
    "restore the state directory from a backup taken with its checkpoint, or roll the query "
    "back to the newest batch whose state is whole (fsstate-spark repair <checkpoint>)"
)


@dataclass(frozen=True)
class Gap:
    """Something an operator's state lacks.

    Attributes:
        kind: ``record``, ``partition``, ``version`` or ``fork`` (see the module docstring).
        prefix: the query id ('' for the runner).
        operator: the operator.
        text: what is missing, in a sentence naming the objects and the remedy.
    """

    kind: str
    prefix: str
    operator: str
    text: str

    def describe(self) -> str:
        """One line: the operator, then the text."""
        where = f"operator {self.operator!r}" + (f" of query {self.prefix}" if self.prefix else "")
        return f"{where}: {self.text}"

    def to_doc(self) -> dict[str, Any]:
        """The gap as a JSON document."""
        return {
            "kind": self.kind,
            "query": self.prefix,
            "operator": self.operator,
            "text": self.text,
        }


@dataclass(frozen=True)
class Seen:
    """What verify read of one version's manifest: its parent in its lineage, its fork, its
    planning, whether it records a writer, and whether it names a file whose name records
    its lineage (:mod:`fsstate.storage.naming`; older files have none)."""

    parent: int | None
    fork: ForkMark | None
    planned: int | None
    tagged: bool


Reads = Mapping[tuple[str, int, str, int], Seen]  # (layout, partition, lineage, version)


def check_operator(
    fileio: FileIO, stores: list[StoreRef], seen: Reads, forked: set[tuple[str, int]]
) -> list[Gap]:
    """The gaps of one operator's state (see the module docstring).

    Args:
        fileio: the root the stores were found under.
        stores: the operator's stores, every generation
            (:func:`fsstate.inspect.catalog.all_stores`).
        seen: what verify read of each version's manifest.
        forked: (layout, partition) of the stores holding ``forked.json``.
    """
    first = stores[0]
    gap = _maker(first)
    try:
        layouts = read_layouts(first.root(fileio), first.operator)
    except ConfigError as exc:
        return [gap("record", f"{exc}; the other checks ran as if it were absent")]
    out: list[Gap] = []
    for gen in layouts:
        members = [s for s in stores if s.layout == gen.dir]
        if members or gen is layouts[-1]:
            out += _partitions(gap, gen, members, seen)
    for s in stores:
        out += _versions(gap, s, seen) + _forks(gap, s, seen, (s.layout, s.partition) in forked)
    return out


def _maker(first: StoreRef) -> Callable[[str, str], Gap]:
    def make(kind: str, text: str) -> Gap:
        return Gap(kind, first.prefix, first.operator, text)

    return make


def _planning(seen: Reads, s: StoreRef) -> Callable[[str, int], int | None]:
    def planned(lineage: str, version: int) -> int | None:
        got = seen.get((s.layout, s.partition, lineage, version))
        return None if got is None else got.planned

    return planned


def _graph(s: StoreRef, seen: Reads) -> Graph:
    """The store's lineage graph: its marks, and the forks its branches' manifests record."""
    marks = list(s.marks)
    for b in s.branches:
        got = seen.get((s.layout, s.partition, b.name, b.versions[0]))
        if got is not None and got.fork is not None and all(m.lineage != b.name for m in marks):
            marks.append(ForkMark(got.fork.source, got.fork.version, b.name))
    return Graph.of({b.name: b.versions for b in s.lineages}, marks)


def _partitions(
    gap: Callable[[str, str], Gap], gen: Layout, members: list[StoreRef], seen: Reads
) -> list[Gap]:
    """Partitions of generation ``gen`` lacking a live lineage the others hold (partitions
    with no version at all: :func:`fsstate.inspect.verify.missing_partitions`)."""
    where = f"generation {gen.generation}" + (f" ({gen.dir})" if gen.dir else "")
    live: dict[str, set[int]] = {}
    for s in members:
        for name in live_heads(_graph(s, seen), _planning(seen, s)):
            live.setdefault(name, set()).add(s.partition)
    held = {s.partition: {b.name for b in s.lineages} for s in members}
    count = gen.partitions if gen.partitions is not None else max(held, default=-1) + 1
    out: list[Gap] = []
    for name, have in sorted(live.items()):
        lacking = sorted(p for p in range(count) if p in held and name not in held[p])
        if lacking:
            line = f"branch {name}" if name else "the trunk"
            out.append(
                gap(
                    "partition",
                    f"{line} ({where}) is in partitions {sorted(have)} but not in {lacking}: "
                    f"a query on it fails there; {REMEDY}",
                )
            )
    return out


def _versions(gap: Callable[[str, str], Gap], s: StoreRef, seen: Reads) -> list[Gap]:
    """Middle manifests of the store's lineages that are gone."""
    out: list[Gap] = []
    for b in s.lineages:
        have = set(b.versions)
        for v in b.versions:
            got = seen.get((s.layout, s.partition, b.name, v))
            parent = None if got is None else got.parent
            if parent is not None and b.versions[0] < parent < v and parent not in have:
                line = f"branch {b.name}" if b.name else "the trunk"
                out.append(
                    gap(
                        "version",
                        f"partition {s.partition}: version {parent} of {line} is gone, between "
                        f"retained versions {b.versions[0]} and {v} (a manifest was deleted); "
                        f"{REMEDY}",
                    )
                )
    return out


def _forks(gap: Callable[[str, str], Gap], s: StoreRef, seen: Reads, flagged: bool) -> list[Gap]:
    """Forks of the store its sources' retention cannot see."""
    out: list[Gap] = []
    if s.branches and not flagged:
        out.append(
            gap(
                "fork",
                f"partition {s.partition} holds branches {list(s.branch_names)} but no "
                f"{FORKED_PATH}: retention of their sources may delete files they need; "
                "run fsstate gc only after restoring it (fsstate verify names what it lacks)",
            )
        )
    marked = {m.lineage for m in s.marks}
    for b in s.branches:
        got = seen.get((s.layout, s.partition, b.name, b.versions[0]))
        # a fork of files named before origins were recorded is kept by forked.json alone
        if got is not None and got.fork is not None and got.tagged and b.name not in marked:
            out.append(
                gap(
                    "fork",
                    f"partition {s.partition}: branch {b.name} forked version "
                    f"{got.fork.version} of {got.fork.source or 'the trunk'} and its fork mark "
                    "is gone: the source's retention may delete files it needs",
                )
            )
    return out
