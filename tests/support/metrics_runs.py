"""Queries whose fsstate figures are checked against the truth (:mod:`fsstate_spark.metrics`).

:class:`Ledger` writes value, list and TTL'd value state and clears keys, so a batch has rows
updated, removed and (after the TTL'd row's batch) expired. :data:`LEDGER_BATCHES` are its
micro-batches and :func:`expected` what they imply per batch. :func:`run_query` runs a
``tiered()`` query or a flow over them with a sink that lists the operator's data files before
and after computing the batch (the files the batch wrote), and returns the query's figures
(``progress_history``) with those listings. :func:`check_figures` compares every figure with the
truth: rows by reading each partition's version, bytes and files by listing storage, updated,
removed and expired with :func:`expected`.

Invariants: deterministic input (one file per batch, ``maxFilesPerTrigger=1``); truth is read
with :mod:`fsstate.inspect` and the FileIO listing, never from a summary.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from devkit.spark_local import session_conf, write_batches
from fsstate.inspect import Snapshot
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.identity import store_dir_for
from fsstate_spark.metrics import BatchProgress, progress, progress_history

TTL_MS = 50  # far shorter than the gap between two batches (the sink sleeps)
PAD = "x" * 5000  # list elements big enough to spill under SPILL_BUDGET
# a budget the state outgrows: the engine spills in every batch (process-wide in a worker:
# restore_engine() puts the defaults back)
SPILL_BUDGET = {"memory_limit": "1MiB", "high_watermark": 0.2, "low_watermark": 0.1}
OUTPUT = "k STRING, n BIGINT"
KEYS = [f"k{i:03d}" for i in range(120)]


class Ledger(StatefulProcessor):
    """Per key: ``total`` (value), ``notes`` (a list, one element per non-negative row) and
    ``temp`` (a value with a short TTL, written when a row is 7). A negative row clears
    ``total`` and ``notes`` (removed rows)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", "n BIGINT")
        self.notes = handle.getListState("notes", "s STRING")
        self.temp = handle.getValueState("temp", "n BIGINT", TTL_MS)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Any:
        values = [int(v) for pdf in rows for v in pdf["v"]]
        if any(v < 0 for v in values):
            self.total.clear()
            self.notes.clear()
            yield pd.DataFrame({"k": [key[0]], "n": [-1]})
            return
        total = (self.total.get() or (0,))[0] + sum(values)
        self.total.update((total,))
        self.notes.appendList([(f"{v}{PAD}",) for v in values])
        if 7 in values:
            self.temp.update((7,))
        yield pd.DataFrame({"k": [key[0]], "n": [total]})

    def close(self) -> None:
        pass


def _rows(keys: list[str], v: int) -> list[dict[str, Any]]:
    return [{"k": k, "v": v} for k in keys]


LEDGER_BATCHES = [
    # every key: a total and two notes; the first 10 keys also a TTL'd temp
    _rows(KEYS, 1) + _rows(KEYS, 2) + _rows(KEYS[:10], 7),
    # 20 keys cleared (total + 2 notes each removed), 30 keys one more note; temps expire
    _rows(KEYS[100:], -1) + _rows(KEYS[:30], 3),
    # 5 keys one more note
    _rows(KEYS[:5], 4),
]


def expected(batches: list[list[dict[str, Any]]]) -> list[dict[str, int]]:
    """Rows total, updated, removed and expired each data batch implies (all partitions)."""
    notes: dict[str, int] = {}
    total: set[str] = set()
    temp: set[str] = set()
    out = []
    for rows in batches:
        by_key: dict[str, list[int]] = {}
        for r in rows:
            by_key.setdefault(r["k"], []).append(r["v"])
        updated = removed = 0
        expired = len(temp)  # written in the batch before: expired at this batch's clock
        temp = set()
        for k, vs in by_key.items():
            if any(v < 0 for v in vs):
                removed += notes.pop(k, 0) + (1 if k in total else 0)
                total.discard(k)
                continue
            total.add(k)
            notes[k] = notes.get(k, 0) + len(vs)
            updated += 1 + len(vs) + (1 if 7 in vs else 0)
            if 7 in vs:
                temp.add(k)
        live = len(total) + sum(notes.values()) + len(temp)
        out.append({"rows_total": live, "updated": updated, "removed": removed, "expired": expired})
    return out


class QueryStuck(Exception):
    """A query of :func:`run_query` neither failed nor finished within its deadline."""


def data_files(fileio: FileIO, operator: str) -> dict[str, int]:
    """Every data file of ``operator`` under ``fileio`` (path -> size), as storage lists it."""
    return {
        e.path: e.size_bytes
        for e in fileio.list(operator, recursive=True)
        if e.path.endswith(".parquet")
    }


