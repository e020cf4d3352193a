"""A ``tiered()`` query run, rolled back, forked and restarted in one driver, with a listener
writing JSON lines and feeding a Prometheus exporter: :class:`Reruns`
(``tests/fsstate_spark/metrics/test_reruns.py``).

Every run of a checkpoint has the same query id and a new run id; a re-run batch goes on a
branch of the state's stores (:mod:`fsstate_spark.tiered.lineage`). :func:`lineage_truth` reads,
per partition, the version of a batch its run committed (the trunk's or a branch's manifest
whose writer is the run), so the figures reported are checked against storage, never against
a summary the code under test chose.

Invariants: deterministic input (one JSON file per batch, ``maxFilesPerTrigger``, an
``availableNow`` trigger: a run ends by itself once the input is read); each run's query
terminates before the next starts; the listener is removed by :meth:`Reruns.close`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from devkit.spark_local import write_batches
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.store.identity import store_dir_for
from fsstate.store.lineage import list_branches
from fsstate_spark import tiered
from fsstate_spark.metrics import BatchProgress, listen
from fsstate_spark.metrics.prometheus import PrometheusExporter
from tests.support.processors import SINK_SCHEMA, KitchenSink

OPERATOR = "KitchenSink"
PARTITIONS = 2  # the suite's session: spark.sql.shuffle.partitions
# three files, one batch each; then MORE, read two files per batch by a re-run
BATCHES = [
    [{"k": "a", "v": 1}, {"k": "b", "v": 1}],
    [{"k": "a", "v": 2}],
    [{"k": "c", "v": 3}],
]
MORE = [
    [{"k": f"m{i}", "v": 4} for i in range(6)],
    [{"k": f"n{i}", "v": 6} for i in range(9)],
]
LINES_TIMEOUT_S = 30.0


class Reruns:
    """Runs of ``tiered(KitchenSink())`` queries over one input directory, state root and
    listener (JSON lines at :attr:`lines`, every report in :attr:`reported`, and
    :attr:`exporter`, fed through a lambda so that a run's termination does not make the
    listener drop the query's series from it)."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.input = root / "input"
        self.state = str(root / "state")
        self.lines = root / "progress.jsonl"
        self.reported: list[BatchProgress] = []
        self.exporter = PrometheusExporter()
        self.ended = _Ended()
        self.listener = listen(
            spark,
            self.lines,
            sinks=[self.reported.append, lambda p: self.exporter(p), self.ended],
        )
        write_batches(self.input, BATCHES)

    def checkpoint(self, name: str) -> str:
        """The checkpoint location of the query called ``name``."""
        return str(self.root / name / "checkpoint")

    def add_input(self, batches: list[list[dict[str, Any]]]) -> None:
        """More input files (after those written so far)."""
        write_batches(self.input, batches)

    def run(self, name: str, files_per_trigger: int = 1) -> Any:
        """Run the query of checkpoint ``name`` over the input not read yet, until it ends by
        itself; the (terminated) StreamingQuery."""
        proc = tiered(KitchenSink(), state_uri=self.state)
        frame = (
            self.spark.readStream.schema("k STRING, v BIGINT")
            .option("maxFilesPerTrigger", files_per_trigger)
            .json(str(self.input))
        )
        out = frame.groupBy("k").transformWithStateInPandas(proc, SINK_SCHEMA, "Update", "None")
        query = (
            out.writeStream.format("noop")
            .option("checkpointLocation", self.checkpoint(name))
            .trigger(availableNow=True)
            .start()
        )
        runs = self.ended.count(str(query.id))
        try:
            assert query.awaitTermination(180), f"query {name} did not end"
        finally:
            query.stop()
        assert query.exception() is None, query.exception()
        # the bus delivers in order: once the termination is, so are the run's batches
        assert self.ended.wait(str(query.id), runs + 1, LINES_TIMEOUT_S), "no termination event"
        return query

    def lines_of(self, run_id: str) -> list[dict[str, Any]]:
        """The listener's JSON lines of run ``run_id`` (complete once :meth:`run` returned:
        it waits for the run's termination event, which the bus delivers after the run's
        progress)."""
        text = self.lines.read_text() if self.lines.exists() else ""
        return [d for d in map(json.loads, text.splitlines()) if d["runId"] == run_id]

    def sample(self, name: str, query_id: str) -> float | None:
        """The exporter's value of metric ``name`` for the query's operator."""
        labels = {
            "query": query_id,
            "query_id": query_id,
            "operator": OPERATOR,
            "product": "tiered",
        }
        return self.exporter.registry.get_sample_value(name, labels)

    def close(self) -> None:
        """Remove the listener and close the exporter."""
        self.spark.streams.removeListener(self.listener)
        self.exporter.close()


class _Ended:
    """A listener sink that counts the terminations of each query id the listener saw (the
    listener tells every sink with a ``forget`` method)."""

    def __init__(self) -> None:
        self._ended: list[str] = []
        self._changed = threading.Condition()

    def __call__(self, progress: BatchProgress) -> None:
        """No figures kept."""

    def forget(self, query_id: str) -> None:
        """A run of ``query_id`` terminated."""
        with self._changed:
            self._ended.append(query_id)
            self._changed.notify_all()

    def count(self, query_id: str) -> int:
        """Terminations of ``query_id`` seen so far."""
        with self._changed:
            return self._ended.count(query_id)

    def wait(self, query_id: str, count: int, timeout_s: float) -> bool:
        """Until ``count`` terminations of ``query_id`` were seen (False after
        ``timeout_s``)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._ended.count(query_id) >= count, timeout_s)


def lineage_truth(state: str, query_id: str, batch: int, run_id: str) -> dict[int, Any]:
    """Per partition: (branch, summary JSON) of the version ``batch`` that run ``run_id``
    committed (the trunk's or a branch's manifest whose ``meta["writer"]["run"]`` is the run).

    Raises:
        AssertionError: a partition has no such version.
    """
    fileio = FileIO(str(Path(state) / query_id))
    out: dict[int, Any] = {}
    for p in range(PARTITIONS):
        store_dir = store_dir_for(OPERATOR, p)
        for branch in ["", *list_branches(fileio, store_dir)]:
            try:
                manifest = read_manifest(fileio, store_dir, batch, branch)
            except Exception:
                continue
            if manifest.meta.get("writer", {}).get("run") == run_id:
                assert manifest.summary is not None
                out[p] = (branch, manifest.summary.to_json())
        assert p in out, f"partition {p}: no version {batch} committed by run {run_id}"
    return out


def truth_totals(truth: dict[int, Any]) -> dict[str, Any]:
    """What the figures of an operator must be for the versions of :func:`lineage_truth`."""
    summaries = [s for _, s in truth.values()]
    return {
        "branches": sorted({b for b, _ in truth.values()}),
        "numRowsTotal": sum(s["rows_total"] or 0 for s in summaries),
        "numRowsUpdated": sum(s["rows_updated"] for s in summaries),
        "numRowsRemoved": sum(s["rows_removed"] for s in summaries),
        "diskBytes": sum(s["disk_bytes"] for s in summaries),
    }


def figures(op_json: dict[str, Any]) -> dict[str, Any]:
    """The figures of an operator's JSON (``OperatorProgress.to_json``) that
    :func:`truth_totals` gives."""
    return {
        "branches": op_json["branches"],
        "numRowsTotal": op_json["numRowsTotal"],
        "numRowsUpdated": op_json["numRowsUpdated"],
        "numRowsRemoved": op_json["numRowsRemoved"],
        "diskBytes": op_json["customMetrics"]["diskBytes"],
    }
