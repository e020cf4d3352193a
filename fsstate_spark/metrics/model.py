"""What fsstate reports per batch and per operator, in the shape of Spark's progress.

A committed version of a partition store carries a summary of what its epoch did (the
manifest's ``summary``, :mod:`fsstate.storage.manifest`: rows total, updated, removed and
expired, bytes and files written and read, memory, spill, compaction, commit time, the
version's files). This module aggregates the summaries of one batch's partitions into one
:class:`OperatorProgress` per operator, the shape of Spark's ``StateOperatorProgress`` (its
field names where they mean the same thing, camelCase in JSON; fsstate's own figures in
``customMetrics``; the largest partitions by rows), and the operators of a batch into a
:class:`BatchProgress`.

Invariants:

* Plain data, no Spark: built on the driver from task receipts or manifests
  (:mod:`fsstate_spark.metrics.progress`), read by the listener, the Prometheus exporter and
  ``fsstate-spark watch``.
* Aggregation follows Spark's for its store instances: counts, bytes and times are summed over
  partitions (``commitTimeMs`` included), except figures of the version as a whole that are
  not additive across time (``versionsRetained``: the largest) and the per-partition maxima
  fsstate adds (``...Max``), which show skew.
* A partition that reported nothing for the batch (no receipt and no manifest yet) is counted
  in ``numStateStoreInstances`` but not in ``partitionsReported``; its figures are absent, not
  zero.
* ``to_json`` of every class gives JSON-ready dicts (ints, floats, strings, lists, dicts).
* A batch is identified by (query id, run id, batch id) (:attr:`BatchProgress.key`), its
  versions' lineage by their branches (:attr:`OperatorProgress.branches`): a rolled-back,
  forked or restarted query keeps its query id and runs a batch id again under a new run id,
  on a branch of its own when the state went on past the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fsstate.storage.manifest import Manifest
from fsstate.store.identity import WRITER_META
from fsstate.store.record import Writer

TOP_PARTITIONS = 5  # partitions listed per operator, largest by rows first

# summary key (engine, snake_case) -> customMetrics name (Spark's camelCase), summed
_SUMMED_CUSTOM = {
    "rows_expired": "rowsExpired",
    "bytes_written": "bytesWritten",
    "files_written": "filesWritten",
    "bytes_read": "bytesRead",
    "files_read": "filesRead",
    "memory_hot_bytes": "memoryHotBytes",
    "memory_sealed_bytes": "memorySealedBytes",
    "bytes_spilled": "bytesSpilled",
    "spills": "spills",
    "compactions": "compactions",
    "disk_bytes": "diskBytes",
    "files_total": "filesTotal",
}


def _num(summary: Mapping[str, Any], key: str) -> int:
    value = summary.get(key)
    return int(value) if isinstance(value, int | float) else 0


@dataclass(frozen=True)
class PartitionMetrics:
    """One partition's committed version of the batch.

    Attributes:
        partition: the state partition.
        version: the version committed (the batch id for tiered() and flows).
        summary: the version's summary (the manifest's ``summary`` JSON object).
        commit_ms: the whole commit, the manifest's publish included, when the task's receipt
            says (None when the figures come from the manifest: its ``commit_ms`` then).
        branch: the branch the version is on ("" for the trunk).
        run: the query run that committed the version, when known (the receipt's run, the
            manifest's writer run).
    """

    partition: int
    version: int
    summary: Mapping[str, Any]
    commit_ms: float | None = None
    branch: str = ""
    run: str | None = None

    @property
    def rows_total(self) -> int:
        """Live rows of the partition at this version."""
        return _num(self.summary, "rows_total")

    @property
    def commit_time_ms(self) -> float:
        """The commit's duration: the receipt's when known, else the summary's."""
        if self.commit_ms is not None:
            return float(self.commit_ms)
        value = self.summary.get("commit_ms")
        return float(value) if isinstance(value, int | float) else 0.0

    def to_json(self) -> dict[str, Any]:
        """The partition's figures (``partition``, ``version``, ``numRowsTotal``,
        ``memoryUsedBytes``, ``diskBytes``, ``commitTimeMs``)."""
        return {
            "partition": self.partition,
            "version": self.version,
            "numRowsTotal": self.rows_total,
            "memoryUsedBytes": _num(self.summary, "memory_bytes"),
            "diskBytes": _num(self.summary, "disk_bytes"),
            "commitTimeMs": round(self.commit_time_ms, 3),
        }


@dataclass(frozen=True)
class OperatorProgress:
    """One fsstate operator in one batch, shaped as Spark's ``StateOperatorProgress``.

    Attributes:
        operator_name: fsstate's name of the operator (a tiered() store name, a flow stage).
        product: ``"tiered"`` or ``"flow"``.
        batch_id: the batch.
        num_partitions: the operator's state partitions (Spark: ``numShufflePartitions`` and
            ``numStateStoreInstances``).
        partitions: the partitions that reported the batch.
    """

    operator_name: str
    product: str
    batch_id: int
    num_partitions: int
    partitions: tuple[PartitionMetrics, ...] = field(default_factory=tuple)

    @property
    def partitions_reported(self) -> int:
        """Partitions whose figures are known for the batch."""
        return len(self.partitions)

    def total(self, key: str) -> int:
        """A summary figure summed over the reporting partitions."""
        return sum(_num(p.summary, key) for p in self.partitions)

    @property
    def num_rows_total(self) -> int:
        """Live rows over all reporting partitions."""
        return self.total("rows_total")

    @property
    def commit_time_ms(self) -> float:
        """Commit time summed over partitions (Spark sums its store instances' too)."""
        return sum(p.commit_time_ms for p in self.partitions)

    @property
    def branches(self) -> tuple[str, ...]:
        """The branches the reporting partitions' versions are on, sorted ("" for the trunk):
        the lineage the figures are of."""
        return tuple(sorted({p.branch for p in self.partitions}))

    def top_partitions(self, k: int = TOP_PARTITIONS) -> list[PartitionMetrics]:
        """The ``k`` largest partitions by rows (ties: lower partition first)."""
        return sorted(self.partitions, key=lambda p: (-p.rows_total, p.partition))[:k]

    def custom_metrics(self) -> dict[str, float | int]:
        """fsstate's figures beyond Spark's fields (camelCase names)."""
        out: dict[str, float | int] = {n: self.total(k) for k, n in _SUMMED_CUSTOM.items()}
        parts = self.partitions
        out["versionsRetained"] = max(
            (_num(p.summary, "versions_retained") for p in parts), default=0
        )
        out["rowsTotalMax"] = max((p.rows_total for p in parts), default=0)
        out["commitTimeMsMax"] = round(max((p.commit_time_ms for p in parts), default=0.0), 3)
        out["partitionsReported"] = len(parts)
        return out

    def to_json(self) -> dict[str, Any]:
        """Spark's ``StateOperatorProgress`` JSON fields, plus ``product``, ``batchId``,
        ``branches`` (:attr:`branches`) and ``topPartitions``."""
        return {
            "operatorName": self.operator_name,
            "product": self.product,
            "batchId": self.batch_id,
            "numRowsTotal": self.num_rows_total,
            "numRowsUpdated": self.total("rows_updated"),
            "numRowsRemoved": self.total("rows_removed"),
            "commitTimeMs": round(self.commit_time_ms, 3),
            "memoryUsedBytes": self.total("memory_bytes"),
            "numShufflePartitions": self.num_partitions,
            "numStateStoreInstances": self.num_partitions,
            "customMetrics": self.custom_metrics(),
            "branches": list(self.branches),
            "topPartitions": [p.to_json() for p in self.top_partitions()],
        }


@dataclass(frozen=True)
class BatchProgress:
    """fsstate's operators of one query in one batch.

    Attributes:
        query_id: the query's id (stable across restarts).
        run_id: the query run's id, when known.
        name: the query's name, when it has one.
        batch_id: the batch.
        timestamp_ms: when the figures were gathered (driver clock).
        operators: one entry per fsstate operator of the query.
        manifest_reads: manifests the driver read for the figures (partitions whose task gave
            no receipt: always on Spark Connect).
    """

    query_id: str
    run_id: str | None
    name: str | None
    batch_id: int
    timestamp_ms: int
    operators: tuple[OperatorProgress, ...]
    manifest_reads: int = 0

    @property
    def key(self) -> tuple[str, str | None, int]:
        """(query id, run id, batch id): what tells this batch from the same batch id run
        again by another run of the query (a roll-back, a fork, a restart)."""
        return (self.query_id, self.run_id, self.batch_id)

    def operator(self, name: str) -> OperatorProgress:
        """The operator of that name (KeyError naming the operators there are)."""
        for op in self.operators:
            if op.operator_name == name:
                return op
        raise KeyError(
            f"no fsstate operator {name!r} in batch {self.batch_id} "
            f"(operators: {sorted(o.operator_name for o in self.operators)})"
        )

    def to_json(self) -> dict[str, Any]:
        """One JSON object: ``id``, ``runId``, ``name``, ``batchId``, ``timestamp`` (ms),
        ``manifestReads`` and ``stateOperators`` (Spark's key for its own)."""
        return {
            "id": self.query_id,
            "runId": self.run_id,
            "name": self.name,
            "batchId": self.batch_id,
            "timestamp": self.timestamp_ms,
            "manifestReads": self.manifest_reads,
            "stateOperators": [op.to_json() for op in self.operators],
        }


def writer_run(manifest: Manifest) -> str | None:
    """The query run that committed a version (its ``writer`` meta; None: not recorded)."""
    writer = Writer.from_meta(manifest.meta.get(WRITER_META))
    return None if writer is None else writer.run


def operator_progress(
    operator_name: str,
    product: str,
    batch_id: int,
    num_partitions: int,
    partitions: Sequence[PartitionMetrics],
) -> OperatorProgress:
    """An operator's progress from its partitions' figures (ordered by partition)."""
    ordered = tuple(sorted(partitions, key=lambda p: p.partition))
    return OperatorProgress(operator_name, product, batch_id, num_partitions, ordered)
