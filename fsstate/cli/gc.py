"""The ``fsstate`` commands that delete stored state: ``gc`` (what no lineage reaches) and
``drop-branch`` (a lineage's manifests).

Invariants:

* ``gc`` deletes only what :func:`fsstate.store.gc.collect` decides nothing reaches: versions
  outside every live lineage's retained history (``--retain``; without it, no version of a live
  lineage's history), files no retained version names that are older than ``--grace-ms`` and
  under no writer's lease, and the directories of rescales that died. Any read error deletes
  nothing (one line, exit 2); ``--dry-run`` deletes nothing and reports what would go.
* ``drop-branch`` deletes only the named branch's manifests (never the trunk's, never a
  file): its files go by ``fsstate gc``. It refuses (exit 1, saying what would break) a live
  lineage, a lineage other lineages' histories go through, or one a ``--checkpoint`` given
  runs on, unless ``--force``.
"""

from __future__ import annotations

from typing import Any

import click

from fsstate.cli.branches import pick_branch
from fsstate.cli.console import Command, CommandEnv, Failed, Refused, at_least
from fsstate.cli.tables import gc_tables
from fsstate.config import StoreConfig
from fsstate.inspect.catalog import StoreRef, live_lineages
from fsstate.inspect.checkpoint import checkpoint_uri, read_checkpoint
from fsstate.inspect.lineage import batch_state, planning_of
from fsstate.storage.fileio import FileIO
from fsstate.store.gc import ABANDONED_MS, collect
from fsstate.store.lineage import drop_branch

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
    help="Never delete an unreferenced file younger than this.",
)
@click.option(
    "--retain",
    type=int,
    callback=at_least(1, "a number of versions"),
    help="Keep each live lineage's newest N versions along its history, drop the rest "
    "(N >= 1; default: drop no version of a live lineage's history).",
)
@click.option(
    "--abandoned-ms",
    type=int,
    default=ABANDONED_MS,
    show_default=True,
    callback=at_least(0, "a number of milliseconds"),
    help="A lineage another went on from counts as continued once it had no commit for this "
    "long (before, a writer may still be on it).",
)
@click.option("--dry-run", is_flag=True, help="Delete nothing: report what would be deleted.")
@click.pass_obj
def gc(
    env: CommandEnv,
    root: str,
    query: str | None,
    operator: str | None,
    grace_ms: int,
    retain: int | None,
    abandoned_ms: int,
    dry_run: bool,
) -> None:
    """Delete what no lineage of the state reaches.

    Keeps, for every live lineage (one no other lineage continues), its history: all of it, or
    with --retain N its newest N versions, into the lineages it forked from and across a
    rescale into the generation it read. Deletes every other version, then every file no
    kept version names that is older than --grace-ms and no running writer holds (its
    lease), and the directories of rescales that died. Any read error deletes nothing.
    """
    fileio = env.fileio(root)
    stores = env.stores(fileio, query, operator, every=True)
    doc: list[dict[str, Any]] = []
    gens: list[dict[str, Any]] = []
    groups = sorted({(s.prefix, s.operator) for s in stores})
    with env.progress("collecting garbage", len(groups)) as step:
        for prefix, op in groups:
            base = fileio.child(prefix) if prefix else fileio
            done = collect(
                base,
                op,
                retain=retain if retain is not None else 1 << 40,
                grace_ms=grace_ms,
                abandoned_ms=abandoned_ms,
                dry_run=dry_run,
            )
            doc += [
                {
                    "query": prefix,
                    "operator": op,
                    "layout": s.layout,
                    "partition": s.partition,
                    "versions_dropped": len(s.manifests),
                    "files_deleted": s.files,
                    "bytes_deleted": s.bytes,
                    "files_kept_for_a_fork": s.kept_files,
                }
                for s in done.stores
            ]
            if done.dead_dirs:
                gens.append({"query": prefix, "operator": op, "dead_files": len(done.dead_dirs)})
            step(1)
    if env.as_json:
        env.emit({"dry_run": dry_run, "stores": doc, "generations": gens}, None)
        return
    for table in gc_tables(root, doc, gens):
        env.out.print(table)


