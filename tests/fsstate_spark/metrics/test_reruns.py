"""Metrics across re-runs (issue 66, item 10): a batch id run again in the same driver by a
rolled-back or forked ``tiered()`` query (the same query id, a new run id, its state on a
branch) gets a JSON line of its own, a Prometheus update and ``progress()`` of the re-run's
figures, read from the run's receipts or, without them, from the versions of the lineage the
run committed (never the trunk's of the same batch id); a restart that ran no batch reports
none. The figures are checked against the manifests of each run's own versions
(:func:`tests.support.metrics_reruns.lineage_truth`).

The tests without Spark check the keying alone: the listener's, the exporter's and
``progress()``'s choice of the batch a run executed.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import SparkSession

from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.epoch import StoreAddress, begin_epoch
from fsstate.store.lineage import branch_for
from fsstate.store.pool import StorePool
from fsstate.store.record import EpochRecord, Writer
from fsstate_spark import fork_query, rollback_query
from fsstate_spark.metrics import BatchProgress, FsStateListener, progress, progress_history
from fsstate_spark.metrics.model import PartitionMetrics, operator_progress
from fsstate_spark.metrics.progress import Known, batch_progress
from fsstate_spark.metrics.prometheus import PrometheusExporter
from fsstate_spark.metrics.watch import WatchTarget, now_ms, read_views
from tests.support.engine import KEY, VAL
from tests.support.metrics_reruns import (
    MORE,
    OPERATOR,
    PARTITIONS,
    Reruns,
    figures,
    lineage_truth,
    truth_totals,
)

# the module (the package's ``progress`` is the function of that name)
progress_mod = importlib.import_module("fsstate_spark.metrics.progress")


@pytest.fixture()
def reruns(spark: SparkSession, tmp_path: Path) -> Iterator[Reruns]:
    rr = Reruns(spark, tmp_path)
    yield rr
    rr.close()


def _from_manifests(
    rr: Reruns, monkeypatch: pytest.MonkeyPatch, query_id: str, batch: int, run: str
) -> dict[str, Any]:
    """The batch's figures with no receipt (as on Spark Connect): only the state root known,
    every partition's manifest read on the run's lineage."""
    monkeypatch.setattr(progress_mod, "_caches", progress_mod._Caches())  # nothing remembered
    known = Known(state_uris=(Location.parse(rr.state),))
    got = batch_progress(query_id, batch, run_id=run, known=known)
    assert got is not None and got.manifest_reads >= PARTITIONS
    return figures(got.operator(OPERATOR).to_json())


def _rerun_checked(
    rr: Reruns,
    monkeypatch: pytest.MonkeyPatch,
    first: Any,
    second: Any,
    batches: list[int],
) -> None:
    """``second`` re-ran ``batches`` of ``first`` (the same query id, a new run id, the
    versions on a branch): everything reported of it is its own."""
    query, run1, run2 = str(first.id), str(first.runId), str(second.runId)
    assert str(second.id) == query and run1 != run2
    before = rr.lines_of(run1)
    assert [d["batchId"] for d in before] == [0, 1, 2]
    lines = rr.lines_of(run2)
    assert [d["batchId"] for d in lines] == batches  # a line of its own per re-run batch
    for line in lines:
        b = line["batchId"]
        truth = truth_totals(lineage_truth(rr.state, query, b, run2))
        assert truth["branches"] != [""]  # the re-run committed on a lineage of its own
        (op,) = line["stateOperators"]
        assert figures(op) == truth, b
        assert _from_manifests(rr, monkeypatch, query, b, run2) == truth, b
        old = [d["stateOperators"][0] for d in before if d["batchId"] == b]
        if old:  # the same batch id of the first run: its own figures, from its own lineage
            mine = truth_totals(lineage_truth(rr.state, query, b, run1))
            assert mine["branches"] != truth["branches"] and figures(old[0]) == mine
            assert mine["numRowsUpdated"] != truth["numRowsUpdated"]
            assert _from_manifests(rr, monkeypatch, query, b, run1) == mine
    last = progress(second)
    assert last is not None and (last.run_id, last.batch_id) == (run2, batches[-1])
    assert figures(last.operator(OPERATOR).to_json()) == figures(lines[-1]["stateOperators"][0])
    assert [(h.run_id, h.batch_id) for h in progress_history(second)] == [
        (run2, b) for b in batches
    ]
    # Prometheus: the re-run's batches counted and its newest batch's figures the gauges
    assert rr.sample("fsstate_batches_total", query) == 3 + len(batches)
    assert rr.sample("fsstate_batch_id", query) == batches[-1]
    assert rr.sample("fsstate_state_rows", query) == last.operator(OPERATOR).num_rows_total


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_rolled_back_query_reports_its_re_run(
    reruns: Reruns, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roll back to batch 0 and restart with two more files, two files a batch: batches 1 and
    2 run again (files 1+2, 3+4), on a branch."""
    first = reruns.run("q")
    rollback_query(reruns.checkpoint("q"), 0)
    reruns.add_input(MORE)
    second = reruns.run("q", files_per_trigger=2)
    _rerun_checked(reruns, monkeypatch, first, second, [1, 2])


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_fork_reports_its_own_batches(reruns: Reruns, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork at batch 1 and run the fork over two more files, two files a batch: batch 2 runs
    again (files 2+3) and batch 3 (file 4) is the fork's alone, both on a branch."""
    first = reruns.run("q")
    fork_query(reruns.checkpoint("q"), reruns.checkpoint("fork"), batch=1)
    reruns.add_input(MORE)
    second = reruns.run("fork", files_per_trigger=2)
    _rerun_checked(reruns, monkeypatch, first, second, [2, 3])


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_restart_without_new_data_reports_no_batch(reruns: Reruns) -> None:
    """Spark records a progress for the restart's trigger that found nothing to do, naming the
    batch id to come: no batch ran in that run, so ``progress()`` is None, the history empty,
    and the listener and the exporter have nothing new."""
    first = reruns.run("q")
    second = reruns.run("q")
    query = str(first.id)
    assert [p["batchId"] for p in second.recentProgress] == [3]  # Spark's, of no batch
    assert progress(second) is None
    assert progress_history(second) == []
    assert reruns.lines_of(str(second.runId)) == []
    assert len(reruns.lines_of(str(first.runId))) == 3
    assert reruns.sample("fsstate_batches_total", query) == 3
    assert reruns.sample("fsstate_batch_id", query) == 2


# -- the keying alone, without Spark -------------------------------------------------------------


def _batch(
    run: str | None, batch: int, rows: int, branch: str = "", by: str | None = None
) -> BatchProgress:
    """One operator's batch of one partition, committed by run ``by``."""
    summary = {"rows_total": rows, "rows_updated": rows}
    part = PartitionMetrics(0, batch, summary, 1.0, branch, by)
    op = operator_progress(OPERATOR, "tiered", batch, 1, [part])
    return BatchProgress("q", run, None, batch, 0, (op,))


def _event(run: str, batch: int) -> Any:
    return SimpleNamespace(progress=SimpleNamespace(id="q", runId=run, batchId=batch, name=None))


class _Figures(FsStateListener):
    """A listener whose figures of (query, run, batch) are made up, not read."""

    def figures(
        self, query: str, batch: int, run_id: str | None, name: str | None
    ) -> BatchProgress | None:
        return _batch(run_id, batch, 10 if run_id == "run1" else 20)


def test_the_listener_reports_each_run_of_a_batch_once() -> None:
    got: list[BatchProgress] = []
    listener = _Figures([got.append])
    for run, batch in [("run1", 1), ("run1", 2), ("run1", 2), ("run2", 2), ("run2", 2)]:
        listener.onQueryProgress(_event(run, batch))
    assert [(b.run_id, b.batch_id) for b in got] == [("run1", 1), ("run1", 2), ("run2", 2)]
    assert got[-1].operator(OPERATOR).num_rows_total == 20


def test_the_exporter_takes_a_batch_id_run_again_by_another_run() -> None:
    exp = PrometheusExporter()
    labels = {"query": "q", "query_id": "q", "operator": OPERATOR, "product": "tiered"}
    try:
        exp(_batch("run1", 2, 10))
        exp(_batch("run1", 2, 10))  # delivered again: counted once
        assert exp.registry.get_sample_value("fsstate_batches_total", labels) == 1
        exp(_batch("run2", 2, 20, "v1-abc"))  # a roll-back's re-run of batch 2
        exp(_batch("run2", 2, 20, "v1-abc"))
        sample = exp.registry.get_sample_value
        assert sample("fsstate_batches_total", labels) == 2
        assert sample("fsstate_rows_updated_total", labels) == 30
        assert sample("fsstate_state_rows", labels) == 20
        exp(_batch("run2", 1, 5, "v1-abc"))  # lower batch ids: the lineage followed
        assert sample("fsstate_batch_id", labels) == 1 and sample("fsstate_state_rows", labels) == 5
    finally:
        exp.close()


def _progress(batch: int, ran: bool) -> dict[str, Any]:
    durations = {"addBatch": 5, "triggerExecution": 9} if ran else {"triggerExecution": 1}
    return {"batchId": batch, "name": None, "durationMs": durations}


def test_progress_reports_the_newest_batch_the_run_executed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle trigger's progress (the batch id to come, no ``addBatch``) is skipped; when every
    progress kept is one, the batch before is reported only if the run committed it (a restart
    that found no new data: None)."""
    asked: list[tuple[str, int, str | None]] = []
    committer = {5: "run3", 2: "run1"}  # who committed each batch's versions

    def figures(query: str, batch: int, **kw: Any) -> BatchProgress:
        asked.append((query, batch, kw["run_id"]))
        return _batch(kw["run_id"], batch, 1, by=committer.get(batch))

    monkeypatch.setattr(progress_mod, "batch_progress", figures)
    recent = [_progress(4, True), _progress(5, True), _progress(6, False)]
    query = SimpleNamespace(id="q", runId="run3", lastProgress=recent[-1], recentProgress=recent)
    got = progress(query)
    assert got is not None and (got.run_id, got.batch_id) == ("run3", 5)
    assert asked == [("q", 5, "run3")]
    assert [b.batch_id for b in progress_history(query)] == [4, 5]
    idle = [_progress(3, False)]  # a restart after batch 2 that found no new data
    restarted = SimpleNamespace(id="q", runId="run4", lastProgress=idle[0], recentProgress=idle)
    assert progress(restarted) is None and progress_history(restarted) == []
    assert asked[-1] == ("q", 2, "run4")
    long_idle = [_progress(6, False)]  # run3 idle longer than Spark's buffer of progress
    query = SimpleNamespace(
        id="q", runId="run3", lastProgress=long_idle[0], recentProgress=long_idle
    )
    got = progress(query)
    assert got is not None and (got.run_id, got.batch_id) == ("run3", 5)


def _commit(fileio: FileIO, partition: int, epoch: int, run: str, planned_ms: int) -> None:
    """Epoch ``epoch`` of store ``op/<partition>`` by run ``run`` as a query's task commits it
    (following the lineage: a version of another planning there makes it branch)."""
    epoch_run = begin_epoch(
        StoreAddress(fileio, "op", partition),
        epoch,
        writer=Writer(run, "i", planned_ms),
        pool=StorePool(),
        follow_lineage=True,
    )
    epoch_run.store.value_table("v", VAL, KEY).update((f"k{epoch}",), (epoch, "x"))
    epoch_run.commit(EpochRecord())


def test_watch_keys_an_operator_by_its_newest_batch(tmp_path: Path) -> None:
    """Run ``r1`` committed batches 0 to 3 on the trunk; rolled back to 0, run ``r2`` has re-run
    batch 1 in partition 0 (on a branch), not yet in partition 1: the operator's newest batch is
    (r2, the branch, 1), not the trunk's batch 3 that partition 1 still holds."""
    fileio = FileIO(Location.parse(str(tmp_path / "state")))
    for epoch in range(4):
        for p in (0, 1):
            _commit(fileio, p, epoch, "r1", 100 + epoch)
    time.sleep(0.01)  # the re-run's commit is the newer one, to the millisecond
    _commit(fileio, 0, 1, "r2", 500)
    (view,) = read_views(WatchTarget((fileio,)))
    branch = branch_for("", 0, 500)
    assert (view.latest, view.progress.batch_id) == (1, 1)  # not the trunk's 3
    assert (view.run, view.branch) == ("r2", branch) and view.branches == ("", branch)
    doc = view.to_json(now_ms())
    assert (doc["runId"], doc["branch"], doc["latestVersion"]) == ("r2", branch, 1)
    heads = {p.partition: (p.run, p.branch, p.version) for p in view.progress.partitions}
    assert heads == {0: ("r2", branch, 1), 1: ("r1", "", 3)}
