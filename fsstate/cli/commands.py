"""The ``fsstate`` group (:data:`cli`) and its commands that read stored state (``list``,
``stats``, ``show``, ``diff``) or compact it (``compact``); ``verify``, ``gc``, ``branches`` and
``drop-branch`` are registered here from their own modules.

Invariants (the command line's whole list is :mod:`fsstate.cli`'s):

* ``list``, ``stats``, ``show`` and ``diff`` never write, and read exactly what the engine's
  reads return (:mod:`fsstate.inspect`); ``show``, ``diff`` and ``stats`` read one lineage
  (:func:`fsstate.cli.branches.pick_branch`) and never mix versions of one operator's
  partitions (:func:`fsstate.inspect.verify.mixed_versions`).
* ``compact`` refuses a store a streaming writer owns
  (:func:`fsstate.store.maintenance.streaming_owner`) before compacting any store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import click
import pyarrow as pa

from fsstate.cli.branches import branches_cmd, pick_branch, require_whole
from fsstate.cli.console import (
    CommandEnv,
    Failed,
    at_least,
    command_group,
    debug_to_stderr,
    option_pairs,
)
from fsstate.cli.gc import drop_branch_cmd, gc
from fsstate.cli.history import history_doc, history_table
from fsstate.cli.tables import (
    compact_table,
    list_table,
    rows_table,
    stats_table,
)
from fsstate.cli.verify import verify
from fsstate.errors import ConfigError, VersionNotFoundError
from fsstate.format.schema import KIND_LIST
from fsstate.inspect.catalog import StoreRef, branch_names, read_store_manifest
from fsstate.inspect.changes import diff_tables
from fsstate.inspect.snapshot import Snapshot
from fsstate.inspect.verify import (
    mixed_versions,
    skews,
)
from fsstate.storage.fileio import FileIO
from fsstate.store.maintenance import compact_store, streaming_owner

__all__ = ["cli"]


log = logging.getLogger("fsstate")


_query = click.option(
    "--query", "-q", help="Only this query: its id, or a prefix of one (as tables shorten it)."
)
_operator = click.option("--operator", help="Only this operator (store name).")
_partition = click.option("--partition", "-p", type=int, help="Only this partition.")
_branch = click.option(
    "--branch",
    "-b",
    metavar="NAME",
    help="Read this lineage ('' for the trunk; see fsstate branches). Default: each "
    "operator's lineage committed last.",
)
_partial = click.option(
    "--partial",
    is_flag=True,
    help="Read the partitions there are when some hold no version of the lineage read "
    "(default: refuse, exit 1).",
)
_limit = click.option(
    "--limit",
    "-n",
    type=int,
    default=20,
    show_default=True,
    callback=at_least(0, "a number of rows", every=-1),
    help="Rows shown; -1 all.",
)
_root = click.argument("root")


@command_group("Object store setting (as StoreConfig / spark.fsstate.storage.*), repeatable.")
def cli(ctx: click.Context, as_json: bool, debug: bool, options: tuple[str, ...]) -> None:
    """Inspect and maintain fsstate state, without Spark.

    ROOT is a state_uri: a local path or an object store URI (s3://bucket/prefix; settings from
    the AWS_* variables or -o). Every command finds every partition store below ROOT. --json
    and -o work before the command name or after it.
    """
    if debug:
        debug_to_stderr(ctx)
    ctx.obj = CommandEnv(as_json, option_pairs(options))


@cli.command("list")
@_root
@_query
@_operator
@click.pass_obj
def list_cmd(env: CommandEnv, root: str, query: str | None, operator: str | None) -> None:
    """List the operators under ROOT and their committed versions.

    One row per query and operator: its partitions, the oldest and newest retained versions,
    how many are retained, the latest version and the branches. Reads the stores' listings
    only. A partition behind or ahead of its operator's others shows in the latest column and
    is named on stderr (fsstate verify says what to do).
    """
    stores = env.stores(env.fileio(root), query, operator)
    groups: dict[tuple[str, str], list[StoreRef]] = {}
    for s in stores:
        groups.setdefault((s.prefix, s.operator), []).append(s)
    skewed = {(k.prefix, k.operator): k for k in skews(stores)}
    doc: list[dict[str, Any]] = []
    for (prefix, op), members in groups.items():
        versions = sorted({v for s in members for v in s.versions})
        skew = skewed.get((prefix, op))
        doc.append(
            {
                "query": prefix,
                "operator": op,
                "partitions": [s.partition for s in members],
                "min_version": versions[0],
                "max_version": versions[-1],
                "retained_versions": len(versions),
                "latest_by_partition": {s.partition: s.latest for s in members},
                "latest_version": skew.latest if skew else members[0].latest,
                "partitions_agree": skew is None,
                "behind": dict(skew.behind) if skew else {},
                "ahead": dict(skew.ahead) if skew else {},
                "branches": len(branch_names(members)),
            }
        )
    env.emit(doc, list_table(root, doc))
    if not env.as_json:
        for skew in skewed.values():
            click.echo(f"PARTITIONS DISAGREE: {skew.describe()} (see fsstate verify)", err=True)


def _same_version(operator: str, stores: list[StoreRef], version: int | None) -> None:
    """Refuse to read partitions of ``operator`` at versions that differ (one line)."""
    refusal = mixed_versions(operator, stores, version)
    if refusal is not None and version is not None:
        raise VersionNotFoundError(refusal)  # one line, named by its type
    if refusal is not None:
        raise Failed(refusal)


@cli.command()
@_root
@_query
@_operator
@click.option("--version", "-v", "version", type=int, help="Version (default each store's newest).")
@click.option("--live-rows", is_flag=True, help="Also count live rows (reads every table).")
@click.option(
    "--history",
    type=int,
    callback=at_least(1, "a number of versions"),
    help="Instead: each store's last N versions' summaries (N >= 1).",
)
@_branch
@_partial
@click.pass_obj
def stats(
    env: CommandEnv,
    root: str,
    query: str | None,
    operator: str | None,
    version: int | None,
    live_rows: bool,
    history: int | None,
    branch: str | None,
    partial: bool,
) -> None:
    """Show each state variable's kind, files, rows and bytes.

    One row per query, operator and state variable, summed over its partitions, from the
    manifests of each store's newest version (--version: another one). Stored rows count every
    row version on storage, shadowed and deleted ones too; --live-rows reads every table to
    count what reads return. --history N shows instead the last N versions of each store:
    rows updated, removed and expired, bytes written and commit time.
    """
    fileio = env.fileio(root)
    stores = pick_branch(env, env.stores(fileio, query, operator), branch)
    require_whole(fileio, stores, not partial)
    if history is not None:
        doc_h = history_doc(fileio, stores, history)
        env.emit(doc_h, history_table(root, doc_h))
        return
    agg: dict[tuple[str, str, str], dict[str, Any]] = {}
    with env.progress("reading manifests", len(stores)) as step:
        for s in stores:
            _add_store_stats(agg, fileio, s, version, live_rows)
            step(1)
    doc = [{**a, "versions": sorted(a["versions"])} for a in agg.values()]
    env.emit(doc, stats_table(root, doc, live_rows))
    if not env.as_json:
        env.err.print(
            "stored rows count every row version on storage (shadowed and deleted "
            "ones too); --live-rows counts what reads return"
        )


def _add_store_stats(
    agg: dict[tuple[str, str, str], dict[str, Any]],
    fileio: FileIO,
    s: StoreRef,
    version: int | None,
    live_rows: bool,
) -> None:
    """Add the tables of one store at ``version`` (its newest if None) to the per-(query,
    operator, state) figures ``agg``; with ``live_rows`` every table is read to count them."""
    manifest = read_store_manifest(fileio, s, version)
    live: dict[str, int] = {}
    if live_rows:
        with Snapshot.of(fileio, s, manifest.version) as snap:
            live = {name: snap.read(name).num_rows for name in manifest.tables}
    for name, e in manifest.tables.items():
        a = agg.setdefault(
            (s.prefix, s.operator, name),
            {
                "query": s.prefix,
                "operator": s.operator,
                "state": name,
                "kind": e.spec.kind,
                "ttl_ms": e.spec.ttl_ms,
                "partitions": 0,
                "versions": set(),
                "files": 0,
                "stored_rows": 0,
                "bytes": 0,
                "live_rows": 0 if live_rows else None,
            },
        )
        a["partitions"] += 1
        a["versions"].add(manifest.version)
        a["files"] += len(e.runs) + len(e.ttl_runs)
        a["stored_rows"] += sum(r.rows for r in e.runs)
        a["bytes"] += sum(r.size_bytes for r in [*e.runs, *e.ttl_runs])
        if live_rows:
            a["live_rows"] += live[name]


def _read_all(
    env: CommandEnv,
    fileio: FileIO,
    stores: list[StoreRef],
    state: str,
    version: int | None,
    read: Callable[[Snapshot, int], pa.Table],
    versions: set[int] | None = None,
) -> pa.Table:
    parts = []
    with env.progress(f"reading {state}", len(stores)) as step:
        for s in stores:
            with Snapshot.of(fileio, s, version) as snap:
                t = read(snap, s.partition)
                if versions is not None:
                    versions.add(snap.version)
            parts.append(
                t.append_column("partition_id", pa.array([s.partition] * t.num_rows, pa.int32()))
            )
            step(1)
    return pa.concat_tables(parts, promote_options="permissive")


def _print_rows(env: CommandEnv, title: str, table: pa.Table, limit: int) -> None:
    shown = table.slice(0, limit) if limit >= 0 else table
    if env.as_json:
        env.emit({"rows": table.num_rows, "shown": shown.to_pylist()}, None)
        return
    env.out.print(rows_table(title, shown))
    more = table.num_rows - shown.num_rows
    env.err.print(f"{table.num_rows} rows" + (f" ({more} not shown: --limit)" if more else ""))


@cli.command()
@_root
@click.argument("operator")
@click.argument("state")
@_query
@_partition
@click.option("--version", "-v", "version", type=int, help="Version (default the newest).")
@_limit
@click.option("--now-ms", type=int, help="Resolve TTL at this time (default the commit clock).")
@click.option("--expiry", is_flag=True, help="Add each row's expiry time (_expires_at_ms).")
@_branch
@_partial
@click.pass_obj
def show(
    env: CommandEnv,
    root: str,
    operator: str,
    state: str,
    query: str | None,
    partition: int | None,
    version: int | None,
    limit: int,
    now_ms: int | None,
    expiry: bool,
    branch: str | None,
    partial: bool,
) -> None:
    """Print the rows of STATE of OPERATOR at a version.

    The rows every partition (or --partition) holds, with a partition_id column, exactly as
    the engine's reads return them: TTL resolved at the version's commit clock (--now-ms:
    another time), superseded and deleted rows left out. Without --version each partition's
    newest is read, and partitions that disagree are refused, naming the version to pass. The
    lineage committed last is read unless --branch names another; partitions without it are
    refused (exit 1) unless --partial.
    """
    fileio = env.fileio(root)
    stores = _one_query(env.stores(fileio, query, operator, partition))
    stores = pick_branch(env, stores, branch)
    require_whole(fileio, stores, partition is None and not partial)
    _same_version(operator, stores, version)
    seen: set[int] = set()
    table = _read_all(
        env,
        fileio,
        stores,
        state,
        version,
        lambda snap, _p: snap.read(state, now_ms=now_ms, with_expiry=expiry),
        seen,
    )
    at = ", ".join(map(str, sorted(seen)))
    on = f" of branch {branch}" if branch else ""
    _print_rows(env, f"{operator} / {state} at version {at}{on}", table, limit)


@cli.command()
@_root
@click.argument("operator")
@click.argument("state")
@click.argument("from_version", type=int)
@click.argument("to_version", type=int)
@_query
@_partition
@_limit
@_branch
@_partial
@click.pass_obj
def diff(
    env: CommandEnv,
    root: str,
    operator: str,
    state: str,
    from_version: int,
    to_version: int,
    query: str | None,
    partition: int | None,
    limit: int,
    branch: str | None,
    partial: bool,
) -> None:
    """Print what changed in STATE between two versions.

    One row per key (list element, map key) whose value is new or changed at TO_VERSION
    (change_type update, with the new value) or gone, deleted or expired (change_type delete),
    with a partition_id column. Both versions are of one lineage (--branch; default the one
    committed last) and must be present in every partition read.
    """
    fileio = env.fileio(root)
    stores = _one_query(env.stores(fileio, query, operator, partition))
    stores = pick_branch(env, stores, branch)
    require_whole(fileio, stores, partition is None and not partial)
    _same_version(operator, stores, from_version)
    _same_version(operator, stores, to_version)

    def changes(snap: Snapshot, p: int) -> pa.Table:
        spec = snap.spec(state)
        seq = spec.kind == KIND_LIST  # list elements are told apart by their sequence
        after = snap.read(state, with_seq=seq)
        s = next(s for s in stores if s.partition == p)
        with Snapshot.of(fileio, s, from_version) as old:
            before = old.read(state, with_seq=seq, now_ms=snap.clock_ms)
        return diff_tables(spec, before, after)

    table = _read_all(env, fileio, stores, state, to_version, changes)
    kinds = table.column("change_type").to_pylist() if table.num_rows else []
    if not env.as_json:
        env.err.print(f"{kinds.count('update')} updated, {kinds.count('delete')} deleted")
    on = f" of branch {branch}" if branch else ""
    _print_rows(env, f"{operator} / {state}: {from_version} -> {to_version}{on}", table, limit)


def _one_query(stores: list[StoreRef]) -> list[StoreRef]:
    queries = sorted({s.prefix for s in stores})
    if len(queries) > 1:
        raise Failed(f"the operator is in several queries {queries}: pick one with --query")
    return stores


@cli.command()
@_root
@_query
@_operator
@_partition
@click.pass_obj
def compact(
    env: CommandEnv, root: str, query: str | None, operator: str | None, partition: int | None
) -> None:
    """Merge each table's files into one, as a new version.

    In each store under ROOT (or --query, --operator, --partition), the runs of each table
    (the files its commits and spills wrote) are merged into one, superseded row versions
    dropped, and published as the store's next version: its reads need fewer files and return
    exactly what the previous version returns. The older files go with retention (or fsstate
    gc). Only for stores written through the engine directly (fsstate.PartitionStore):
    a store a streaming query writes (tiered(), the flow driver) is refused, as its versions
    are batch ids; those compact in the query's own tasks (StoreConfig's compaction settings).
    """
    fileio = env.fileio(root)
    stores = env.stores(fileio, query, operator, partition)
    for s in stores:
        owner = streaming_owner(s.root(fileio), s.operator, read_store_manifest(fileio, s))
        if owner is not None:
            raise ConfigError(
                f"store {s.root(fileio).describe(s.store_dir)} is written by {owner}; its "
                "versions are batch ids, so it compacts in that job's own tasks (StoreConfig "
                "compaction settings), not from the command line"
            )
    doc = []
    with env.progress("compacting", len(stores)) as step:
        for s in stores:
            done = compact_store(s.root(fileio), s.operator, s.partition, s.latest, layout=s.layout)
            doc.append(
                {
                    "query": s.prefix,
                    "operator": s.operator,
                    "partition": s.partition,
                    "version": done.version,
                    "runs_before": done.runs_before,
                    "runs_after": done.runs_after,
                    "bytes_written": done.bytes_written,
                }
            )
            step(1)
    env.emit(doc, compact_table(root, doc))


cli.add_command(verify)
cli.add_command(gc)
cli.add_command(branches_cmd)
cli.add_command(drop_branch_cmd)
