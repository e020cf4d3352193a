"""``fsstate verify``: the state under a root checked whole, and against a Spark checkpoint.

Registered on :data:`fsstate.cli.cli`. The checks are :func:`fsstate.inspect.verify.verify_stores`
(every file the retained versions of every branch reference, partitions that disagree or have no
version) and, with ``--checkpoint``, :func:`fsstate.inspect.checkpoint.check_checkpoint` (the
checkpoint read as files: no Spark).

Invariants:

* Never writes. Exit code 0 when all is well, 1 when a file is damaged or missing or a
  partition is behind, ahead or without a version (each named on stderr, one line each), 2 for
  an error (:class:`fsstate.cli.console.ErrorsAsOneLine`).
* ``-o`` applies to the root and to the checkpoint: refused only when both are local paths.
* An operator named with ``--operator`` that the query has not is refused with the nearest
  name, with or without ``--checkpoint`` (never a pass over no store).
"""

from __future__ import annotations

import sys
import textwrap
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from fsstate.cli.console import Command, CommandEnv, Failed, unknown_operator
from fsstate.inspect.catalog import StoreRef
from fsstate.inspect.checkpoint import checkpoint_uri, query_stores, read_checkpoint
from fsstate.inspect.lineage import CheckpointCheck, check_checkpoint
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
        stores = env.stores(fileio, query, operator, every=True)
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
    return stores, check_checkpoint(ckpt, stores, fileio, state.describe(""))


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
    """The outcome of ``verify`` on stdout, each thing wrong on stderr, every line within
    :data:`WIDTH` columns (a path longer than that on a line of its own)."""
    verdict = report.verdict
    if check is not None:
        done = "no batch" if check.batch is None else f"batch {check.batch}"
        said = "matches" if check.ok else "does not match"
        verdict += f"; the checkpoint (query {check.query}, {done} committed) {said}"
    summary = (
        f"checked {report.stores} stores, {report.versions} versions, {report.files} files "
        f"({report.bytes} bytes): {verdict}"
    )
    click.echo(_wrap(summary))
    lines = list(report.lines())
    if check is not None:
        lines += [f"CHECKPOINT {line}" for line in check.describe()]
        if check.in_flight is not None:
            lines.append(
                f"note: batch {check.in_flight} was planned and not committed when the query "
                "stopped: its restart plans it anew and runs it on a lineage of its own"
            )
        for op, parts in check.ahead:
            lines.append(
                f"note: operator {op!r} holds versions after batch {check.batch} in partitions "
                f"{list(parts)}: the checkpoint is older than its state (restored, copied or "
                "rolled back); its restart goes on on a lineage of its own"
            )
    for line in lines:
        click.echo(_wrap(line), err=True)


WIDTH = 80  # the columns verify's lines fit in


def _wrap(text: str) -> str:
    """``text`` in lines of at most :data:`WIDTH` columns, continued with two spaces."""
    return textwrap.fill(
        text, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )
