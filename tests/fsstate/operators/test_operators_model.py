"""Operators against an executable model of Spark's rules (:mod:`spark_rules`), per micro-batch,
on seeded random inputs with late rows, null keys, several partitions and restarts of the
process (fresh operator objects and an empty store pool between batches). The model itself
is checked against Spark's built-in operators in ``tests/fsstate_spark/test_operators_spark.py``.
The seed is printed on failure."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate.operators import (
    Agg,
    Deduplicate,
    IntervalJoin,
    LocalQuery,
    SessionAggregate,
    Stage,
    WatermarkSpec,
    Window,
    WindowAggregate,
    join_input_schema,
)
from fsstate.store.pool import store_pool
from tests.support import spark_rules

US = 1_000_000
TS = pa.timestamp("us", tz="UTC")


def _seconds(us: int) -> Any:
    return us // US if us % US == 0 else us / US


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r["k"] for r in rows], pa.string()),
            "t": pa.array([round(r["t"] * US) for r in rows], pa.int64()).cast(TS),
            "v": pa.array([r["v"] for r in rows], pa.int64()),
        }
    )


def _batches(rng: random.Random, n: int = 7) -> list[list[dict[str, Any]]]:
    out = []
    base = 100
    for _ in range(n):
        rows = []
        for _ in range(rng.randrange(0, 10)):
            t = base + rng.randrange(-15, 12) + rng.choice([0, 0, 0.5])
            rows.append(
                {"k": rng.choice(["a", "b", "c", None]), "t": t, "v": rng.randrange(-5, 50)}
            )
        base += rng.randrange(0, 12)
        out.append(rows)
    return out


def _norm(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(sorted((k, v) for k, v in r.items())) for r in rows),
        key=lambda t: tuple((k, v is None, "" if v is None else v) for k, v in t),
    )


def _query(tmp_path: Path, stages: list[Stage], partitions: int, wm: WatermarkSpec) -> LocalQuery:
    return LocalQuery(str(tmp_path / "state"), stages, partitions=partitions, watermark=wm)


AGGS = [Agg("count"), Agg("sum", "v"), Agg("min", "v"), Agg("max", "v"), Agg("avg", "v")]
MODEL_AGGS = [("count", "*"), ("sum", "v"), ("min", "v"), ("max", "v"), ("avg", "v")]
NAMES = {
    "count": "count",
    "sum(v)": "sum_v",
    "min(v)": "min_v",
    "max(v)": "max_v",
    "avg(v)": "avg_v",
}


def _window_rows(out: pa.Table) -> list[dict[str, Any]]:
    rows = []
    for r in out.to_pylist():
        d = {"k": r["k"]}
        w = r["window"]
        d["window_start"] = _seconds(int(w["start"].timestamp() * US))
        d["window_end"] = _seconds(int(w["end"].timestamp() * US))
        for ours, theirs in NAMES.items():
            d[theirs] = r[ours]
        rows.append(d)
    return rows


@pytest.mark.parametrize("seed", range(12))
def test_window_aggregate_matches_spark_rules(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice([5, 10])
    slide = rng.choice([size, size // 5 * 2 or 1, 3]) if seed % 2 else size
    start = rng.randrange(0, slide)
    delay = rng.choice([0, 3, 8])
    mode = rng.choice(["append", "update"])
    partitions = rng.choice([1, 2, 3])
    batches = _batches(rng)
    want = spark_rules.model_window_agg(
        batches,
        key="k",
        time="t",
        size_s=size,
        slide_s=slide,
        start_s=start,
        aggs=MODEL_AGGS,
        delay_s=delay,
        output_mode=mode,
        no_data_batches=False,
    )
    op = WindowAggregate(
        "w",
        keys=["k"],
        time="t",
        aggs=AGGS,
        mode=mode,
        window=Window(size * 1000, slide * 1000, start * 1000),
    )
    params = (
        f"seed {seed}: size {size} slide {slide} start {start} delay {delay} {mode} p{partitions}"
    )
    for b, rows in enumerate(batches):
        if rng.random() < 0.3:
            store_pool().clear()  # a new worker process: stores restored from storage
        q = _query(tmp_path, [Stage(op, ["k"])], partitions, WatermarkSpec({"input": delay * 1000}))
        got = _window_rows(q.run(b, _table(rows)))
        for r in got:
            if r["avg_v"] is not None:
                r["avg_v"] = round(r["avg_v"], 9)
        for r in want[b]["rows"]:
            if r.get("avg_v") is not None:
                r["avg_v"] = round(r["avg_v"], 9)
        assert q.last_watermarks[1] == want[b]["watermark_ms"], f"{params}, batch {b}: watermark"
        assert _norm(got) == _norm(want[b]["rows"]), f"{params}, batch {b}"


@pytest.mark.parametrize("seed", range(8))
def test_dedup_matches_spark_rules(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    delay = rng.choice([0, 4, 10])
    partitions = rng.choice([1, 2])
    batches = _batches(rng)
    # the model keeps the first duplicate of a batch in its input order; the operator keeps the
    # first in canonical order (every column ascending, nulls last): give the model that order
    for rows in batches:
        rows.sort(key=lambda r: (r["k"] is None, r["k"] or "", r["t"], r["v"]))
    want = spark_rules.model_dedup(
        batches, cols=["k"], time="t", delay_s=delay, no_data_batches=False
    )
    op = Deduplicate("d", keys=["k"], time="t", delay_ms=delay * 1000)
    for b, rows in enumerate(batches):
        if rng.random() < 0.3:
            store_pool().clear()
        q = _query(tmp_path, [Stage(op, ["k"])], partitions, WatermarkSpec({"input": delay * 1000}))
        out = q.run(b, _table(rows))
        got = [
            {"k": r["k"], "t": _seconds(int(r["t"].timestamp() * US)), "v": r["v"]}
            for r in out.to_pylist()
        ]
        assert _norm(got) == _norm(want[b]["rows"]), f"seed {seed}, batch {b}"


def _join_input(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> pa.Table:
    side_t = pa.struct([("id", pa.int64()), ("k", pa.string()), ("t", TS)])
    schema = join_input_schema(pa.schema(list(side_t)), pa.schema(list(side_t)), [pa.string()])

    def struct(rows: list[dict[str, Any]]) -> pa.StructArray:
        return pa.StructArray.from_arrays(
            [
                pa.array([r["id"] for r in rows], pa.int64()),
                pa.array([r["k"] for r in rows], pa.string()),
                pa.array([round(r["t"] * US) for r in rows], pa.int64()).cast(TS),
            ],
            fields=list(side_t),
        )

    nl, nr = len(left), len(right)
    return pa.Table.from_arrays(
        [
            pa.array([0] * nl + [1] * nr, pa.int8()),
            pa.array([r["k"] for r in left + right], pa.string()),
            pa.concat_arrays([struct(left), pa.nulls(nr, side_t)]),
            pa.concat_arrays([pa.nulls(nl, side_t), struct(right)]),
        ],
        schema=schema,
    )


@pytest.mark.parametrize("seed", range(10))
def test_interval_join_matches_spark_rules(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    how = rng.choice(["inner", "left_outer"])
    lower, upper = rng.choice([(5, 5), (0, 10), (10, 0), (3, 7)])
    dl, dr = rng.choice([0, 5]), rng.choice([0, 5, 10])
    partitions = rng.choice([1, 2])
    lefts, rights = [], []
    ids = iter(range(10_000))
    for rows in _batches(rng):
        lefts.append([{"id": next(ids), "k": r["k"], "t": r["t"]} for r in rows[: len(rows) // 2]])
        rights.append([{"id": next(ids), "k": r["k"], "t": r["t"]} for r in rows[len(rows) // 2 :]])
    want = spark_rules.model_join(
        lefts,
        rights,
        key="k",
        time="t",
        lower_s=lower,
        upper_s=upper,
        how=how,
        left_delay_s=dl,
        right_delay_s=dr,
        no_data_batches=False,
    )
    op = IntervalJoin(
        "j", left_time="t", right_time="t", lower_ms=lower * 1000, upper_ms=upper * 1000, how=how
    )
    wm = WatermarkSpec({"left": dl * 1000, "right": dr * 1000})
    for b, (lrows, rrows) in enumerate(zip(lefts, rights)):
        if rng.random() < 0.3:
            store_pool().clear()
        q = _query(tmp_path, [Stage(op, ["_k0"])], partitions, wm)
        out = q.run(b, _join_input(lrows, rrows))
        got = []
        for r in out.to_pylist():
            d = {}
            for side, p in (("left", "l"), ("right", "r")):
                row = r[side] or {"id": None, "k": None, "t": None}
                d[f"{p}_id"], d[f"{p}_k"] = row["id"], row["k"]
                d[f"{p}_t"] = None if row["t"] is None else _seconds(int(row["t"].timestamp() * US))
            got.append(d)
        # the model pads with the side's columns: compare the same fields
        want_rows = (
            [{k: v for k, v in r.items() if k in got[0]} for r in want[b]["rows"]]
            if got
            else want[b]["rows"]
        )
        assert _norm(got) == _norm(want_rows), (
            f"seed {seed} ({how}, {lower}/{upper}, wm {dl}/{dr}), batch {b}"
        )


@pytest.mark.parametrize("seed", range(10))
def test_session_aggregate_matches_spark_rules(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    gap = rng.choice([2, 5, 10])
    delay = rng.choice([0, 3, 8])
    partitions = rng.choice([1, 2])
    batches = _batches(rng)
    want = spark_rules.model_window_agg(
        batches,
        key="k",
        time="t",
        session_gap_s=gap,
        aggs=MODEL_AGGS,
        delay_s=delay,
        no_data_batches=False,
    )
    op = SessionAggregate("s", keys=["k"], time="t", gap_ms=gap * 1000, aggs=AGGS)
    for b, rows in enumerate(batches):
        if rng.random() < 0.3:
            store_pool().clear()
        q = _query(tmp_path, [Stage(op, ["k"])], partitions, WatermarkSpec({"input": delay * 1000}))
        out = q.run(b, _table(rows))
        out = out.rename_columns(["window", *out.column_names[1:]])
        got = _window_rows(out)
        for r in got + want[b]["rows"]:
            if r.get("avg_v") is not None:
                r["avg_v"] = round(r["avg_v"], 9)
        assert _norm(got) == _norm(want[b]["rows"]), (
            f"seed {seed} (gap {gap}, delay {delay}), batch {b}"
        )
