"""One failure rule for every epoch (:mod:`fsstate.store.epoch`), the same under ``tiered()`` and
under the flow driver's runner.

The same processor (a running count per key, Row flavour) runs epochs 0 and 1 cleanly, then
epoch 2 with a failure injected at one step of the epoch: while **acquiring** the parent (the
store's files fail to read while it is restored), while **processing** (the processor raises
after it wrote another key's state), while **committing** (the manifest's conditional put
fails) or at **adoption** (the version was already published by another operator instance of
the same query run). Both callers must then leave the same state: version 1 intact, version 2
absent (or, at adoption, the other's), no store of the partition held by the process's pool
(a dirty store is never reused), and a retry that commits exactly what a run without the
failure commits. ``tiered()`` is driven as Spark's worker drives it (``init``, the callbacks,
``close``; a task that raised never reaches ``close``), without a SparkSession.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from fsstate.config import StoreConfig
from fsstate.errors import CommitError, ConfigError, StorageError
from fsstate.inspect import Snapshot
from fsstate.operators.runner import run_epoch
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import list_versions
from fsstate.store.identity import store_dir_for
from fsstate.store.lineage import lineage_for
from fsstate.store.pool import store_pool
from fsstate.store.record import Writer
from fsstate_spark import tiered
from fsstate_spark.operators.processor_stage import ProcessorSpec, ProcessorStage
from fsstate_spark.runtime import fileio_for
from fsstate_spark.tiered import processor as processor_module
from fsstate_spark.tiered.lifecycle import TaskInfo, query_root, store_cache

OUT = StructType([StructField("k", StringType()), StructField("n", LongType())])
NAME = "Tally"
QUERY = "query-1"
BATCHES = [
    [("a", 1), ("b", 2)],
    [("a", 3), ("c", 4), ("c", 5)],
    [("a", 6), ("boom", 7), ("c", 8)],
]
STEPS = ("acquire", "process", "commit", "adopt")


class Tally(StatefulProcessor):
    """Counts rows per key; raises on key ``boom`` while ``fail`` is set (after the keys before
    it wrote their state)."""

    fail = False

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n BIGINT")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Row]:
        n = sum(1 for _ in rows)
        if key[0] == "boom" and Tally.fail:
            raise RuntimeError("injected failure in handleInputRows")
        old = self.count.get()
        total = (old[0] if old else 0) + n
        self.count.update((total,))
        yield Row(k=key[0], n=total)

    def close(self) -> None:
        pass


class _Handle(StatefulProcessorHandle):
    """Spark's handle, for the one state variable ``tiered()`` declares with it."""

    def __init__(self) -> None:
        pass

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> Any:
        return None