def run_query(
    spark: SparkSession,
    work: Path,
    processor: Any,
    *,
    flow: bool = False,
    state_uri: str | None = None,
    listen_path: Path | None = None,
    batches: list[list[dict[str, Any]]] = LEDGER_BATCHES,
    deadline_s: float = 180,
    on_stuck: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run ``processor`` (a ``tiered()`` one, or a plain one in a flow) over ``batches``;
    return ``{"query", "history", "last", "written", "root", "fileio"}``: the query id,
    ``progress_history``, ``progress`` after the run, the data files each batch wrote (listed
    by the sink around its computation), and where the operators' state is (a ``tiered()``
    query's: its state root's ``<query id>``).

    The sink lists the whole state root and writes each batch's new files to
    ``<work>/written/<batch>.json``: on Spark Connect it runs in a Python process of the server,
    so files are how they come back (the session may be a classic one or a Connect client).

    A query that neither failed nor reached its last batch within ``deadline_s`` is stuck:
    ``on_stuck`` (if given) runs while it still is (to save the JVM's threads), then the query
    is stopped and :class:`QueryStuck` raised."""
    from fsstate_spark.metrics import listen
    from fsstate_spark.runtime import fileio_for
    from fsstate_spark.settings import StateSettings

    inputs, checkpoint, out_dir = work / "input", work / "checkpoint", work / "written"
    write_batches(inputs, batches)
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = spark.readStream.schema("k STRING, v BIGINT").option("maxFilesPerTrigger", 1)
    grouped = frame.json(str(inputs)).groupBy("k")
    if flow:  # the flow's state root is known once its writer exists: list all of ``work``
        listed = Location.parse(state_uri if state_uri is not None else str(work))
    else:
        # the whole state root (a tiered() query's directory is not known yet)
        listed = StateSettings(processor.config.state_uri, location=processor.config.root).root
    sink = _batch_files_sink(listed, out_dir)

    ended = _Terminated()
    listener = listen(spark, listen_path, sinks=[ended]) if listen_path is not None else None
    query, root = _start_query(spark, grouped, processor, sink, checkpoint, flow, state_uri, listed)
    last = len(batches) - 1
    try:  # until Spark recorded the last data batch's progress
        stuck = _await_last_progress(query, last, deadline_s, on_stuck)
    finally:
        query.stop()
        if listener is not None:
            _await_lines(listen_path, len(batches))  # the bus delivers progress asynchronously
            # no event in flight when the last listener goes: on a Connect client PySpark's
            # removeListener joins its event thread holding the lock that thread posts under
            # (a deadlock when an event is pending: SPARK-59623), and the query's termination
            # is its last event
            ended.wait(str(query.id), 30.0)
            spark.streams.removeListener(listener)
    if stuck:
        raise QueryStuck(f"query {query.id}: not at batch {last} after {deadline_s:.0f} s")
    assert query.exception() is None, query.exception()
    written = {int(f.stem): json.loads(f.read_text()) for f in out_dir.glob("*.json")}
    return {
        "query": str(query.id),
        "history": progress_history(query, limit=50),
        "last": progress(query),
        "written": written,
        "root": root,
        "fileio": fileio_for(root, False),
    }


def _batch_files_sink(listed: Location, out_dir: Path) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` sink that computes the batch and writes the data files it added under
    ``listed`` to ``<out_dir>/<batch id>.json``."""
    from fsstate_spark.runtime import fileio_for

    def sink(batch: DataFrame, batch_id: int) -> None:
        before = data_files(fileio_for(listed, False), "")
        batch.collect()
        after = data_files(fileio_for(listed, False), "")
        new = {p: n for p, n in after.items() if p not in before}
        (out_dir / f"{batch_id}.json").write_text(json.dumps(new))
        time.sleep(0.3)  # the TTL'd rows of this batch expire before the next one

    return sink


def _start_query(
    spark: SparkSession,
    grouped: Any,
    processor: Any,
    sink: Callable[[DataFrame, int], None],
    checkpoint: Path,
    flow: bool,
    state_uri: str | None,
    listed: Location,
) -> tuple[Any, Location]:
    """Start :func:`run_query`'s query (a flow, or Spark's operator); return it and where its
    operators' state is."""
    from fsstate_spark import operators as ops

    if flow:
        stage = ops.transform_with_state_in_pandas(
            grouped, processor, OUTPUT, "Update", "ProcessingTime"
        )
        writer = ops.write_stream(
            stage,
            checkpoint_location=str(checkpoint),
            sink=sink,
            partitions=2,
            tasks=2,
            state_uri=state_uri,
            **SPILL_BUDGET,
        )
        root = writer.fsstate_driver.config.root  # type: ignore[union-attr]
    else:
        out = grouped.transformWithStateInPandas(processor, OUTPUT, "Update", "ProcessingTime")
        writer = out.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        query = writer.trigger(availableNow=True).start()
    if not flow:
        root = listed.child(str(query.id))
    return query, root


def _await_last_progress(
    query: Any, last: int, deadline_s: float, on_stuck: Callable[[], None] | None
) -> bool:
    """Until the query failed, ended or Spark recorded batch ``last``'s progress (False), or
    ``deadline_s`` passed (True, once ``on_stuck`` ran)."""
    deadline = time.monotonic() + deadline_s
    while query.isActive and query.exception() is None:
        if any(int(p["batchId"]) >= last for p in query.recentProgress):
            break
        if time.monotonic() > deadline:
            if on_stuck is not None:
                on_stuck()
            return True
        time.sleep(0.1)
    return False


class _Terminated:
    """A listener sink that only records which queries' termination the listener saw (the
    listener tells each sink with a ``forget`` method)."""

    def __init__(self) -> None:
        self._ended: set[str] = set()
        self._changed = threading.Condition()

    def __call__(self, progress: BatchProgress) -> None:
        """No figures kept."""

    def forget(self, query_id: str) -> None:
        """The listener saw ``query_id`` terminate."""
        with self._changed:
            self._ended.add(query_id)
            self._changed.notify_all()

    def wait(self, query_id: str, timeout_s: float) -> bool:
        """Until the listener saw ``query_id`` terminate (False after ``timeout_s``)."""
        with self._changed:
            return self._changed.wait_for(lambda: query_id in self._ended, timeout_s)


def _await_lines(path: Path | None, count: int, timeout_s: float = 30.0) -> None:
    """Until the listener wrote ``count`` lines to ``path`` (or ``timeout_s`` passed: the
    test's own check then says what is missing)."""
    deadline = time.monotonic() + timeout_s
    while path is not None and time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.1)


