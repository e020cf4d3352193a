"""A flow's state follows its checkpoint (issue 45) with an explicit ``state_uri``: a copied
checkpoint, another query and a new checkpoint at the owner's place are refused with nothing
written; a checkpoint restored from a backup beside state that went on is refused before any
task runs, and goes on once its state is restored with it; the owner's restarts go on.

Every query is a running count per key (``retract_aggregate``, a changelog) over one JSON file
per micro-batch; the expected counts are a dict's.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from devkit.spark_local import write_batches
from fsstate.inspect.checkpoint import batch_timestamp_ms
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.store.identity import store_dir_for
from fsstate.store.record import Writer
from fsstate_spark import operators as ops
from fsstate_spark.operators.lineage import OWNER_FILE

SCHEMA = "k string"
B0 = [{"k": "a"}, {"k": "b"}]
B1 = [{"k": "a"}, {"k": "c"}]
B2 = [{"k": "a"}]
B3 = [{"k": "b"}, {"k": "d"}]
PARTITIONS = 2
OP = "retract_aggregate"


class Query:
    """One checkpoint (``<root>/<name>``) reading ``<root>/<input>``, its state at ``state``."""

    def __init__(self, spark: SparkSession, root: Path, name: str, state: Path, input: str = "in"):
        self.spark, self.root, self.name, self.state = spark, root, name, state
        self.input = root / input

    @property
    def checkpoint(self) -> Path:
        return self.root / self.name

    def run(self) -> dict[int, dict[str, int]]:
        """Run the new batches; each batch's changed counts (``{key: count}``)."""
        df = self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
        flow = ops.source(df.json(str(self.input))).transform(
            lambda d: d.withColumn("op", F.lit(1))
        )
        got: dict[int, dict[str, int]] = {}

        def sink(batch: DataFrame, batch_id: int) -> None:
            got[batch_id] = {r["k"]: r["count"] for r in batch.collect() if r["op"] == 1}

        query = (
            ops.write_stream(
                flow.retract_aggregate(keys=["k"], aggs=[ops.Agg("count")]),
                checkpoint_location=str(self.checkpoint),
                sink=sink,
                partitions=PARTITIONS,
                state_uri=str(self.state),
            )
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(300)
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return got


def counts(*batches: list[dict[str, Any]]) -> dict[int, dict[str, int]]:
    """The changed counts each batch outputs."""
    total: Counter[str] = Counter()
    out = {}
    for b, rows in enumerate(batches):
        total.update(r["k"] for r in rows)
        out[b] = {r["k"]: total[r["k"]] for r in rows}
    return out


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory``: (size, modification time in ns)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def refused(query: Query, match: str) -> str:
    """Run ``query``, which must fail with ``match`` and leave its state as it was."""
    before = listing(query.state)
    with pytest.raises((RuntimeError, StreamingQueryException), match=match) as err:
        query.run()
    assert listing(query.state) == before
    return str(err.value)


def test_a_copied_checkpoint_on_a_shared_state_uri_is_refused_with_nothing_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    a = Query(spark, tmp_path, "A", state)
    write_batches(a.input, [B0])
    assert a.run() == {0: counts(B0)[0]}
    shutil.copytree(a.checkpoint, tmp_path / "B")
    shutil.copytree(state, tmp_path / "state-B")  # the fork the refusal names, made now
    write_batches(a.input, [B1])
    b = Query(spark, tmp_path, "B", state)
    message = refused(b, "belongs to the query whose checkpoint is")
    assert str(a.checkpoint) in message and str(b.checkpoint) in message
    assert "copy its state directory too" in message
    # the owner goes on: its restart runs batch 1 from its state
    assert a.run() == {1: counts(B0, B1)[1]}
    # B on the copy of the state taken with its checkpoint (owner record and all) goes on
    assert Query(spark, tmp_path, "B", tmp_path / "state-B").run() == {1: counts(B0, B1)[1]}
    assert str(b.checkpoint) in (tmp_path / "state-B" / OWNER_FILE).read_text()
    # each version records when its batch was planned (the checkpoint's offsets entry)
    fileio = FileIO(str(state))
    for p in range(PARTITIONS):
        meta = read_manifest(fileio, store_dir_for(OP, p), 1).meta
        writer = Writer.from_meta(meta["writer"])
        assert writer is not None
        assert writer.planned_ms == batch_timestamp_ms(FileIO(str(a.checkpoint)), 1)


def test_two_queries_on_one_state_uri_the_second_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = Query(spark, tmp_path, "one", state)
    write_batches(first.input, [B0, B1])
    assert first.run() == counts(B0, B1)
    other = Query(spark, tmp_path, "two", state, input="in2")
    write_batches(other.input, [B2])
    refused(other, "belongs to the query whose checkpoint is")
    # a new checkpoint at the owner's place (the old one deleted): another query id
    shutil.rmtree(first.checkpoint)
    message = refused(first, r"is now query .* \(a new checkpoint\)")
    assert "Restore the checkpoint that goes with the state" in message


def test_a_checkpoint_restored_from_a_backup_is_refused_until_its_state_is_restored(
    spark: SparkSession, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    q = Query(spark, tmp_path, "q", state)
    write_batches(q.input, [B0])
    assert q.run() == counts(B0)
    shutil.copytree(q.checkpoint, tmp_path / "backup" / "checkpoint")
    shutil.copytree(state, tmp_path / "backup" / "state")
    write_batches(q.input, [B1, B2])
    assert q.run() == {b: c for b, c in counts(B0, B1, B2).items() if b}
    shutil.rmtree(q.checkpoint)
    shutil.copytree(tmp_path / "backup" / "checkpoint", q.checkpoint)  # the checkpoint only
    write_batches(q.input, [B3])
    # Spark plans batch 1 anew (at another time) while the state holds the original's
    message = refused(q, "from another planning of the batch")
    assert "Restore the state directory that goes with the checkpoint" in message
    refused(q, "from another planning of the batch")  # the same planning: refused again
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "backup" / "state", state)  # restored together
    # the restored query runs the batches from its own state (one file per batch: B1, B2, B3)
    assert q.run() == {b: c for b, c in counts(B0, B1, B2, B3).items() if b}
