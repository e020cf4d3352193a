"""Operators on Spark over every column type, key count and aggregate, against Spark's built-ins;
global windows; combining before the shuffle; checks when a flow is built.

The random test draws, per seed, the aggregated column's type (string, int, date, timestamp,
boolean, decimal(10,2), with nulls), zero to two grouping keys and the aggregates that type
takes, and compares a tumbling window aggregate (append) and a running aggregate over an
insert-only stream (``retract_aggregate`` with upsert output against Spark's
``groupBy().agg()`` in update mode) with Spark batch by batch.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fsstate.errors import FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.store.identity import store_dir_for
from fsstate.store.record import COMBINE_META
from fsstate_spark import operators as ops
from tests.support.flow_cases import Case, assert_same

pytestmark = pytest.mark.slow

TYPES = {
    "string": "string",
    "int": "int",
    "date": "date",
    "timestamp": "timestamp",
    "boolean": "boolean",
    "decimal": "decimal(10,2)",
}
TAKES = {  # the aggregates Spark computes over each type (fsstate refuses the others)
    "string": ["count", "min", "max"],
    "int": ["count", "sum", "min", "max", "avg"],
    "date": ["count", "min", "max"],
    "timestamp": ["count", "min", "max"],
    "boolean": ["count", "min", "max"],
    "decimal": ["count", "sum", "min", "max", "avg"],
}


def _value(kind: str, rng: random.Random) -> Any:
    if rng.random() < 0.15:
        return None
    if kind == "string":
        return rng.choice(["x", "yy", "", "Zed", "b"])
    if kind == "int":
        return rng.randint(-50, 50)
    if kind == "date":
        return (dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 60))).isoformat()
    if kind == "timestamp":
        return (dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randint(0, 9999))).isoformat()
    if kind == "boolean":
        return rng.random() < 0.5
    return rng.randint(-99999, 99999) / 100


def _rows(seed: int, kind: str, nkeys: int, n_batches: int = 5) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    out = []
    for b in range(n_batches):
        batch = []
        for _ in range(rng.randint(3, 12)):
            row: dict[str, Any] = {"t": 100 + 8 * b + rng.randint(-12, 6), "v": _value(kind, rng)}
            row["k"] = rng.choice(["a", "b", None]) if nkeys >= 1 else "a"
            row["k2"] = rng.randint(0, 1) if nkeys >= 2 else 0
            batch.append(row)
        out.append(batch)
    return out


def _frame(case: Case, kind: str) -> DataFrame:
    schema = f"k string, k2 int, t bigint, v {TYPES[kind]}"
    df = (
        case.spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(case.dirs[0]))
    )
    return df.withColumn("t", F.timestamp_seconds("t"))


@pytest.mark.parametrize("seed", [31, 32, 33])
def test_random_types_keys_and_aggregates_equal_spark(
    spark: SparkSession, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    kind = rng.choice(sorted(TYPES))
    nkeys = rng.randint(0, 2)
    keys = ["k", "k2"][:nkeys]
    funcs = rng.sample(TAKES[kind], rng.randint(1, len(TAKES[kind])))
    label = f"seed {seed}: v {kind}, keys {keys}, aggs {funcs}"
    print(label)
    aggs = [ops.Agg("count")] + [ops.Agg(f, "v") for f in funcs]
    spark_aggs = [F.count(F.lit(1)).alias("count")] + [
        getattr(F, f)("v").alias(f"{f}(v)") for f in funcs
    ]

    case = Case(spark, tmp_path / "w", [_rows(seed, kind, nkeys)])
    built = (
        _frame(case, kind)
        .withWatermark("t", "5 seconds")
        .groupBy(F.window("t", "10 seconds").alias("window"), *keys)
        .agg(*spark_aggs)
    )
    flow = ops.source(_frame(case, kind), watermark=("t", "5 seconds")).window_aggregate(
        keys=keys, time="t", window=ops.Window(size_ms=10_000), aggs=aggs
    )
    assert_same(seed, case.builtin(built), case.fsstate(flow))

    retract_funcs = [f for f in funcs if f in ("sum", "avg", "min", "max")]
    case = Case(spark, tmp_path / "r", [_rows(seed + 1, kind, nkeys)])
    r_aggs = [ops.Agg("count")] + [ops.Agg(f, "v") for f in retract_funcs]
    built = (
        _frame(case, kind)
        .groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("count"),
            *[getattr(F, f)("v").alias(f"{f}(v)") for f in retract_funcs],
        )
    )
    flow = (
        ops.source(_frame(case, kind))
        .transform(lambda d: d.withColumn("op", F.lit(1).cast("tinyint")))
        .retract_aggregate(keys=keys, aggs=r_aggs, output="upsert")
        .transform(lambda d: d.drop("op"))
    )
    spark_rows = case.builtin(built, "update")
    assert_same(seed, spark_rows, case.fsstate(flow))
    print(f"{label}: equal")


def test_global_window_meets_in_one_partition(spark: SparkSession, tmp_path: Path) -> None:
    """``window_aggregate(keys=[])`` (Spark's ``groupBy(window(...))``) with 3 partitions: one
    row per window, not one partial row per partition."""
    case = Case(spark, tmp_path, [_rows(7, "int", 1)])
    built = (
        _frame(case, "int")
        .withWatermark("t", "5 seconds")
        .groupBy(F.window("t", "10 seconds").alias("window"))
        .agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("sum(v)"), F.max("v"))
    )
    flow = ops.source(_frame(case, "int"), watermark=("t", "5 seconds")).window_aggregate(
        keys=[],
        time="t",
        window=ops.Window(size_ms=10_000),
        aggs=[ops.Agg("count"), ops.Agg("sum", "v"), ops.Agg("max", "v")],
    )
    assert_same(7, case.builtin(built), case.fsstate(flow, partitions=3))


def _exchange_records(df: DataFrame) -> list[int]:
    """Records each shuffle of ``df``'s executed plan wrote (Spark's SQL metrics)."""
    plan = df._jdf.queryExecution().executedPlan()
    out: list[int] = []
    todo = [plan]
    while todo:
        node = todo.pop()
        name = node.nodeName()
        if name == "AdaptiveSparkPlan":
            todo.append(node.executedPlan())
            continue
        if "QueryStage" in node.getClass().getSimpleName():  # adaptive stages wrap plans
            todo.append(node.plan())
            continue
        if "Exchange" in name:
            metric = node.metrics().get("shuffleRecordsWritten")
            if metric.isDefined():
                out.append(int(metric.get().value()))
        children = node.children()
        todo.extend(children.apply(i) for i in range(children.size()))
    return out


def _final_plan(df: DataFrame) -> str:
    """The executed physical plan of ``df`` (the final adaptive plan only)."""
    text = str(df._jdf.queryExecution().executedPlan().toString())
    return text.split("== Initial Plan ==")[0]


def test_combining_shuffles_one_row_per_key_and_pane(spark: SparkSession, tmp_path: Path) -> None:
    """A windowed count and a running sum over 400 rows of 4 keys per batch, combined by
    Spark's own aggregate: its exchange carries partial rows (one per (pane, key) per input
    partition), the stage's shuffle one row per (pane, key), never the raw rows."""
    rng = random.Random(5)
    batches = [
        [
            {"k": rng.choice("abcd"), "t": 100 + 8 * b + rng.randint(0, 7), "v": 1}
            for _ in range(400)
        ]
        for b in range(3)
    ]
    case = Case(spark, tmp_path, [batches])
    shuffled: list[list[int]] = []
    plans: list[str] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        df.collect()
        shuffled.append(_exchange_records(df))
        plans.append(_final_plan(df))

    for flow in (
        ops.source(case.frame(), watermark=("t", "5 seconds")).window_aggregate(
            keys=["k"], time="t", window=ops.Window(size_ms=10_000), aggs=[ops.Agg("count")]
        ),
        ops.source(case.frame())
        .transform(lambda d: d.withColumn("op", F.lit(1).cast("tinyint")))
        .retract_aggregate(keys=["k"], aggs=[ops.Agg("sum", "v")], output="upsert"),
    ):
        shuffled.clear()
        plans.clear()
        ckpt = tmp_path / f"ckpt-{len(list(tmp_path.glob('ckpt-*')))}"
        writer = ops.write_stream(flow, checkpoint_location=str(ckpt), sink=sink, partitions=3)
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        # every commit was learnt from the tasks' receipts: no manifest read by the driver
        assert writer.fsstate_driver.manifest_reads == 0
        assert len(shuffled) == 3 and all(len(rec) == 2 for rec in shuffled), shuffled
        # 4 keys x at most 2 panes (a batch's times span two windows): the stage's shuffle (the
        # plan's last) carries each once, the aggregate's once per input partition
        assert all(0 < rec[0] <= 8 for rec in shuffled), shuffled
        assert all(rec[1] <= 8 * spark.sparkContext.defaultParallelism for rec in shuffled)
        assert all("partial_" in plan and plan.count("MapInArrow") == 1 for plan in plans), plans[0]


