"""State that follows its checkpoint (issue 45): a copied checkpoint, a checkpoint restored from
a backup and two checkpoints on one ``state_uri`` each go on with state of their own, batch by
batch equal to Spark's own handles on the same copies; a retried batch still adopts.

The scenario of the issue: A runs batch 0; B is a copy of A's checkpoint (and input) taken
then; A runs batch 1; B runs its own batches 1 and 2 (A's batch-1 file and new ones); A goes on.
Both tiered() loops, both flavours, local and S3 (a selection: every combination would run
Spark some hundred times)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import StructType

from devkit.s3_server import S3Info
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.lineage import list_branches
from fsstate_spark import tiered
from fsstate_spark.tiered.lifecycle import SPARK_MARKER_SCHEMA
from fsstate_spark.tiered.lineage import LINEAGE_SCHEMA
from tests.support.plugin import s3_options
from tests.support.processors import ROW_SCHEMA, SINK_SCHEMA, KitchenSink, RowCounter
from tests.support.stream import StreamRunner

A0 = [{"k": "arrow", "v": 1}, {"k": "state", "v": 1}]
A1 = [{"k": "arrow", "v": 2}, {"k": "arrow", "v": 3}, {"k": "state", "v": 2}]
B1 = [{"k": "spark", "v": 7}, {"k": "state", "v": 3}]
B2 = [{"k": "state", "v": 4}, {"k": "parquet", "v": 5}]
A2 = [{"k": "arrow", "v": 9}, {"k": "state", "v": 9}]


def _copy(root: Path, src: str, dst: str) -> None:
    """``cp -r`` of a query's checkpoint, as a user copies a checkpoint (the copy reads the
    same source: Spark's file source records the paths it read)."""
    shutil.copytree(root / src / "checkpoint", root / dst / "checkpoint")


def _scenario(runner: StreamRunner, make: Any, schema: str, pandas: bool) -> dict[str, Any]:
    """The issue's table: the outputs of every step, keyed by step."""
    out: dict[str, Any] = {}

    def step(
        label: str, name: str, files: list[list[dict[str, Any]]], total: int, per: int = 1
    ) -> None:
        out[label] = runner.run(
            make(),
            files,
            schema,
            name=name,
            total_batches=total,
            pandas=pandas,
            input_of="A",
            files_per_trigger=per,
        )

    step("A0", "A", [A0], 1)
    _copy(runner.root, "A", "B")
    step("A1", "A", [A1], 2)
    # B reads two files per batch: its batch 1 is A's batch-1 file and B1, its batch 2 B2
    step("B1-B2", "B", [B1, B2], 3, per=2)
    step("A2-A4", "A", [A2], 5)  # A reads B's files too (batches 2, 3), then A2
    return out


@pytest.mark.parametrize(
    ("flavour", "loop", "storage"),
    [
        pytest.param("pandas", "fast", "local", marks=pytest.mark.compat),  # every other minor
        ("row", "stock", "local"),
        ("pandas", "stock", "s3"),
    ],
)
def test_a_copied_checkpoint_continues_with_state_of_its_own(
    spark: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    flavour: str,
    loop: str,
    storage: str,
) -> None:
    pandas = flavour == "pandas"
    schema = SINK_SCHEMA if pandas else ROW_SCHEMA
    proc = KitchenSink if pandas else RowCounter
    native = _scenario(StreamRunner(spark, tmp_path / "native"), proc, schema, pandas)
    if storage == "s3":
        info: S3Info = request.getfixturevalue("s3_server")
        uri = f"s3://{info.bucket}/lineage-{tmp_path.name}"
        location = Location.parse(uri, s3_options(info))
        opts: dict[str, Any] = {"state_uri": uri, "storage_options": s3_options(info)}
    else:
        location = Location.parse(str(tmp_path / "state"))
        opts = {"state_uri": str(tmp_path / "state")}
    fast = loop == "fast"
    got = _scenario(
        StreamRunner(spark, tmp_path / "tiered"),
        lambda: tiered(proc(), fast_loop=fast, **opts),
        schema,
        pandas,
    )
    for label in native:
        assert got[label] == native[label], label
    # one query id; each of its four runs (A0, A1, B1-B2, A2-A4) wrote a lineage of its own
    # in every partition's store, and nothing is on a trunk (fsstate.store.lineage rule 1)
    fileio = FileIO(location)
    query = {e.path.split("/", 1)[0] for e in fileio.list("", recursive=True)} - {"_fsstate"}
    (qid,) = query
    listed = fileio.list(qid, recursive=True)
    stores = {e.path.rsplit("/branches/", 1)[0] for e in listed if "/branches/" in e.path}
    assert stores and all(len(list_branches(fileio, s)) == 4 for s in stores)
    assert not [e.path for e in listed if "/manifests/" in e.path]


