"""``fsstate-spark watch``: a live table of each operator's newest committed versions.

Registered on :data:`fsstate_spark.cli.cli`; reads storage only
(:mod:`fsstate_spark.metrics.watch`), so it runs anywhere the state is reachable, without the
query's driver and without a SparkSession.

Invariants:

* The table fits 80 columns (:func:`fsstate.cli.console.rich_table`): the query id is a heading
  line when there is one query; bytes in binary units (``12.5Mi``) and counts in decimal ones
  (``1.23M``), 3 significant digits (``--json`` has the exact figures).
* ``--once`` prints one table (or, with ``--json``, one JSON document) and exits; otherwise the
  table is redrawn every ``--interval`` seconds until interrupted (Ctrl-C exits 0), and
  ``--json`` prints one JSON line per refresh.
* Errors are typed fsstate errors shown as one line (:class:`fsstate.cli.console.ErrorsAsOneLine`).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import click
from rich.live import Live

from fsstate.cli.console import Command, CommandEnv, FitTable, rich_table
from fsstate.inspect.checkpoint import checkpoint_uri, read_checkpoint
from fsstate_spark.metrics.watch import OperatorView, WatchTarget, now_ms, read_views, resolve

__all__ = ["watch"]

COLUMNS = [
    "query",
    "operator",
    "rows",
    "upd",
    "del",
    "exp",
    "mem",
    "disk",
    "wrote",
    "commit ms",
    "ver",
    "lag",
]
LEGEND = (
    "rows: live rows; upd, del, exp: rows updated, deleted, expired by the newest batch; mem, "
    "disk: memory and data files; wrote: bytes written by the newest batch; commit ms: its "
    "commits summed; ver: newest version (* on a branch); lag: batches behind"
)


def _scaled(value: float, units: tuple[str, ...], step: int) -> str:
    """3 significant digits with the unit of ``value``'s magnitude (``12.5Ki``, ``1.23M``)."""
    if value < step:
        return f"{value:.0f}"
    for unit in units:
        value /= step
        if value < step or unit == units[-1]:
            text = f"{value:.3g}"
            return (f"{value:.0f}" if "e" in text else text) + unit
    raise AssertionError("unreachable")


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units (``900``, ``12.5Ki``, ``3.1Gi``)."""
    return _scaled(float(n), ("Ki", "Mi", "Gi", "Ti"), 1024)


def human_count(n: int) -> str:
    """A count in decimal units (``999``, ``12.3k``, ``1.23M``)."""
    return _scaled(float(n), ("k", "M", "G", "T"), 1000)


def watch_doc(target: WatchTarget, views: list[OperatorView], at_ms: int) -> dict[str, Any]:
    """The JSON document of one refresh."""
    ckpt = target.checkpoint
    return {
        "location": target.describe(),
        "timestamp": at_ms,
        "committedBatch": None if ckpt is None else ckpt.committed,
        "operators": [v.to_json(at_ms) for v in views],
    }


def watch_table(target: WatchTarget, views: list[OperatorView], at_ms: int) -> FitTable:
    """One row per operator (see :data:`COLUMNS`)."""
    rows = []
    for v in views:
        p = v.progress
        rows.append(
            [
                v.query or "-",
                v.progress.operator_name,
                human_count(p.num_rows_total),
                human_count(p.total("rows_updated")),
                human_count(p.total("rows_removed")),
                human_count(p.total("rows_expired")),
                human_bytes(p.total("memory_bytes")),
                human_bytes(p.total("disk_bytes")),
                human_bytes(p.total("bytes_written")),
                f"{p.commit_time_ms:.0f}",
                str(v.latest) + ("*" if any(v.branches) else ""),
                v.lag,
            ]
        )
    clock = datetime.fromtimestamp(at_ms / 1000).strftime("%H:%M:%S")
    ckpt = target.checkpoint
    title = f"fsstate state of {target.describe()} at {clock}" + (
        f" (batch {ckpt.committed} committed)"
        if ckpt is not None and ckpt.committed is not None
        else ""
    )
    return rich_table(f"{title}\n{LEGEND}", COLUMNS, rows, heading=("query",), ids=("query",))


def _refresh(target: WatchTarget) -> tuple[dict[str, Any], FitTable]:
    if target.checkpoint is not None:  # the commit log moves on while the query runs
        target = WatchTarget(target.states, read_checkpoint(target.checkpoint.fileio))
    views = read_views(target)
    at = now_ms()
    return watch_doc(target, views, at), watch_table(target, views, at)


@click.command(cls=Command)
@click.argument("location")
@click.option(
    "--state-uri",
    help="The state_uri of the query whose checkpoint LOCATION is (default: <LOCATION>/fsstate, "
    "then <LOCATION>/../fsstate).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=5.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--once", is_flag=True, help="Print the table once and exit.")
@click.pass_obj
def watch(
    env: CommandEnv, location: str, state_uri: str | None, interval: float, once: bool
) -> None:
    """Show each operator's newest committed versions, refreshed every --interval seconds.

    LOCATION is a query's checkpointLocation (its state: --state-uri, else where tiered() and
    the flow driver put it by default) or a state root. Per operator: live rows, the newest
    batch's rows updated, removed and expired, memory, disk, bytes written and commit time
    (summed over partitions), the newest version (* when on a branch) and the lag in batches.
    Reads the state's manifests only: no Spark session, no driver needed.
    """
    env.check_options(checkpoint_uri(location), state_uri)
    target = resolve(location, state_uri=state_uri, options=env.options)
    if once:
        env.emit(*_refresh(target))
        return
    if env.as_json:
        _loop_json(env, target, interval)
        return
    try:
        with Live(console=env.out, auto_refresh=False, transient=False) as live:
            while True:
                _, table = _refresh(target)
                live.update(table, refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        return


def _loop_json(env: CommandEnv, target: WatchTarget, interval: float) -> None:
    try:
        while True:
            doc, _ = _refresh(target)
            click.echo(json.dumps(doc, default=str), nl=True)
            time.sleep(interval)
    except KeyboardInterrupt:
        return