def test_combining_in_python_where_spark_is_not_exact(spark: SparkSession, tmp_path: Path) -> None:
    """Decimal sums of retractions: Spark would widen the products, so each input partition is
    combined by the operator in Python (a second ``mapInArrow``); the rows equal Spark's."""
    rng = random.Random(13)
    batches = [
        [{"k": rng.choice("abc"), "t": 100 + b, "v": rng.randint(-999, 999)} for _ in range(60)]
        for b in range(3)
    ]
    case = Case(spark, tmp_path, [batches])
    frame = case.frame().withColumn("v", (F.col("v") / 100).cast("decimal(10,2)"))
    built = frame.groupBy("k").agg(F.sum("v").alias("sum(v)"), F.avg("v").alias("avg(v)"))
    plans: list[str] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        df.write.format("noop").mode("overwrite").save()
        plans.append(_final_plan(df))

    flow = (
        ops.source(frame)
        .transform(lambda d: d.withColumn("op", F.lit(1).cast("tinyint")))
        .retract_aggregate(
            keys=["k"], aggs=[ops.Agg("sum", "v"), ops.Agg("avg", "v")], output="upsert"
        )
        .transform(lambda d: d.drop("op"))
    )
    assert_same(13, case.builtin(built, "update"), case.fsstate(flow, partitions=2))
    writer = ops.write_stream(flow, checkpoint_location=str(tmp_path / "plans"), sink=sink)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    assert plans and all(plan.count("MapInArrow") == 2 for plan in plans), plans[:1]