@click.command("drop-branch", cls=Command)
@click.argument("root")
@click.option("--query", "-q", help="The query: its id, or a prefix of one.")
@click.option("--operator", required=True, help="The operator (store name).")
@click.option("--branch", "branch", required=True, help="The branch to drop (never the trunk).")
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    metavar="CHECKPOINT",
    help="A checkpointLocation of the query: refuse if it runs on the branch (repeatable).",
)
@click.option("--force", is_flag=True, help="Drop a branch that is live or that others need.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def drop_branch_cmd(
    env: CommandEnv,
    root: str,
    query: str | None,
    operator: str,
    branch: str,
    checkpoints: tuple[str, ...],
    force: bool,
    yes: bool,
) -> None:
    """Drop a branch of OPERATOR that nobody continues.

    Deletes the branch's manifests in every partition of OPERATOR (asking first; --yes does
    not): a lineage no checkpoint runs on any more. Its files go by fsstate gc. Refused, saying
    what would break, when a --checkpoint given runs on it, when it is live (a query whose
    checkpoint runs on it would fail its next batch with VersionNotFoundError) or when other
    lineages' histories go through it, unless --force. The trunk is never dropped.
    """
    if not branch:
        raise Failed("--branch: the trunk is never dropped; name a branch (fsstate branches)")
    fileio = env.fileio(root)
    stores = env.stores(fileio, query, operator, every=True)
    queries = sorted({s.prefix for s in stores})
    if len(queries) > 1:
        raise Failed(f"operator {operator!r} is in several queries {queries}: pick --query")
    holding = pick_branch(env, stores, branch)
    _refuse_if_needed(env, fileio, stores, branch, checkpoints, force)
    if not yes:
        click.confirm(
            f"drop branch {branch} of operator {operator!r} in {len(holding)} partition(s)?",
            abort=True,
            err=True,
        )
    doc: list[dict[str, Any]] = []
    for s in holding:
        dropped = drop_branch(s.root(fileio), s.store_dir, branch)
        doc.append({"partition": s.partition, "layout": s.layout, "manifests_deleted": dropped})
    if env.as_json:
        env.emit({"query": queries[0], "operator": operator, "branch": branch, "stores": doc}, None)
        return
    total = sum(int(d["manifests_deleted"]) for d in doc)
    env.out.print(
        f"dropped branch {branch} of operator {operator!r}: {total} manifest(s) in "
        f"{len(doc)} partition(s); its files go by fsstate gc after the grace time",
        markup=False,
        highlight=False,
    )


def _refuse_if_needed(
    env: CommandEnv,
    fileio: FileIO,
    stores: list[StoreRef],
    branch: str,
    checkpoints: tuple[str, ...],
    force: bool,
) -> None:
    """Refuse (exit 1) to drop ``branch`` a checkpoint runs on, or (without ``force``) a live
    one or one other lineages' histories go through, saying what would break."""
    for location in checkpoints:
        ckpt = read_checkpoint(env.fileio(checkpoint_uri(location), beside=(fileio.describe(""),)))
        if ckpt.committed is None:
            continue
        mine = [s for s in stores if s.prefix in (ckpt.query_id, "")]
        if not mine:
            continue
        got = batch_state(fileio, mine, ckpt.committed, planning_of(ckpt, ckpt.committed))
        if branch in got.lineages.values():
            raise Refused(
                f"checkpoint {ckpt.fileio.describe('')} runs on branch {branch} (its batch "
                f"{ckpt.committed}): its next batch would fail with VersionNotFoundError; roll "
                "it back or delete it first; nothing was dropped"
            )
    if force:
        return
    said = []
    if branch in live_lineages(stores):
        said.append(
            "it is a live lineage: a query whose checkpoint runs on it fails its next batch "
            "with VersionNotFoundError"
        )
    children = sorted({m.lineage for s in stores for m in s.marks if m.source == branch})
    if children:
        said.append(f"branches {children} forked from it: their versions before the fork go")
    if said:
        raise Refused(
            f"branch {branch}: {'; '.join(said)}. Give --checkpoint for each checkpoint of the "
            "query to check them, and --force to drop it anyway; nothing was dropped"
        )
