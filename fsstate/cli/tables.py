"""The tables the ``fsstate`` commands print, built from the JSON documents they emit.

Invariants:

* A table shows only what the command's document holds (``--json`` prints the same facts), in
  the document's order; a missing query id (a store at the root) shows as ``-``.
* Tables are laid out by :func:`fsstate.cli.console.rich_table` for the width they are printed at:
  the query id (and, in tables of states or partitions, the operator) is a heading line when
  every row has the same one; query ids are shortened to a unique prefix (which ``--query``
  accepts) when space is short. Tables of stored rows (``show``,
  ``diff``) have no heading or id columns: their columns are the state's own.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fsstate.cli.console import FitTable, rich_table
from fsstate.inspect.verify import latest_text

__all__ = [
    "branches_table",
    "compact_table",
    "gc_tables",
    "list_table",
    "rows_table",
    "span",
    "stats_table",
]

# tables whose rows are states or partitions: one operator's name is a heading line too
_QUERY_AND_OPERATOR = ("query", "operator")


def span(versions: tuple[int, ...] | list[int]) -> str:
    """``first..last`` of sorted versions, or the one version."""
    return f"{versions[0]}..{versions[-1]}" if len(versions) > 1 else str(versions[0])


def list_table(root: str, doc: list[dict[str, Any]]) -> FitTable:
    """``list``: one row per (query, operator)."""
    rows = [
        [
            d["query"] or "-",
            d["operator"],
            len(d["partitions"]),
            d["min_version"],
            d["max_version"],
            d["retained_versions"],
            latest_text(d["latest_version"], d["behind"], d["ahead"]),
            d["branches"],
        ]
        for d in doc
    ]
    cols = [
        "query",
        "operator",
        "partitions",
        "min version",
        "max version",
        "retained",
        "latest",
        "branches",
    ]
    return rich_table(f"state under {root}", cols, rows)


def branches_table(root: str, doc: list[dict[str, Any]]) -> FitTable:
    """``branches``: one row per (query, operator, branch); the fork point as ``12 of trunk``
    (``-``: its first version is no longer retained)."""
    rows = [
        [
            d["query"] or "-",
            d["operator"],
            d["branch"],
            "-"
            if d["forked_at_version"] is None
            else f"{d['forked_at_version']} of {d['forked_from_branch'] or 'trunk'}",
            span([d["min_version"], d["max_version"]]),
            f"{len(d['partitions'])} of {d['operator_partitions']}",
        ]
        for d in doc
    ]
    cols = ["query", "operator", "branch", "forked at", "versions", "partitions"]
    return rich_table(f"branches under {root}", cols, rows, heading=_QUERY_AND_OPERATOR)


def stats_table(root: str, doc: list[dict[str, Any]], live_rows: bool) -> FitTable:
    """``stats``: one row per (query, operator, state)."""
    cols = [
        "query",
        "operator",
        "state",
        "kind",
        "ttl ms",
        "partitions",
        "version",
        "files",
        "stored rows",
        "bytes",
    ] + (["live rows"] if live_rows else [])
    rows = [
        [
            d["query"] or "-",
            d["operator"],
            d["state"],
            d["kind"],
            d["ttl_ms"],
            d["partitions"],
            span(d["versions"]),
            d["files"],
            d["stored_rows"],
            d["bytes"],
        ]
        + ([d["live_rows"]] if live_rows else [])
        for d in doc
    ]
    return rich_table(f"state under {root}", cols, rows, heading=_QUERY_AND_OPERATOR)


def rows_table(title: str, table: pa.Table) -> FitTable:
    """``show`` and ``diff``: the rows of ``table``, its columns as they are."""
    rows = [[r[c] for c in table.column_names] for r in table.to_pylist()]
    return rich_table(title, table.column_names, rows, heading=(), ids=())


def gc_tables(root: str, doc: list[dict[str, Any]], gens: list[dict[str, Any]]) -> list[FitTable]:
    """``gc``: a row per store, then (if any) a table of the (query, operator)s whose dead
    rescales' directories were deleted."""
    rows = [
        [
            d["query"] or "-",
            d["operator"],
            (d["layout"] + "/" if d["layout"] else "") + str(d["partition"]),
            d["versions_dropped"],
            d["files_deleted"],
            d["bytes_deleted"],
        ]
        for d in doc
    ]
    cols = ["query", "operator", "partition", "versions dropped", "files deleted", "bytes"]
    out = [rich_table(f"gc of {root}", cols, rows, heading=_QUERY_AND_OPERATOR)]
    if gens:
        grows = [[g["query"] or "-", g["operator"], g["dead_files"]] for g in gens]
        gcols = ["query", "operator", "files of dead rescales deleted"]
        out.append(rich_table(f"layout generations under {root}", gcols, grows))
    return out


def compact_table(root: str, doc: list[dict[str, Any]]) -> FitTable:
    """``compact``: one row per store compacted."""
    rows = [
        [
            d["query"] or "-",
            d["operator"],
            d["partition"],
            d["version"],
            d["runs_before"],
            d["runs_after"],
            d["bytes_written"],
        ]
        for d in doc
    ]
    cols = ["query", "operator", "partition", "new version", "runs before", "runs after", "bytes"]
    return rich_table(f"compaction of {root}", cols, rows, heading=_QUERY_AND_OPERATOR)