def _combine_records(root: Path, operator: str, partitions: int, batches: int) -> list[int]:
    """Per epoch: 1 if the stage combined it (its partitions' combine records)."""
    fileio = FileIO(str(root))
    out = []
    for b in range(batches):
        records = [
            read_manifest(fileio, store_dir_for(operator, p), b).meta[COMBINE_META]
            for p in range(partitions)
        ]
        out.append(max(r["combined"] for r in records))
    return out


def test_combining_stops_where_it_does_not_fold_rows(spark: SparkSession, tmp_path: Path) -> None:
    """Keys that repeat within a batch keep combining; keys that do not (every key once per
    batch) are combined in the first epoch only, whose record shows it kept every row; the
    rows equal Spark's built-in aggregate either way, batch by batch."""
    rng = random.Random(11)
    spread = [  # every key once per batch
        [{"k": f"k{i}", "t": 100 + b, "v": rng.randint(-9, 9)} for i in range(60)] for b in range(4)
    ]
    repeated = [  # 4 keys, 50 rows each per batch
        [{"k": rng.choice("abcd"), "t": 100 + b, "v": rng.randint(-9, 9)} for _ in range(200)]
        for b in range(4)
    ]
    for rows, want in ((spread, [1, 0, 0, 0]), (repeated, [1, 1, 1, 1])):
        case = Case(spark, tmp_path / f"c{want[1]}", [rows])
        built = case.frame().groupBy("k").agg(F.count(F.lit(1)).alias("count"), F.sum("v"))
        flow = (
            ops.source(case.frame())
            .transform(lambda d: d.withColumn("op", F.lit(1).cast("tinyint")))
            .retract_aggregate(
                keys=["k"], aggs=[ops.Agg("count"), ops.Agg("sum", "v")], output="upsert"
            )
            .transform(lambda d: d.drop("op"))
        )
        assert_same(11, case.builtin(built, "update"), case.fsstate(flow, partitions=2))
        state = case.root / "ckpt-fsstate" / "fsstate"
        operator = flow.stages[-1].op.name
        assert _combine_records(state, operator, 2, 4) == want


