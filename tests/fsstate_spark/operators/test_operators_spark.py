"""fsstate's whole-batch operators on Spark against Spark's own built-in operators.

Every case writes seeded random micro-batches (one JSON file per batch, out-of-order event
times so that rows arrive late and windows close at different batches) and runs them through
Spark's built-in operator and through the fsstate flow, both with ``foreachBatch`` sinks that
collect each batch's rows; the outputs must be equal batch by batch.

Spark's built-ins run with ``spark.sql.streaming.noDataMicroBatches.enabled=false``: an fsstate
flow runs in ``foreachBatch`` and gets no no-data micro-batches (its driver docstring), so that
is the configuration in which both must agree on every batch.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from devkit.spark_local import write_batches
from examples import max_by_category as mbc
from fsstate_spark import operators as ops
from tests.support.flow_cases import (
    Case,
    assert_same,
    make_batches,
)

pytestmark = [pytest.mark.slow, pytest.mark.compat_full]  # compat_full: make test-compat-full

AGGS = [ops.Agg("count"), ops.Agg("sum", "v"), ops.Agg("min", "v"), ops.Agg("max", "v")]


def _spark_aggs() -> list[Any]:
    return [F.count(F.lit(1)), F.sum("v"), F.min("v"), F.max("v"), F.avg("v")]


@pytest.mark.parametrize(
    ("seed", "slide_s", "mode"),
    [(1, None, "append"), (2, 5, "append"), (3, 5, "update"), (4, None, "update")],
)
def test_window_aggregate_equals_spark(
    spark: SparkSession, tmp_path: Path, seed: int, slide_s: int | None, mode: str
) -> None:
    case = Case(spark, tmp_path, [make_batches(seed)])
    w = F.window("t", "10 seconds", f"{slide_s} seconds" if slide_s else None)
    spark_out = (
        case.frame()
        .withWatermark("t", "5 seconds")
        .groupBy(w.alias("window"), "k")
        .agg(*_spark_aggs())
    )
    window = ops.Window(size_ms=10_000, slide_ms=slide_s * 1000 if slide_s else None)
    flow = ops.source(case.frame(), watermark=("t", "5 seconds")).window_aggregate(
        keys=["k"], time="t", window=window, aggs=[*AGGS, ops.Agg("avg", "v")], mode=mode
    )
    assert_same(seed, case.builtin(spark_out, mode), case.fsstate(flow))


def test_session_window_equals_spark(spark: SparkSession, tmp_path: Path) -> None:
    seed = 5
    case = Case(spark, tmp_path, [make_batches(seed)])
    spark_out = (
        case.frame()
        .withWatermark("t", "4 seconds")
        .groupBy(F.session_window("t", "3 seconds").alias("session_window"), "k")
        .agg(F.count(F.lit(1)), F.sum("v"), F.min("v"), F.max("v"))
    )
    flow = ops.source(case.frame(), watermark=("t", "4 seconds")).session_aggregate(
        keys=["k"], time="t", gap_ms=3_000, aggs=AGGS
    )
    assert_same(seed, case.builtin(spark_out), case.fsstate(flow))


@pytest.mark.parametrize(("seed", "how"), [(6, "inner"), (7, "left_outer")])
def test_interval_join_equals_spark(
    spark: SparkSession, tmp_path: Path, seed: int, how: str
) -> None:
    case = Case(spark, tmp_path, [make_batches(seed), make_batches(seed + 100)])
    left = case.frame(0).withWatermark("t", "5 seconds")
    right = case.frame(1).withWatermark("t", "3 seconds")
    lf = left.select(*[F.col(c).alias(f"l_{c}") for c in left.columns])
    rf = right.select(*[F.col(c).alias(f"r_{c}") for c in right.columns])
    cond = F.expr("l_k = r_k AND r_t BETWEEN l_t - INTERVAL 4 SECONDS AND l_t + INTERVAL 6 SECONDS")
    spark_out = lf.join(rf, cond, how).select("l_id", "r_id")
    flow = ops.interval_join(
        ops.source(case.frame(0), watermark=("t", "5 seconds")),
        ops.source(case.frame(1), watermark=("t", "3 seconds")),
        on=["k"],
        left_time="t",
        right_time="t",
        lower_ms=4_000,
        upper_ms=6_000,
        how=how,
    ).transform(lambda df: df.select("left.id", "right.id"))
    assert_same(seed, case.builtin(spark_out), case.fsstate(flow))


def test_dedup_within_watermark_equals_spark(spark: SparkSession, tmp_path: Path) -> None:
    seed = 8
    case = Case(spark, tmp_path, [make_batches(seed, rows=20, one_time_per_key=True)])
    spark_out = (
        case.frame()
        .withWatermark("t", "6 seconds")
        .dropDuplicatesWithinWatermark(["k"])
        .select("k")
    )
    flow = (
        ops.source(case.frame(), watermark=("t", "6 seconds"))
        .deduplicate(keys=["k"], time="t")
        .transform(lambda df: df.select("k"))
    )
    assert_same(seed, case.builtin(spark_out), case.fsstate(flow))


# -- the seed-003 query: a join of two change streams feeding MAX with retractions ------------
def _changes(seed: int, batches: int) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Inserts and deletes (of rows present) on both sides, per batch."""
    rng = random.Random(seed)
    info: Counter[tuple[str, str]] = Counter()
    visit: Counter[tuple[str, str, int]] = Counter()
    out = []
    for _ in range(batches):
        di, dv = [], []
        for _ in range(rng.randrange(0, 6)):
            if +info and rng.random() < 0.2:
                row = rng.choice(sorted((+info).elements()))
                info[row] -= 1
                di.append({"product": row[0], "category": row[1], "op": -1})
            else:
                row = (f"p{rng.randrange(5)}", f"c{rng.randrange(3)}")
                info[row] += 1
                di.append({"product": row[0], "category": row[1], "op": 1})
        for _ in range(rng.randrange(0, 10)):
            if +visit and rng.random() < 0.3:
                vrow = rng.choice(sorted((+visit).elements()))
                visit[vrow] -= 1
                dv.append({"product": vrow[0], "user": vrow[1], "length": vrow[2], "op": -1})
            else:
                vrow = (f"p{rng.randrange(5)}", rng.choice("uvw"), rng.randrange(0, 40))
                visit[vrow] += 1
                dv.append({"product": vrow[0], "user": vrow[1], "length": vrow[2], "op": 1})
        out.append((di, dv))
    return out


