"""The ``fsstate-spark`` command line: steps on a stopped Spark query's state that need Spark.

``python -m fsstate_spark --help`` or the ``fsstate-spark`` console script (``pip install
'fsstate[spark,cli]'``). ``fork CHECKPOINT TARGET [--batch N]`` and ``rollback CHECKPOINT
--batch N`` copy or cut a stopped query's checkpoint at a committed batch
(:mod:`fsstate_spark.fork`; no Spark session). ``rescale CHECKPOINT PARTITIONS`` changes the
partition count of a stopped ``tiered()`` query
(:func:`fsstate_spark.tiered.query_rescale.rescale_query`): Spark's checkpoint and fsstate's
state together, so the restarted query continues exactly. On a
cluster, run it where the query's driver runs, with the same Spark settings (``--conf``, or
under ``spark-submit`` with this module's file as the application). ``watch LOCATION`` shows
each operator's newest committed versions, live (:mod:`fsstate_spark.cli_watch`: storage only,
no Spark session).

Invariants:

* The group, its options, errors, exit codes and progress are the ``fsstate`` command line's
  (:func:`fsstate.cli.console.command_group`): one line on stderr and exit code 2 for any
  error, a progress bar on a terminal, ``--json`` for scripts; ``--json``, ``-o`` and
  ``--conf`` before the command name or after it; ``-o`` refused where every location the
  command names is a local path.
* The SparkSession is the active one (tests, ``spark-submit``) or one built from ``--conf``
  settings; the command never stops a session it did not build.
"""

from __future__ import annotations

import logging
from typing import Any

try:
    import click
except ImportError as exc:  # pragma: no cover - the cli extra is missing
    raise SystemExit(
        f"fsstate-spark's command line needs click and rich ({exc}): pip install 'fsstate[cli]'"
    ) from None

from pyspark.sql import SparkSession

from fsstate.cli.console import (
    CommandEnv,
    at_least,
    command_group,
    debug_to_stderr,
    option_pairs,
    rich_table,
)
from fsstate.store.rescale import RescaleProgress
from fsstate_spark.cli_watch import watch
from fsstate_spark.fork import CheckpointCut, fork_query, rollback_query
from fsstate_spark.repair import repair_query
from fsstate_spark.tiered.query_rescale import rescale_query
from fsstate_spark.tiered.settings import resolve_config

__all__ = ["cli", "main"]

log = logging.getLogger("fsstate_spark")


class _SparkEnv(CommandEnv):
    def __init__(self, as_json: bool, options: dict[str, str], conf: dict[str, str]) -> None:
        super().__init__(as_json, options)
        self.conf = conf

    def session(self) -> tuple[SparkSession, bool]:
        """The active session, or one built from ``--conf`` (True: built here)."""
        active = SparkSession.getActiveSession()
        if active is not None:
            for key, value in self.conf.items():
                active.conf.set(key, value)
            return active, False
        builder = SparkSession.builder.appName("fsstate-spark")
        for key, value in self.conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate(), True


@command_group(
    "Object store setting (as tiered(storage_options=)) of the checkpoint and state locations "
    "the command names, repeatable.",
    click.option(
        "--conf",
        "confs",
        multiple=True,
        metavar="KEY=VALUE",
        help="Spark setting of the session the command runs (as spark-submit --conf), repeatable.",
    ),
)
def cli(
    ctx: click.Context, as_json: bool, debug: bool, options: tuple[str, ...], confs: tuple[str, ...]
) -> None:
    """Steps on a Spark streaming query's checkpoint and fsstate state.

    fork and rollback copy or cut a stopped query's checkpoint at a committed batch (no Spark
    session); rescale changes a stopped tiered() query's partition count (with Spark, as the
    query's driver runs it: --conf); watch shows each operator's newest versions, live.
    --json, -o and --conf work before the command name or after it.
    """
    if debug:
        debug_to_stderr(ctx, ("fsstate", "fsstate_spark"))
    ctx.obj = _SparkEnv(as_json, option_pairs(options), option_pairs(confs, "--conf"))


@cli.command()
@click.argument("checkpoint")
@click.argument("partitions", type=int, callback=at_least(1, "a partition count"))
@click.option("--state-uri", help="The query's tiered() state_uri (default: as tiered() finds it).")
@click.pass_obj
def rescale(env: _SparkEnv, checkpoint: str, partitions: int, state_uri: str | None) -> None:
    """Change a stopped tiered() query's partition count to PARTITIONS.

    CHECKPOINT is the query's checkpointLocation. Spark's checkpoint is repartitioned with
    Spark's own offline repartition and the query's tiered state moved to match; start the
    query again afterwards. Safe to run again if it was interrupted.
    """
    env.check_options(state_uri)  # None: the state_uri tiered() resolves, checked there
    spark, built = env.session()
    extra: dict[str, Any] = {"storage_options": env.options} if env.options else {}
    try:
        with env.progress("rescaling fsstate's state (old partitions)", None) as step:

            def progress(p: RescaleProgress) -> None:
                step(1)

            result = rescale_query(
                spark, checkpoint, partitions, state_uri=state_uri, progress=progress, **extra
            )
    finally:
        if built:
            spark.stop()
    doc = {
        "query": result.query_id,
        "previous_partitions": result.previous,
        "partitions": result.partitions,
        "batch": result.batch,
        "spark_repartitioned": result.spark_repartitioned,
        "operators": [
            {"operator": r.operator, "rows": r.rows, "generation": r.layout.generation}
            for r in result.operators
        ],
    }
    rows = [
        [r.operator, r.previous.partitions, r.layout.partitions, r.rows] for r in result.operators
    ]
    title = f"query {result.query_id}: {result.previous} -> {result.partitions} partitions" + (
        f" at batch {result.batch}" if result.batch is not None else " (nothing to do)"
    )
    env.emit(doc, rich_table(title, ["operator", "from", "to", "rows moved"], rows))


