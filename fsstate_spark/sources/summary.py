"""Read-only summaries of the state a tiered query left on storage (for users and the demo).

Layout written by :mod:`fsstate_spark.tiered.lifecycle`::

    <state_uri>/<query id>/<operator name>/<partition>/manifests/<version>.json
    <state_uri>/<query id>/<operator name>/<partition>/data/*.parquet

Invariants:

* Nothing here writes: stores are opened at the newest committed version of the lineage
  readers read (:func:`fsstate.inspect.find_stores`: the one committed last, in the layout
  generation in force) only to read their manifest-level statistics, and closed again.
* Cost is two listings of the root plus one manifest read per partition store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fsstate import PartitionStore, StoreStats
from fsstate.inspect import find_stores
from fsstate.storage.fileio import FileIO


@dataclass
class StateSummary:
    """State of one query's operators on storage.

    Attributes:
        state_uri: the root that was summarized.
        files: number of files under the root (manifests, data and index files).
        bytes: their total size.
        stores: per (query id, operator, partition): stats of the newest committed version.
    """

    state_uri: str
    files: int = 0
    bytes: int = 0
    stores: dict[tuple[str, str, int], StoreStats] = field(default_factory=dict)

    def rows_by_table(self) -> dict[str, int]:
        """Rows on disk per state name, summed over partitions (includes tombstones)."""
        out: dict[str, int] = {}
        for stats in self.stores.values():
            for name, table in stats.tables.items():
                out[name] = out.get(name, 0) + table.disk_rows
        return out

    def format(self) -> str:
        """A few human-readable lines."""
        lines = [f"state under {self.state_uri}: {self.files} files, {self.bytes:,} bytes"]
        for (query, op, part), s in sorted(self.stores.items()):
            tables = ", ".join(
                f"{n}({t.kind}): {t.disk_rows} rows/{t.disk_bytes:,} B"
                for n, t in sorted(s.tables.items())
            )
            lines.append(
                f"  query {query[:8]} op {op} partition {part}: version {s.version}, "
                f"{s.disk_bytes:,} B on disk; {tables or 'no tables'}"
            )
        return "\n".join(lines)


def state_summary(
    state_uri: str, query_id: str | None = None, name: str | None = None
) -> StateSummary:
    """Summarize the state stored under ``state_uri``.

    Args:
        state_uri: the tiered processors' state root.
        query_id: only this query (default: every query found).
        name: only this operator name (default: every operator found).
    """
    fileio = FileIO(state_uri)
    summary = StateSummary(state_uri)
    for entry in fileio.list("", recursive=True):
        summary.files += 1
        summary.bytes += entry.size_bytes
    for ref in find_stores(fileio):
        query, op, part = ref.prefix, ref.operator, ref.partition
        if (query_id is not None and query != query_id) or (name is not None and op != name):
            continue
        root = f"{state_uri.rstrip('/')}/{query}" if query else state_uri
        store = PartitionStore.open(
            root, op, part, ref.latest, layout=ref.layout, branch=ref.branch
        )
        try:
            summary.stores[(query, op, part)] = store.stats()
        finally:
            store.close()
    return summary
