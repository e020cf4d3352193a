"""Receipts of committed versions, from Spark's tasks to the driver, and the process's registry
of fsstate operators whose figures the driver can report.

A *receipt* is what a task knows once its epoch committed version ``b`` of a partition store:
the version's summary (the manifest's ``summary``, :class:`fsstate.stats.VersionSummary` as
JSON: rows, bytes, memory, spill, compaction), the whole commit's duration as the task timed
it (the manifest's publish included), the branch (the lineage the version is on) and the
query run whose task committed it (Spark's run id: a rolled-back, forked or restarted query
keeps its query id and re-runs batch ids under a new run id). Tasks add receipts to a Spark
accumulator the driver created (:class:`ReceiptParam`: ``tiered()`` makes one per processor on
a classic session; a flow's :class:`~fsstate_spark.operators.driver.Driver` puts the summary
into the receipts its stages already send, :data:`SUMMARY_KEY`, :data:`COMMIT_MS_KEY`), so the
driver learns a batch's figures without reading any manifest. Spark Connect has no
accumulators: there the figures are read from the manifests
(:mod:`fsstate_spark.metrics.progress`).

The registry (:func:`register_tiered`, :func:`register_flow`, :func:`registered`) lists what
this process created that may run in a query: each ``tiered()`` processor's state location,
name and accumulator, and each flow's driver, those with metrics on only (``metrics=False``:
nothing is recorded, so nothing is looked for or reported, not even from the manifests).
:mod:`fsstate_spark.metrics` reads it to find a query's fsstate operators; products only add
to it.

Invariants:

* Receipts are keyed ``query id -> batch -> (operator, partition) -> receipt`` and idempotent:
  a retried, speculative or recomputed task adds the same key with the same figures (the
  version it committed or adopted), so merging is ``dict.update``.
* A receipt belongs to (query id, run id, batch): a partition's receipt of batch ``b`` from a
  later run (the re-run of a rolled-back or forked query) replaces the earlier run's, and
  :func:`batch_receipts` given a run returns that run's receipts only (a receipt that names no
  run, a flow driver's, is any run's: a flow's re-run adopts the versions already committed,
  flows never branch). An earlier run's figures are then read from its lineage's manifests
  (:mod:`fsstate_spark.metrics.progress`), never taken from another run's receipt.
* Bounded: an accumulator's (and a driver's) receipts keep the newest :data:`KEEP_BATCHES`
  batches per query; the registry keeps the newest :data:`REGISTRY_MAX` entries.
* Thread-safe: Spark merges task updates on its accumulator server thread while the listener
  or the user reads on another: merges and snapshots hold one lock.
* No Spark import beyond the accumulator API; nothing here touches storage.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.accumulators import AccumulatorParam

from fsstate.storage.location import Location

KEEP_BATCHES = 100  # batches of receipts kept per query (accumulators, flow drivers)
REGISTRY_MAX = 256  # tiered() processors and flow drivers the registry keeps (newest)
SUMMARY_KEY = "_fsstate_summary"  # a flow receipt's (the version's meta) summary
COMMIT_MS_KEY = "_fsstate_commit_ms"  # ... and the task's commit time, publish included

# query id -> batch -> (operator, partition) -> receipt
Receipts = dict[str, dict[int, dict[tuple[str, int], dict[str, Any]]]]

_lock = threading.Lock()


def receipt(
    summary: Any, commit_ms: float, branch: str = "", run: str | None = None
) -> dict[str, Any]:
    """A receipt: the summary (a :class:`fsstate.stats.VersionSummary`, its JSON dict, or None
    when the version recorded none), the commit's duration in ms, the branch and the query run
    whose task committed the version (None: not known, then the receipt is any run's)."""
    if summary is not None and not isinstance(summary, Mapping):
        summary = summary.to_json()
    out = {"summary": summary, "commit_ms": round(float(commit_ms), 3), "branch": branch}
    if run:
        out["run"] = str(run)
    return out


def of_run(got: Mapping[str, Any], run: str | None) -> bool:
    """Whether receipt ``got`` may be ``run``'s: it names that run, or no run (or ``run`` is
    None: any run's)."""
    named = got.get("run")
    return run is None or not named or named == run


def merge_receipts(into: Receipts, more: Receipts, keep: int = KEEP_BATCHES) -> Receipts:
    """``more`` merged into ``into`` (in place), keeping the newest ``keep`` batches per
    query."""
    with _lock:
        for query, batches in more.items():
            have = into.setdefault(query, {})
            for batch, got in batches.items():
                have.setdefault(batch, {}).update(got)
            while len(have) > keep:
                del have[min(have)]
    return into


def batch_receipts(
    receipts: Receipts | None, query: str, batch: int, run: str | None = None
) -> dict[tuple[str, int], dict[str, Any]]:
    """A copy of one batch's receipts of ``query`` (empty if none): of run ``run`` only when
    given (:func:`of_run`)."""
    if not receipts:
        return {}
    with _lock:
        got = receipts.get(query, {}).get(batch, {})
        return {key: r for key, r in got.items() if of_run(r, run)}


class ReceiptParam(AccumulatorParam[Receipts]):
    """The accumulator of ``tiered()`` receipts (see the module docstring)."""

    def zero(self, value: Receipts) -> Receipts:
        return {}

    def addInPlace(self, value1: Receipts, value2: Receipts) -> Receipts:
        return merge_receipts(value1, value2)


def new_accumulator() -> Any:
    """A receipt accumulator of the active classic SparkContext; None on Spark Connect or
    without a running SparkContext (then the figures come from the manifests)."""
    from fsstate_spark.pyspark.session import active_spark_context

    sc = active_spark_context()
    if sc is None:
        return None
    try:
        return sc.accumulator({}, ReceiptParam())
    except Exception:  # a stopped context: no receipts, the manifests tell
        return None


@dataclass(frozen=True)
class TieredEntry:
    """A ``tiered()`` processor this process created: where its queries' state lives, its
    name and its receipt accumulator (None: Spark Connect, or metrics off)."""

    state_uri: str
    location: Location
    name: str
    accumulator: Any = None

    def receipts(self) -> Receipts | None:
        """The accumulator's receipts (None without one)."""
        if self.accumulator is None:
            return None
        return self.accumulator.value  # type: ignore[no-any-return]


_tiered: list[TieredEntry] = []
_flows: list[Any] = []  # fsstate_spark.operators.driver.Driver (this layer cannot name it)


def register_tiered(entry: TieredEntry) -> None:
    """Remember a ``tiered()`` processor made in this process."""
    with _lock:
        _tiered.append(entry)
        del _tiered[:-REGISTRY_MAX]


def register_flow(driver: Any) -> None:
    """Remember a flow's driver made in this process."""
    with _lock:
        if not any(d is driver for d in _flows):
            _flows.append(driver)
        del _flows[:-REGISTRY_MAX]


def registered() -> tuple[list[TieredEntry], list[Any]]:
    """The ``tiered()`` processors and flow drivers made in this process, oldest first."""
    with _lock:
        return list(_tiered), list(_flows)