def _cut_doc(cut: CheckpointCut, what: str) -> tuple[dict[str, Any], Any]:
    doc = {
        "checkpoint": cut.checkpoint,
        "query": cut.query_id,
        "batch": cut.batch,
        "restarts_at": cut.batch + 1,
        "files_cut": cut.removed,
        "files_copied": cut.copied,
    }
    title = f"{what} {cut.checkpoint}: query {cut.query_id} restarts at batch {cut.batch + 1}"
    rows = [[cut.batch, cut.removed, cut.copied]]
    return doc, rich_table(title, ["kept to batch", "files cut", "files copied"], rows)


@cli.command()
@click.argument("checkpoint")
@click.argument("target")
@click.option(
    "--batch",
    type=int,
    callback=at_least(0, "a committed batch id"),
    help="Committed batch to fork at (default: the last).",
)
@click.pass_obj
def fork(env: _SparkEnv, checkpoint: str, target: str, batch: int | None) -> None:
    """Copy a stopped query's CHECKPOINT up to a committed batch to TARGET.

    A query started on TARGET (the same code) continues from that batch with state of its
    own: fsstate's state branches from the original's in O(metadata) at its first batch.
    TARGET is a new location: empty, neither inside CHECKPOINT nor holding it.
    """
    env.check_options(checkpoint, target)
    opts = env.options or None
    cut = fork_query(checkpoint, target, batch=batch, storage_options=opts)
    env.emit(*_cut_doc(cut, "forked to"))


@cli.command()
@click.argument("checkpoint")
@click.option(
    "--batch",
    type=int,
    required=True,
    callback=at_least(0, "a committed batch id"),
    help="Committed batch to go back to.",
)
@click.pass_obj
def rollback(env: _SparkEnv, checkpoint: str, batch: int) -> None:
    """Roll a stopped query back to a committed batch: it restarts at the next one.

    Spark's checkpoint is cut after the batch; fsstate's state follows (the re-run batches
    go on on a branch of their own). A sink that remembers batch ids (a file sink's
    _spark_metadata) must be rolled back or replaced as well.
    """
    env.check_options(checkpoint)
    cut = rollback_query(checkpoint, batch, storage_options=env.options or None)
    env.emit(*_cut_doc(cut, "rolled back"))


@cli.command()
@click.argument("checkpoint")
@click.option(
    "--state-uri",
    help="The query's tiered() state_uri (default: as tiered() finds it, from Spark's settings).",
)
@click.option("--apply", is_flag=True, help="Roll the query back (default: only say what to do).")
@click.pass_obj
def repair(env: _SparkEnv, checkpoint: str, state_uri: str | None, apply: bool) -> None:
    """Roll a stopped tiered() query back to its newest batch whose state is whole.

    Looks at CHECKPOINT's committed batches, newest first, for the first whose state is in
    every partition of every tiered() operator, on the lineage the checkpoint runs on, with
    every file present; says which and why the later ones are not (a dry run). With --apply,
    cuts the checkpoint after that batch (as rollback does): the restarted query re-runs the
    later batches from whole state. Never writes fsstate's state.
    """
    env.check_options(checkpoint, state_uri)
    if state_uri is None:
        spark, built = env.session()
        try:
            state_uri = resolve_config("tiered", None, None, None, {}).state_uri
        finally:
            if built:
                spark.stop()
    got = repair_query(checkpoint, state_uri, apply=apply, storage_options=env.options or None)
    if env.as_json:
        env.emit(got.to_doc(), None)
        return
    for s in got.broken:
        click.echo(f"batch {s.batch}: {s.describe()}", err=True)
    if not got.needed:
        click.echo(f"batch {got.committed}, the last committed, is whole: nothing to repair")
    elif got.applied is not None:
        click.echo(
            f"rolled back to batch {got.batch}: the query restarts at {got.batch + 1} and "
            f"re-runs the batches to {got.committed} on a lineage of its own"
        )
    else:
        click.echo(
            f"batch {got.batch} is the newest whole batch: `fsstate-spark repair {checkpoint} "
            "--apply` rolls the query back to it (the batches after it re-run)"
        )


cli.add_command(watch)


def main() -> None:
    """Entry point of the ``fsstate-spark`` console script and ``python -m fsstate_spark``."""
    cli(prog_name="fsstate-spark")
