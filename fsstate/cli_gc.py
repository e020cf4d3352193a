"""The ``fsstate`` commands that delete stored state: ``gc`` (files no retained version
references, old versions, superseded layout generations) and ``drop-branch`` (a lineage's
manifests).

Invariants:

* ``gc`` deletes only what no retained manifest of any branch references and is older than
  the grace time (:mod:`fsstate.store.retention`); ``--retain`` also drops trunk versions older
  than the window. Then, per operator, the stores of layout generations a rescale superseded
  once no retained version is in them, and directories of rescales that died
  (:mod:`fsstate.store.generations`).
* ``drop-branch`` deletes only the named branch's manifests (never the trunk's, never a
  file): its files go by ``fsstate gc`` (or a remaining branch's retention) once no retained
  manifest of any branch references them and they are older than the grace time. A query still
  writing on the dropped branch fails its next batch with ``VersionNotFoundError``.
"""

from __future__ import annotations

from typing import Any

import click

from fsstate.cli_branches import pick_branch
from fsstate.cli_tables import gc_tables
from fsstate.config import StoreConfig
from fsstate.console import Command, CommandEnv, Failed, at_least
from fsstate.inspect.catalog import StoreRef
from fsstate.storage.fileio import FileIO
from fsstate.store.lineage import drop_branch
from fsstate.store.generations import collect_generations
from fsstate.store.retention import Retention

__all__ = ["drop_branch_cmd", "gc"]

_query = click.option(
    "--query", "-q", help="Only this query: its id, or a prefix of one (as tables shorten it)."
)
_operator = click.option("--operator", help="Only this operator (store name).")
_root = click.argument("root")


@click.command(cls=Command)
@_root
@_query
@_operator
@click.option(
    "--grace-ms",
    type=int,
    default=StoreConfig().orphan_grace_ms,
    show_default=True,
    callback=at_least(0, "a number of milliseconds"),
    help="Never delete an unreferenced file younger than this (a commit may be under way).",
)
@click.option(
    "--retain",
    type=int,
    callback=at_least(1, "a number of versions"),
    help="Also drop versions older than the newest N (N >= 1).",
)
@click.pass_obj
def gc(
    env: CommandEnv,
    root: str,
    query: str | None,
    operator: str | None,
    grace_ms: int,
    retain: int | None,
) -> None:
    """Delete files no retained version references.

    With --retain N, also each store's versions older than its newest N. Then, per operator,
    the layout generations a rescale superseded once no retained version is in them, and the
    directories of rescales that died. A file any retained version of any branch needs is
    never deleted, nor one younger than --grace-ms (a commit may be writing it).
    """
    fileio = env.fileio(root)
    stores = env.stores(fileio, query, operator)
    doc = []
    with env.progress("collecting garbage", len(stores)) as step:
        for s in stores:
            doc.append(_gc_store(fileio, s, grace_ms, retain))
            step(1)
    # then whole layout generations a rescale superseded, once no retained version is in
    # them, and the directories of rescales that died (fsstate.store.generations)
    gens = _gc_generations(fileio, stores, grace_ms)
    if env.as_json:
        env.emit({"stores": doc, "generations": gens}, None)
        return
    for table in gc_tables(root, doc, gens):
        env.out.print(table)


def _gc_store(fileio: FileIO, s: StoreRef, grace_ms: int, retain: int | None) -> dict[str, Any]:
    """Collect the garbage of one store: its orphans older than ``grace_ms`` and, with
    ``retain``, its versions older than the newest ``retain`` (the orphans are then not
    counted: ``orphans_deleted`` is None)."""
    ret = Retention(s.root(fileio), s.store_dir)
    before = ret.versions()
    if retain is not None:
        cfg = StoreConfig(retain_versions=retain, orphan_grace_ms=grace_ms)
        ret.full_scan(before[-1], [], cfg)  # also deletes the orphans
        files = -1
    else:
        files = ret.delete_orphans([], grace_ms)
    return {
        "query": s.prefix,
        "operator": s.operator,
        "partition": s.partition,
        "versions_dropped": len(before) - len(ret.versions()),
        "orphans_deleted": files if files >= 0 else None,
    }


def _gc_generations(fileio: FileIO, stores: list[StoreRef], grace_ms: int) -> list[dict[str, Any]]:
    """Per (query, operator) of ``stores``: drop the layout generations a rescale superseded
    and the directories of dead rescales; what was dropped where something was."""
    gens = []
    for prefix, op in sorted({(s.prefix, s.operator) for s in stores}):
        got = collect_generations(fileio.child(prefix) if prefix else fileio, op, grace_ms=grace_ms)
        if got.files:
            gens.append(
                {
                    "query": prefix,
                    "operator": op,
                    "generations_dropped": list(got.generations),
                    "unreferenced_dirs": list(got.unreferenced),
                    "files_deleted": got.files,
                }
            )
    return gens


@click.command("drop-branch", cls=Command)
@click.argument("root")
@click.option("--query", "-q", help="The query: its id, or a prefix of one.")
@click.option("--operator", required=True, help="The operator (store name).")
@click.option("--branch", "branch", required=True, help="The branch to drop (never the trunk).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def drop_branch_cmd(
    env: CommandEnv, root: str, query: str | None, operator: str, branch: str, yes: bool
) -> None:
    """Drop a branch of OPERATOR that nobody continues.

    Deletes the branch's manifests in every partition of OPERATOR (asking first; --yes does
    not), e.g. the original's lineage once its checkpoint was deleted. Its files go by fsstate
    gc once no other branch's retained versions need them. A query still running, or restarted
    later, on that branch fails its next batch with VersionNotFoundError: stop it and delete or
    roll back its checkpoint first. The trunk is never dropped.
    """
    if not branch:
        raise Failed("--branch: the trunk is never dropped; name a branch (fsstate branches)")
    fileio = env.fileio(root)
    stores = env.stores(fileio, query, operator)
    queries = sorted({s.prefix for s in stores})
    if len(queries) > 1:
        raise Failed(f"operator {operator!r} is in several queries {queries}: pick --query")
    holding = pick_branch(env, stores, branch)
    if not yes:
        click.confirm(
            f"drop branch {branch} of operator {operator!r} in {len(holding)} partition(s)?",
            abort=True,
            err=True,
        )
    doc = []
    for s in holding:
        dropped = drop_branch(s.root(fileio), s.store_dir, branch)
        doc.append({"partition": s.partition, "manifests_deleted": dropped})
    if env.as_json:
        env.emit({"query": queries[0], "operator": operator, "branch": branch, "stores": doc}, None)
        return
    total = sum(d["manifests_deleted"] for d in doc)
    env.out.print(
        f"dropped branch {branch} of operator {operator!r}: {total} manifest(s) in "
        f"{len(doc)} partition(s); its files go by fsstate gc after the grace time",
        markup=False,
        highlight=False,
    )