def restore_engine(spark: SparkSession) -> None:
    """The engine's default budget and watermarks back in the session's Python workers (a
    small job over more partitions than workers; best effort: a worker it misses only spills
    sooner)."""

    def reset(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        from fsstate.config import EngineConfig
        from fsstate.controller import configure

        d = EngineConfig()
        configure(
            d.memory_limit_bytes, high_watermark=d.high_watermark, low_watermark=d.low_watermark
        )
        yield from frames

    spark.range(0, 16, numPartitions=16).mapInPandas(reset, "id BIGINT").collect()


def truth(fileio: FileIO, operator: str, partitions: int, version: int) -> dict[str, Any]:
    """What storage says of ``operator`` at ``version``: rows (read), live files and bytes
    (the manifest's files as storage lists them), per partition."""
    sizes = data_files(fileio, operator)
    out: dict[str, Any] = {"rows": {}, "files": {}, "bytes": {}}
    for p in range(partitions):
        with Snapshot(fileio, operator, p, version) as snap:  # the lineage committed last
            out["rows"][p] = sum(snap.read(name).num_rows for name in snap.specs)
            manifest = snap.manifest
        files = [f"{store_dir_for(operator, p)}/{f}" for f in manifest.files()]
        out["files"][p] = len(files)
        out["bytes"][p] = sum(sizes[f] for f in files)
    return out


def check_figures(
    result: dict[str, Any],
    operator: str,
    product: str,
    batches: list[list[dict[str, Any]]] = LEDGER_BATCHES,
) -> list[BatchProgress]:
    """Assert every figure of every data batch of ``batches`` against the truth (the files each
    batch wrote where ``result["written"]`` lists them); return the history."""
    history: list[BatchProgress] = result["history"]
    want = expected(batches)
    by_batch = {b.batch_id: b for b in history}
    assert sorted(by_batch)[: len(want)] == list(range(len(want))), sorted(by_batch)
    assert result["last"] is not None and result["last"].batch_id == max(by_batch)
    for batch, exp in enumerate(want):
        op = by_batch[batch].operator(operator)
        assert (op.product, op.batch_id, op.partitions_reported) == (product, batch, 2)
        js = op.to_json()
        cm = js["customMetrics"]
        t = truth(result["fileio"], operator, 2, batch)
        assert js["numRowsTotal"] == sum(t["rows"].values()) == exp["rows_total"], (batch, js, t)
        got = (js["numRowsUpdated"], js["numRowsRemoved"], cm["rowsExpired"])
        assert got == (exp["updated"], exp["removed"], exp["expired"]), (batch, js, exp)
        assert cm["diskBytes"] == sum(t["bytes"].values()), (batch, cm, t)
        assert cm["filesTotal"] == sum(t["files"].values()), (batch, cm, t)
        if result.get("written") is not None:  # listed by a foreachBatch sink
            new = result["written"][batch]
            assert (cm["filesWritten"], cm["bytesWritten"]) == (len(new), sum(new.values()))
        for part in op.partitions:
            assert part.rows_total == t["rows"][part.partition]
        top = js["topPartitions"]
        assert [p["numRowsTotal"] for p in top] == sorted(t["rows"].values(), reverse=True)
        assert js["commitTimeMs"] > 0 and js["memoryUsedBytes"] > 0
    return history