def _recompute(spark: SparkSession, root: Path, upto: int) -> dict[str, tuple[Any, ...]]:
    """The query over the net contents after batch ``upto``, by Spark's batch operators."""

    def net(name: str, schema: str, cols: list[str]) -> DataFrame:
        files = sorted(str(p) for p in (root / name).iterdir() if p.suffix == ".json")
        df = spark.read.schema(schema).json(files[: upto + 1])
        n = df.groupBy(*cols).agg(F.sum("op").alias("n")).where("n > 0")
        return n.select(*cols, F.explode(F.sequence(F.lit(1), "n")).alias("_i")).drop("_i")

    info = net("info", mbc.INFO_SCHEMA, ["product", "category"])
    visit = net("visit", mbc.VISIT_SCHEMA, ["product", "user", "length"])
    rows = (
        info.join(visit, "product")
        .groupBy("category")
        .agg(F.count(F.lit(1)), F.sum("length"), F.min("length"), F.max("length"))
        .collect()
    )
    return {r[0]: tuple(r[1:]) for r in rows}


def test_seed_query_on_spark(spark: SparkSession, tmp_path: Path) -> None:
    """The seed's worked example: Fruit 40 and Vegetable 50; + Potato Eve 60 moves Vegetable
    to 60 (-50, +60); deleting that visit moves it back."""
    write_batches(tmp_path / "info", [i for i, _ in mbc.SEED_BATCHES])
    write_batches(tmp_path / "visit", [v for _, v in mbc.SEED_BATCHES])
    got: dict[int, list[tuple[Any, ...]]] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        got[batch_id] = sorted((r.op, r.category, r.max_length) for r in df.collect())

    query = (
        ops.write_stream(
            mbc.flow(*mbc.streams(spark, tmp_path)),
            checkpoint_location=str(tmp_path / "ckpt"),
            sink=sink,
            partitions=2,
        )
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    assert got == {
        0: [(1, "Fruit", 40), (1, "Vegetable", 50)],
        1: [(-1, "Vegetable", 50), (1, "Vegetable", 60)],
        2: [(-1, "Vegetable", 60), (1, "Vegetable", 50)],
    }


def test_retractions_equal_a_batch_recomputation(spark: SparkSession, tmp_path: Path) -> None:
    """Random inserts and deletes on both inputs, a restart half way: after every micro-batch
    the view kept from the changelog equals Spark's batch join + aggregation of the net
    contents so far."""
    seed, n = 11, 8
    changes = _changes(seed, n)
    aggs = [ops.Agg("count"), ops.Agg("sum", "length"), ops.Agg("min", "length")]
    aggs.append(ops.Agg("max", "length"))
    view: dict[str, tuple[Any, ...]] = {}
    views: dict[int, dict[str, tuple[Any, ...]]] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        for r in sorted(df.collect(), key=lambda r: r["op"]):  # retractions first
            row = tuple(r[a.name] for a in aggs)
            if r["op"] < 0:
                assert view.pop(r["category"]) == row, f"seed {seed}, batch {batch_id}"
            else:
                assert r["category"] not in view, f"seed {seed}, batch {batch_id}"
                view[r["category"]] = row
        views[batch_id] = dict(view)

    for part in (changes[: n // 2], changes[n // 2 :]):  # two runs: a restart in between
        write_batches(tmp_path / "info", [i for i, _ in part])
        write_batches(tmp_path / "visit", [v for _, v in part])
        joined = ops.changelog_join(
            ops.source(mbc.streams(spark, tmp_path)[0]),
            ops.source(mbc.streams(spark, tmp_path)[1]),
            on=["product"],
        )
        flow = joined.transform(
            lambda df: df.select("left.category", "right.length", "op")
        ).retract_aggregate(keys=["category"], aggs=aggs)
        query = (
            ops.write_stream(
                flow, checkpoint_location=str(tmp_path / "ckpt"), sink=sink, partitions=3
            )
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    assert sorted(views) == list(range(n))
    for b in range(n):
        assert views[b] == _recompute(spark, tmp_path, b), f"seed {seed}, batch {b}"
    assert max(len(v) for v in views.values()) == 3, f"seed {seed}: too little output ({views})"


def test_batch_processor_on_spark_equals_a_model(spark: SparkSession, tmp_path: Path) -> None:
    """A user BatchProcessor (value table with get_many / put_many / delete_many) over random
    adds and resets, with a restart half way: each batch's output equals a dict model's."""
    from tests.support.batch_processors import RunningStats

    rng = random.Random(13)
    batches = [
        [
            {"k": rng.choice("abcdefg"), "v": rng.randint(-5, 9), "op": op}
            for op in rng.choices(["add", "add", "add", "add", "reset"], k=rng.randint(0, 12))
        ]
        for _ in range(6)
    ]
    model: dict[str, tuple[int, int]] = {}
    want: dict[int, list[tuple[Any, ...]]] = {}
    for b, rows in enumerate(batches):
        for r in rows:
            if r["op"] == "reset":
                model.pop(r["k"], None)
        touched = set()
        for r in rows:
            if r["op"] == "add":
                n, total = model.get(r["k"], (0, 0))
                model[r["k"]] = (n + 1, total + r["v"])
                touched.add(r["k"])
        want[b] = sorted((k, *model[k]) for k in touched)
    got: dict[int, list[tuple[Any, ...]]] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        got[batch_id] = sorted(tuple(r) for r in df.collect())

    for part in (batches[:3], batches[3:]):  # two runs: a restart in between
        write_batches(tmp_path / "in", part)
        df = (
            spark.readStream.schema("k STRING, v BIGINT, op STRING")
            .option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "in"))
        )
        flow = ops.source(df).process(RunningStats(), keys=["k"])
        query = (
            ops.write_stream(
                flow, checkpoint_location=str(tmp_path / "ckpt"), sink=sink, partitions=3
            )
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    assert got == want
    assert any(r["op"] == "reset" for b in batches for r in b)
