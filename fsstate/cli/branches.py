"""The ``fsstate branches`` command lists branches, and :func:`pick_branch` is how ``show``,
``diff`` and ``stats`` choose the one they read (``drop-branch``: :mod:`fsstate.cli.gc`).

A partition store's versions form its trunk and, where a ``tiered()`` query's checkpoint was
copied, restored or rolled back, branches (:mod:`fsstate.store.lineage`): another lineage of
the same query, with state of its own. One divergence of a lineage makes a branch of the same
name in each partition it reached.

Invariants:

* Nothing is read silently from one of several lineages: a command that reads each operator's
  current lineage (the one committed to last, no ``--branch`` given) while other lineages are
  live says so on stderr in one note naming them.
* ``branches`` never writes; it costs the catalog's listing and one manifest read per
  (query, operator, branch) for the fork point (known while the branch's first version is
  retained).
"""

from __future__ import annotations

from typing import Any

import click

from fsstate.cli.console import Command, CommandEnv, Failed, Refused
from fsstate.cli.tables import branches_table
from fsstate.inspect.catalog import (
    StoreRef,
    branch_names,
    live_lineages,
    missing_partitions,
    on_branch,
    read_fork,
)
from fsstate.storage.fileio import FileIO
from fsstate.store.lineage import check_branch

__all__ = ["branches_cmd", "pick_branch", "require_whole"]

NOTE_NAMES = 3  # branches a note names before "and N more"


def pick_branch(env: CommandEnv, stores: list[StoreRef], branch: str | None) -> list[StoreRef]:
    """``stores`` seen on ``branch`` (None: as found, on each operator's current lineage, with
    a note on stderr naming the other live lineages if there are any).

    Raises:
        Failed: no store of ``stores`` has ``branch``.
    """
    if branch is None:
        shown = sorted({s.branch for s in stores})
        others = [n for n in live_lineages(stores) if n not in shown]
        if others:
            names = ", ".join(n or "the trunk" for n in others[:NOTE_NAMES])
            more = f" and {len(others) - NOTE_NAMES} more" if len(others) > NOTE_NAMES else ""
            now = ", ".join(n or "the trunk" for n in shown)
            env.err.print(
                f"note: {now} shown, the lineage committed last; other live lineages: "
                f"{names}{more} (--branch NAME)",
                markup=False,
                highlight=False,
            )
        return [s for s in stores if s.versions]
    views = on_branch(stores, check_branch(branch))
    if not views:
        have = ", ".join(branch_names(stores)) or "none"
        raise Failed(
            f"no store selected has branch {branch!r} (their branches: {have}); see "
            "fsstate branches"
        )
    return views


def _groups(stores: list[StoreRef]) -> dict[tuple[str, str], list[StoreRef]]:
    out: dict[tuple[str, str], list[StoreRef]] = {}
    for s in stores:
        out.setdefault((s.prefix, s.operator), []).append(s)
    return out


def branch_docs(env: CommandEnv, root: str, stores: list[StoreRef]) -> list[dict[str, Any]]:
    """A document per (query, operator, branch) of ``stores``: fork point (read from the
    first store holding the branch's oldest version), newest version, partitions holding it."""
    fileio = env.fileio(root)
    doc: list[dict[str, Any]] = []
    for (prefix, op), members in _groups(stores).items():
        for name in branch_names(members):
            held = [(s, b) for s in members for b in s.branches if b.name == name]
            oldest = min(held, key=lambda sb: sb[1].versions[0])[0]
            fork = read_fork(fileio, oldest, name)
            doc.append(
                {
                    "query": prefix,
                    "operator": op,
                    "branch": name,
                    "forked_from_branch": None if fork is None else fork.source,
                    "forked_at_version": None if fork is None else fork.version,
                    "min_version": min(b.versions[0] for _, b in held),
                    "max_version": max(b.latest for _, b in held),
                    "partitions": [s.partition for s, _ in held],
                    "operator_partitions": len(members),
                }
            )
    return doc


@click.command("branches", cls=Command)
@click.argument("root")
@click.option("--query", "-q", help="Only this query: its id, or a prefix of one.")
@click.option("--operator", help="Only this operator (store name).")
@click.pass_obj
def branches_cmd(env: CommandEnv, root: str, query: str | None, operator: str | None) -> None:
    """List the branches of each operator's state.

    A branch is a lineage a copied, restored or rolled-back checkpoint continued on. One row
    per query, operator and branch: its fork point (the version and branch it started from,
    while its first version is retained), its versions and the partitions holding it. show,
    diff and stats read a branch with --branch NAME; drop-branch drops one nobody continues.
    """
    stores = env.stores(env.fileio(root), query, operator)
    doc = branch_docs(env, root, stores)
    env.emit(doc, branches_table(root, doc))
    if not env.as_json and not doc:
        env.err.print("no branches: every store has its trunk only", highlight=False)


def require_whole(fileio: FileIO, stores: list[StoreRef], asked: bool) -> None:
    """Refuse (exit 1, one line) to read ``stores`` when their operator's generation has
    partitions they do not hold on the lineage read, unless ``asked`` is False (a partition
    was picked, or --partial given)."""
    if not asked or not stores:
        return
    for (prefix, op), lacking in missing_partitions(fileio, stores).items():
        line = stores[0].branch
        on = f"branch {line}" if line else "the trunk"
        where = f"operator {op!r}" + (f" of query {prefix}" if prefix else "")
        raise Refused(
            f"{where}: partitions {lacking} hold no version of {on}, the lineage read, so the "
            "state shown would be partial; nothing was read. See fsstate verify; pass "
            "--partial to read the partitions there are"
        )
