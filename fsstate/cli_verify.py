"""``fsstate verify``: the state under a root checked whole, and against a Spark checkpoint.

Registered on :data:`fsstate.cli.cli`. The checks are :func:`fsstate.inspect.verify.verify_stores`
(every file the retained versions of every branch reference, partitions that disagree or have no
version) and, with ``--checkpoint``, :func:`fsstate.inspect.checkpoint.check_checkpoint` (the
checkpoint read as files: no Spark).

Invariants:

* Never writes. Exit code 0 when all is well, 1 when a file is damaged or missing or a
  partition is behind, ahead or without a version (each named on stderr, one line each), 2 for
  an error (:class:`fsstate.console.ErrorsAsOneLine`).
* ``-o`` applies to the root and to the checkpoint: refused only when both are local paths.
* An operator named with ``--operator`` that the query has not is refused with the nearest
  name, with or without ``--checkpoint`` (never a pass over no store).
"""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from fsstate.console import Command, CommandEnv, Failed, unknown_operator
from fsstate.inspect.catalog import StoreRef
from fsstate.inspect.checkpoint import (
    CheckpointCheck,
    check_checkpoint,
    checkpoint_uri,
    query_stores,
    read_checkpoint,
)
from fsstate.inspect.verify import VerifyReport, verify_stores
from fsstate.storage.fileio import FileIO

__all__ = ["verify"]

_query = click.option(
    "--query", "-q", help="Only this query: its id, or a prefix of one (as tables shorten it)."
)
_operator = click.option("--operator", help="Only this operator (store name).")


@click.command(cls=Command)
@click.argument("root")
@_query
@_operator
@click.option("--latest-only", is_flag=True, help="Check only each store's newest version.")
@click.option(
    "--checkpoint",
    metavar="CHECKPOINT",
    help="The checkpointLocation of a tiered() query whose state_uri is ROOT: also check that "
    "each of its operators is at the checkpoint's last committed batch.",
)
@click.pass_obj
def verify(
    env: CommandEnv,
    root: str,
    query: str | None,
    operator: str | None,
    latest_only: bool,
    checkpoint: str | None,
) -> None:
    """Check that the state under ROOT is intact and consistent.

    Reads every file the retained versions of the trunk and of every branch reference
    (checksums, sizes, row counts), and checks that each operator's partitions agree on their
    latest version and that none has no version; with --checkpoint, that the query's versions
    match Spark's commit log. Exits 1 naming each damaged or missing file and each partition
    behind, ahead or without a version; 0 when all is well. Never writes.
    """
    fileio = env.fileio(root, beside=(checkpoint_uri(checkpoint) if checkpoint else None,))
    check = None
    if checkpoint is None:
        stores = env.stores(fileio, query, operator)
    else:
        stores, check = _checkpoint_stores(env, fileio, checkpoint, query, operator)
    report = _verify_with_progress(env, fileio, stores, latest_only)
    doc = report.to_doc()
    doc["ok"] = report.ok and (check is None or check.ok)
    doc["checkpoint"] = None if check is None else check.to_doc()
    if env.as_json:
        env.emit(doc, None)
    else:
        _print_verify(env, report, check)
    if not doc["ok"]:
        sys.exit(1)


def _checkpoint_stores(
    env: CommandEnv, fileio: FileIO, checkpoint: str, query: str | None, operator: str | None
) -> tuple[list[StoreRef], CheckpointCheck]:
    """The stores of the query of ``checkpoint`` under the state root ``fileio`` (its
    ``<query id>`` directory, or the root itself when it is that directory), and how they
    compare with the checkpoint's commit log."""
    ckpt = read_checkpoint(env.fileio(checkpoint_uri(checkpoint), beside=(fileio.describe(""),)))
    if query is not None and query != ckpt.query_id:
        raise Failed(
            f"--query {query} is not the query of checkpoint {ckpt.fileio.describe('')} "
            f"({ckpt.query_id}): leave --query out"
        )
    stores, state = query_stores(fileio, ckpt, operator)
    if not stores and operator is not None:
        every, _ = query_stores(fileio, ckpt)
        refusal = unknown_operator(operator, every, state.describe(""))
        if refusal is not None:
            raise refusal
    return stores, check_checkpoint(ckpt, stores, state.describe(""), fileio)


def _verify_with_progress(
    env: CommandEnv, fileio: FileIO, stores: list[StoreRef], latest_only: bool
) -> VerifyReport:
    """:func:`verify_stores` with a progress bar of the files checked (on a terminal)."""
    bar: dict[str, Any] = {}
    with Progress(
        TextColumn("verifying"),
        BarColumn(),
        MofNCompleteColumn(),
        console=env.err,
        transient=True,
        disable=env.as_json or not env.err.is_terminal,
    ) as progress:

        def plan(n: int) -> None:
            bar["task"] = progress.add_task("verify", total=n)

        return verify_stores(
            fileio,
            stores,
            latest_only=latest_only,
            on_plan=plan,
            on_file=lambda _size: progress.advance(bar["task"]),
        )


def _print_verify(env: CommandEnv, report: VerifyReport, check: CheckpointCheck | None) -> None:
    """The outcome of ``verify`` on stdout, each thing wrong as one line on stderr."""
    verdict = report.verdict
    if check is not None:
        done = "no batch" if check.batch is None else f"batch {check.batch}"
        said = "matches" if check.ok else "does not match"
        verdict += f"; the checkpoint (query {check.query}, {done} committed) {said}"
    env.out.print(
        f"checked {report.stores} stores, {report.versions} versions, {report.files} files "
        f"({report.bytes} bytes): {verdict}"
    )
    for line in report.lines():
        click.echo(line, err=True)
    if check is not None:
        for line in check.describe():
            click.echo(f"CHECKPOINT {line}", err=True)
        if check.in_flight is not None:
            click.echo(
                f"note: batch {check.in_flight} was running when the query stopped (planned, "
                "not committed; some partitions committed it): its restart re-runs it and "
                "adopts them",
                err=True,
            )