def test_a_checkpoint_restored_from_a_backup_goes_on_from_its_batch(
    spark: Any, tmp_path: Path
) -> None:
    """A backup of the checkpoint after batch 0, restored after the original ran batches 1
    and 2 next to the same state directory: batch 1 of the restored query equals Spark's."""
    state = str(tmp_path / "state")
    results = {}
    for side, make in (
        ("native", lambda: KitchenSink()),
        ("tiered", lambda: tiered(KitchenSink(), state_uri=state)),
    ):
        runner = StreamRunner(spark, tmp_path / side)
        runner.run(make(), [A0], SINK_SCHEMA, name="q", total_batches=1)
        checkpoint = runner.root / "q" / "checkpoint"
        shutil.copytree(checkpoint, runner.root / "backup")
        runner.run(make(), [A1, A2], SINK_SCHEMA, name="q", total_batches=3)
        shutil.rmtree(checkpoint)
        shutil.copytree(runner.root / "backup", checkpoint)  # restored
        # two files per batch: batch 1 is A1 and A2 (the original's 1 was A1 alone), 2 is B1
        results[side] = runner.run(
            make(), [B1], SINK_SCHEMA, name="q", total_batches=3, files_per_trigger=2
        )
    assert results["tiered"] == results["native"]


def test_two_checkpoints_on_one_state_uri_stay_apart(spark: Any, tmp_path: Path) -> None:
    """Two queries with their own checkpoints, the same processor (and so the same operator
    name) and one state_uri: each equals Spark's own handles."""
    state = str(tmp_path / "state")
    runner = StreamRunner(spark, tmp_path / "runs")
    native = {
        n: runner.run(KitchenSink(), b, SINK_SCHEMA, name=f"n{n}")
        for n, b in (("1", [A0, A1]), ("2", [B1, B2]))
    }
    got = {
        n: runner.run(tiered(KitchenSink(), state_uri=state), b, SINK_SCHEMA, name=f"t{n}")
        for n, b in (("1", [A0, A1]), ("2", [B1, B2]))
    }
    assert got == native


@pytest.mark.parametrize(
    ("schema", "ddl"),
    [
        (
            LINEAGE_SCHEMA,
            "branch STRING, version LONG, checksum STRING, layout STRING, partition INT",
        ),
        (SPARK_MARKER_SCHEMA, "present BOOLEAN"),
    ],
    ids=["lineage", "marker"],
)
def test_fsstate_s_spark_variables_are_declared_as_struct_types(
    spark: Any, schema: Any, ddl: str
) -> None:
    """fsstate's own variables in Spark's state are declared with StructTypes (a DDL string
    costs every task two round trips to the JVM's SQL parser: PySpark's handle parses it there
    to declare the variable and again for its client), equal to what Spark makes of their DDL,
    the schema earlier checkpoints recorded."""
    assert isinstance(schema, StructType)
    parsed = spark._jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl).json()
    assert json.loads(parsed) == json.loads(schema.json())