class FailingReads:
    """A FileIO backend whose reads fail (the store's files cannot be read while restoring)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in ("read", "input_file"):
            return attr

        def read(*args: Any, **kwargs: Any) -> Any:
            raise OSError("injected read failure")

        return read


class FailingManifest:
    """A FileIO backend whose conditional puts (a manifest's publish) fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != "put_if_absent":
            return attr

        def put(key: str, data: bytes) -> bool:
            if "manifest" in key or key.endswith(".json"):
                raise OSError("injected failure publishing the manifest")
            result: bool = attr(key, data)
            return result

        return put


class Caller:
    """Runs one epoch of :class:`Tally` on a batch, as ``tiered()`` or as the driver's runner."""

    def __init__(self, kind: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kind = kind
        self.writer = Writer("run-1", "instance-1")
        if kind == "tiered":
            self.proc = tiered(Tally(), state_uri=str(root))
            config = self.proc.config
            self.fileio = fileio_for(query_root(config, QUERY), config.store.fsync)
            self.task: dict[str, TaskInfo] = {}
            monkeypatch.setattr(processor_module, "current_task", lambda: self.task["now"])
        else:
            spec = ProcessorSpec(
                keys=("k",), output_type=OUT, output_mode="update", time_mode="none", pandas=False
            )
            self.op = ProcessorStage(NAME, Tally(), spec)
            self.fileio = FileIO(Location.parse(str(root)))
        self.attempt = 0

    def run(self, epoch: int, batch: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The epoch's output rows, sorted; raises what the epoch raised."""
        self.attempt += 1
        if self.kind == "driver":
            table = pa.table({"k": [k for k, _ in batch], "v": [v for _, v in batch]})
            res = run_epoch(self.op, self.fileio, 0, epoch, table, writer=self.writer)
            return sorted((r["k"], r["n"]) for r in res.output.to_pylist())
        self.task["now"] = TaskInfo("streaming", 0, epoch, QUERY, self.attempt, "run-1", 1)
        proc = self.proc
        proc._instance = self.writer.instance
        proc.init(_Handle())
        out: list[tuple[str, int]] = []
        for key in sorted({k for k, _ in batch}):
            rows = [Row(k=k, v=v) for k, v in batch if k == key]
            for row in proc.handleInputRows((key,), iter(rows), TimerValues(1_000, -1)):
                out.append((row["k"], row["n"]))
        proc.close()
        return sorted(out)

    def publish_as_other_instance(self, epoch: int, batch: list[tuple[str, int]]) -> None:
        """Epoch ``epoch`` committed by another operator instance of the same run."""
        mine = self.writer
        self.writer = Writer(mine.run, "instance-2")
        try:
            self.run(epoch, batch)
        finally:
            self.writer = mine
        store_pool().clear()  # the other operator ran in another process

    @property
    def branch(self) -> str:
        """The lineage the versions are on: a tiered() run's own (fsstate.store.lineage), the
        trunk for the flow driver."""
        return lineage_for(-1, None, "run-1") if self.kind == "tiered" else ""

    def counts(self, version: int) -> dict[str, int]:
        """The stored counts of ``version``."""
        with Snapshot(self.fileio, NAME, 0, version, branch=self.branch) as snap:
            table = snap.read("count")
        return dict(zip(table.column(0).to_pylist(), table.column("n").to_pylist()))

    def versions(self) -> list[int]:
        return list_versions(self.fileio, store_dir_for(NAME, 0), self.branch)

    def held(self) -> bool:
        return store_pool().holds(self.fileio, NAME, 0, branch=self.branch)


@pytest.fixture(autouse=True)
def _fresh_pool() -> Iterator[None]:
    store_cache().clear()
    Tally.fail = False
    yield
    store_cache().clear()
    Tally.fail = False


def _expected(upto: int) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """The counts after batch ``upto`` and its output, without any failure."""
    counts: dict[str, int] = {}
    out: dict[str, int] = {}
    for i, batch in enumerate(BATCHES[: upto + 1]):
        out = {}
        for k, _ in batch:
            counts[k] = counts.get(k, 0) + 1
            out[k] = counts[k]
        if i < upto:
            out = {}
    return counts, sorted(out.items())


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("kind", ["tiered", "driver"])
def test_a_failure_at_each_step_of_an_epoch_leaves_the_same_state(
    kind: str, step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    caller = Caller(kind, tmp_path / "state", monkeypatch)
    for epoch in (0, 1):
        assert caller.run(epoch, BATCHES[epoch]) == _expected(epoch)[1]
    before = caller.counts(1)
    assert before == _expected(1)[0]
    assert caller.held()  # the committed store waits in the pool for epoch 2

    real = caller.fileio.backend
    raised: type[BaseException]
    if step == "acquire":
        store_pool().clear()  # the next batch lands in a process that must restore version 1
        caller.fileio.backend = FailingReads(real)  # type: ignore[assignment]
        raised = StorageError
    elif step == "process":
        Tally.fail = True
        raised = RuntimeError
    elif step == "commit":
        caller.fileio.backend = FailingManifest(real)  # type: ignore[assignment]
        raised = CommitError
    else:
        caller.publish_as_other_instance(2, BATCHES[2])
        raised = ConfigError
    with pytest.raises(raised):
        caller.run(2, BATCHES[2])
    caller.fileio.backend = real
    Tally.fail = False

    # the same state whoever ran the epoch: the parent intact, nothing held by the pool
    assert caller.counts(1) == before
    assert not caller.held(), "a failed epoch's store is still held by the pool"
    if step == "adopt":  # published by the other operator: the same run refuses it again
        assert caller.versions()[-1] == 2 and caller.counts(2) == _expected(2)[0]
        with pytest.raises(ConfigError, match="same name"):
            caller.run(2, BATCHES[2])
        assert not caller.held()
        return
    assert caller.versions() == [0, 1]
    # a retry commits what a run without the failure commits
    assert caller.run(2, BATCHES[2]) == _expected(2)[1]
    assert caller.versions() == [0, 1, 2]
    assert caller.counts(2) == _expected(2)[0]
    assert caller.held()


def test_an_epoch_commits_or_fails_once(tmp_path: Path) -> None:
    """An epoch run is final after its commit or its failure; leaving its block with an
    exception fails it."""
    from fsstate.errors import StoreClosedError
    from fsstate.store.epoch import StoreAddress, begin_epoch

    fileio = FileIO(Location.parse(str(tmp_path)))
    ref = StoreAddress(fileio, "op", 0)
    run = begin_epoch(ref, 0, config=StoreConfig())
    run.commit()
    with pytest.raises(StoreClosedError):
        run.commit()
    with pytest.raises(StoreClosedError):
        run.fail()
    with pytest.raises(RuntimeError), begin_epoch(ref, 1) as failing:
        failing.store.value_table("t", pa.schema([("v", pa.int64())]), None)
        raise RuntimeError("boom")
    assert failing.done and not store_pool().holds(fileio, "op", 0)
    assert list_versions(fileio, store_dir_for("op", 0)) == [0]