def test_flow_checks_columns_and_types_when_built(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.readStream.schema("k string, t string, v string").json(str(tmp_path))
    bad_time = ops.source(df).window_aggregate(
        keys=["k"], time="t", window=ops.Window(size_ms=1000), aggs=[ops.Agg("count")]
    )
    with pytest.raises(FsStateError, match="event-time column 't' has type string"):
        ops.write_stream(bad_time, checkpoint_location=str(tmp_path / "c1"))
    bad_sum = ops.source(df.withColumn("t", F.col("t").cast("timestamp"))).window_aggregate(
        keys=["k"], time="t", window=ops.Window(size_ms=1000), aggs=[ops.Agg("sum", "v")]
    )
    with pytest.raises(FsStateError, match="sum over column 'v' of type string"):
        ops.write_stream(bad_sum, checkpoint_location=str(tmp_path / "c2"))
    missing = ops.source(df).retract_aggregate(keys=["nope"], aggs=[ops.Agg("count")])
    with pytest.raises(FsStateError, match="nope"):
        ops.write_stream(missing, checkpoint_location=str(tmp_path / "c3"))


def _nan_as_text(value: Any) -> Any:
    """Rows comparable with ``==`` when they hold NaN (each NaN is its own float)."""
    if isinstance(value, dict):
        return {k: _nan_as_text(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_nan_as_text(v) for v in value)
    if isinstance(value, list):
        return [_nan_as_text(v) for v in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def test_combined_windows_equal_uncombined_on_every_time_type(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Sliding windows over an integer (microseconds) event time, combined by Spark's
    aggregate, and over a TIMESTAMP_NTZ one, combined by Arrow in Python: both equal the flow
    without combining batch by batch (late rows, null keys, NaN and null values under count,
    sum, avg, min and max), and every epoch combined."""
    seed = 17
    rng = random.Random(seed)
    batches = [
        [
            {
                "k": rng.choice(["a", "b", "c", None]),
                "t": 100 + 8 * b + rng.randint(-20, 6),
                "v": None if rng.random() < 0.1 else rng.randint(-50, 50),
            }
            for _ in range(300)
        ]
        for b in range(4)
    ]
    case = Case(spark, tmp_path, [batches])
    x = F.when(F.col("v") % 7 == 0, F.lit(float("nan"))).otherwise(F.col("v").cast("double"))
    times = {"int": F.unix_micros("t"), "ntz": F.col("t").cast("timestamp_ntz")}
    for kind, time in times.items():

        def flow(kind: str = kind, time: Any = time) -> ops.Flow:
            df = case.frame().withColumn("x", x).withColumn("t", time)
            return ops.source(df, watermark=("t", "5 seconds")).window_aggregate(
                keys=["k"],
                time="t",
                window=ops.Window(size_ms=10_000, slide_ms=5_000),
                aggs=[
                    ops.Agg("count"),
                    *(ops.Agg(f, "x") for f in ("count", "sum", "avg", "min", "max")),
                ],
                name=f"w_{kind}",
            )

        combined = case.fsstate(flow(), tag=f"-{kind}-c")
        plain = case.fsstate(flow(), tag=f"-{kind}-p", combine=False)
        assert_same(seed, _nan_as_text(plain), _nan_as_text(combined))
        state = case.root / f"ckpt-fsstate-{kind}-c" / "fsstate"
        assert _combine_records(state, f"w_{kind}", 3, 4) == [1, 1, 1, 1], kind
