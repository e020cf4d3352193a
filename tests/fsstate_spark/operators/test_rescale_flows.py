"""Operator flows restarted with another ``partitions=``: the driver rescales every stage's state
(:mod:`fsstate_spark.operators.stage_rescale`, partitions computed by Spark's own hash) and the
output equals, batch by batch, the same flow run without rescaling.

Two flows cover the stateful operators: deduplication into sliding windows (event time,
watermarks, deadline indexes, window panes), and a join of two change streams into an
aggregate with retractions followed by a keyless one (join buffers, retraction state, a stage
whose state lives in partition 0). Each rescaled run stops and restarts between batches with
4, then 7, then 2 partitions. Kill points: a seeded write of the driver's FileIO fails during a
rescale (the seed is printed on failure); the query fails, its old layout stays in force, and
the restarted query rescales again. Local disk and the S3 test server.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from devkit.spark_local import write_batches
from examples import max_by_category as mbc
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.layout import in_force, read_layouts
from fsstate_spark import operators as ops
from fsstate_spark.operators import driver as driver_module
from tests.support.faulty_backend import failing_fileio
from tests.support.flow_cases import SCHEMA, as_py, make_batches, row_key
from tests.support.plugin import s3_options

pytestmark = pytest.mark.slow

Batches = list[list[dict[str, Any]]]
PLAN = [(3, 4), (2, 7), (3, 2)]  # (batches, partitions) per run of the rescaled query
AGGS = [ops.Agg("count"), ops.Agg("sum", "length"), ops.Agg("min", "length")]


def _changes(seed: int, n: int) -> tuple[Batches, Batches]:
    """Inserts and deletes (of rows present) of ``info`` and ``visit``, per batch."""
    rng = random.Random(seed)
    info: list[tuple[str, str]] = []
    visit: list[tuple[str, str, int]] = []
    out_i, out_v = [], []
    for _ in range(n):
        di, dv = [], []
        for _ in range(rng.randrange(1, 6)):
            if info and rng.random() < 0.2:
                p, c = info.pop(rng.randrange(len(info)))
                di.append({"product": p, "category": c, "op": -1})
            else:
                p, c = f"p{rng.randrange(6)}", f"c{rng.randrange(4)}"
                info.append((p, c))
                di.append({"product": p, "category": c, "op": 1})
        for _ in range(rng.randrange(1, 10)):
            if visit and rng.random() < 0.3:
                p, u, n_ = visit.pop(rng.randrange(len(visit)))
                dv.append({"product": p, "user": u, "length": n_, "op": -1})
            else:
                row = (f"p{rng.randrange(6)}", rng.choice("uvw"), rng.randrange(0, 40))
                visit.append(row)
                dv.append({"product": row[0], "user": row[1], "length": row[2], "op": 1})
        out_i.append(di)
        out_v.append(dv)
    return out_i, out_v


def windows_flow(spark: SparkSession, root: Path) -> ops.Flow:
    """Dedup of (k, v) within the watermark, then sliding windows per k."""
    df = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(root / "in0"))
        .withColumn("t", F.timestamp_seconds("t"))
    )
    return (
        ops.source(df, watermark=("t", "5 seconds"))
        .deduplicate(keys=["k", "v"], time="t")
        .window_aggregate(
            keys=["k"],
            time="t",
            window=ops.Window(size_ms=10_000, slide_ms=5_000),
            aggs=[ops.Agg("count"), ops.Agg("sum", "v"), ops.Agg("max", "v")],
        )
    )


def changes_flow(spark: SparkSession, root: Path) -> ops.Flow:
    """A changelog join into an aggregate with retractions, into a keyless one."""
    info, visit = mbc.streams(spark, root)
    joined = ops.changelog_join(ops.source(info), ops.source(visit), on=["product"])
    return (
        joined.transform(lambda df: df.select("left.category", "right.length", "op"))
        .retract_aggregate(keys=["category"], aggs=AGGS)
        .retract_aggregate(
            keys=[], aggs=[ops.Agg("count"), ops.Agg("sum", "sum(length)")], name="total"
        )
    )


FLOWS: dict[str, Callable[[SparkSession, Path], ops.Flow]] = {
    "windows": windows_flow,
    "changes": changes_flow,
}


def _inputs(flow: str, seed: int, n: int) -> dict[str, Batches]:
    if flow == "windows":
        return {"in0": make_batches(seed, n_batches=n, rows=12)}
    info, visit = _changes(seed, n)
    return {"info": info, "visit": visit}


def run(
    spark: SparkSession,
    root: Path,
    flow: str,
    inputs: dict[str, Batches],
    plan: list[tuple[int, int]],
    state_uri: str | None = None,
    options: dict[str, Any] | None = None,
    fault: Callable[[int], int | None] = lambda run: None,
    fired: list[int] | None = None,
) -> dict[int, list[tuple[Any, ...]]]:
    """Run ``flow`` over the inputs in restarts per ``plan``; ``fault(i)`` gives the write of
    the driver's FileIO that fails in run ``i`` (None: none), which is then re-run (the runs
    whose fault fired are appended to ``fired``)."""
    got: dict[int, list[tuple[Any, ...]]] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        got[batch_id] = sorted((as_py(r) for r in df.collect()), key=row_key)

    done = 0
    for i, (n, partitions) in enumerate(plan):
        for name, batches in inputs.items():
            write_batches(root / name, batches[done : done + n])
        done += n
        for fail_at in (fault(i), None):
            # the driver's FileIO (this process: classic PySpark runs foreachBatch here) fails
            # its fail_at-th write; the tasks' FileIOs (Python workers) are untouched
            with failing_fileio(driver_module, fail_at) as faults:
                query = (
                    ops.write_stream(
                        FLOWS[flow](spark, root),
                        checkpoint_location=str(root / "ckpt"),
                        sink=sink,
                        partitions=partitions,
                        state_uri=state_uri,
                        **(options or {}),
                    )
                    .trigger(availableNow=True)
                    .start()
                )
                with contextlib.suppress(StreamingQueryException):  # a fault: checked below
                    query.awaitTermination(600)
                error = query.exception()
            if faults is None or fail_at is None or faults.writes < fail_at:
                assert error is None, f"run {i}: {error}"
                break
            assert error is not None and "injected fault" in str(error), f"run {i}: {error}"
            if fired is not None:
                fired.append(i)
    assert sorted(got) == list(range(done)), f"batches run: {sorted(got)}"
    return got


def _assert_same(seed: int, want: dict[int, Any], got: dict[int, Any]) -> None:
    assert any(want.values()), f"seed {seed}: no output proves nothing"
    for b in sorted(want):
        assert got.get(b) == want[b], f"seed {seed}, batch {b}:\n want {want[b]}\n got  {got[b]}"


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_flow_rescaled_4_7_2_equals_unrescaled(
    spark: SparkSession, tmp_path: Path, flow: str
) -> None:
    seed = 5
    n = sum(b for b, _ in PLAN)
    inputs = _inputs(flow, seed, n)
    want = run(spark, tmp_path / "plain", flow, inputs, [(n, 4)])
    got = run(spark, tmp_path / "rescaled", flow, inputs, PLAN)
    _assert_same(seed, want, got)
    state = FileIO(str(tmp_path / "rescaled" / "ckpt" / "fsstate"))
    for name in ("total", "retract_aggregate") if flow == "changes" else ("window_aggregate",):
        layout = in_force(read_layouts(state, name))
        assert (layout.generation, layout.partitions) == (2, 2), name


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_flow_rescale_killed_at_random_writes_and_rerun_equals_unrescaled(
    spark: SparkSession, tmp_path: Path, flow: str
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    n = sum(b for b, _ in PLAN)
    inputs = _inputs(flow, 7, n)
    kills = {1: rng.randrange(1, 16), 2: rng.randrange(1, 16)}  # each rescale writes more
    want = run(spark, tmp_path / "plain", flow, inputs, [(n, 4)])
    fired: list[int] = []
    try:
        got = run(spark, tmp_path / "killed", flow, inputs, PLAN, fault=kills.get, fired=fired)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (kills {kills}): {exc}") from None
    _assert_same(seed, want, got)
    assert fired == [1, 2], f"seed {seed} (kills {kills}): the faults fired in runs {fired}"


def test_flow_rescaled_on_s3_equals_unrescaled(
    spark: SparkSession, tmp_path: Path, s3_server: Any, s3_uri: str
) -> None:
    seed = 9
    n = sum(b for b, _ in PLAN)
    inputs = _inputs("changes", seed, n)
    opts = {"storage_options": s3_options(s3_server)}
    want = run(spark, tmp_path / "plain", "changes", inputs, [(n, 4)], f"{s3_uri}/a", opts)
    got = run(spark, tmp_path / "rescaled", "changes", inputs, PLAN, f"{s3_uri}/b", opts)
    _assert_same(seed, want, got)
    state = FileIO(Location.parse(f"{s3_uri}/b", s3_options(s3_server)))
    assert in_force(read_layouts(state, "retract_aggregate")).partitions == 2
