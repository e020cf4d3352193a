"""``fsstate stats --history N``: the last N versions of each store, from their summaries.

One row per (store, version): rows total, updated, removed, expired, bytes written and commit
time, read from the manifests' ``summary`` (:class:`fsstate.stats.VersionSummary`); a version
without one (written by an older fsstate, or with ``record_summary`` off) shows ``-``.

Invariants: reads only manifests (one GET per version shown), never writes.
"""

from __future__ import annotations

from typing import Any

from fsstate.cli.console import FitTable, rich_table
from fsstate.inspect.catalog import StoreRef
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_summaries

_FIELDS = ("rows_total", "rows_updated", "rows_removed", "rows_expired", "bytes_written")


def history_doc(fileio: FileIO, stores: list[StoreRef], n: int) -> list[dict[str, Any]]:
    """The last ``n`` versions of each store with their summaries (JSON-ready)."""
    doc = []
    for s in stores:
        versions = list(s.versions)[-n:] if n > 0 else []
        for v, summary in read_summaries(s.root(fileio), s.store_dir, versions, s.branch):
            row: dict[str, Any] = {
                "query": s.prefix,
                "operator": s.operator,
                "partition": s.partition,
                "version": v,
                "summary": None if summary is None else summary.to_json(),
            }
            doc.append(row)
    return doc


def history_table(root: str, doc: list[dict[str, Any]]) -> FitTable:
    """One row per store version (fits 80 columns)."""
    cols = ["operator", "part", "version", "rows", "updated", "removed", "expired"]
    cols += ["written", "commit ms"]
    rows = []
    for d in doc:
        s = d["summary"] or {}
        figures = [s.get(f, "-") if s else "-" for f in _FIELDS]
        ms = s.get("commit_ms")
        rows.append(
            [
                d["operator"],
                d["partition"],
                d["version"],
                *["-" if x is None else x for x in figures],
                "-" if ms is None else f"{ms:.1f}",
            ]
        )
    return rich_table(f"version history under {root}", cols, rows)
