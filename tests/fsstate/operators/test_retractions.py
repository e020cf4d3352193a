"""The seed-003 query, ``SELECT category, MAX(length) FROM info JOIN visit ON product GROUP BY
category``, over change streams with inserts and deletes: the seed's worked state as a fixture,
and seeded random change sequences whose materialized output must equal a batch recomputation
after every epoch (several partitions, process restarts, a tiny min / max cache)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate.operators import Agg, ChangelogJoin, LocalQuery, RetractAggregate, Stage
from fsstate.operators.interval_join import join_input_schema
from fsstate.store.pool import store_pool

INFO = pa.schema([("product", pa.string()), ("category", pa.string())])
VISIT = pa.schema([("product", pa.string()), ("user", pa.string()), ("length", pa.int64())])
SCHEMA = join_input_schema(INFO, VISIT, [pa.string()]).append(pa.field("op", pa.int8()))

Info = tuple[str, str]
Visit = tuple[str, str, int]


def changes(info: list[tuple[int, Info]], visit: list[tuple[int, Visit]]) -> pa.Table:
    """The join's input for one epoch: (op, row) changes of both sides."""
    n, m = len(info), len(visit)
    left = pa.array([dict(zip(INFO.names, r)) for _, r in info], pa.struct(list(INFO)))
    right = pa.array([dict(zip(VISIT.names, r)) for _, r in visit], pa.struct(list(VISIT)))
    return pa.Table.from_arrays(
        [
            pa.array([0] * n + [1] * m, pa.int8()),
            pa.array([r[0] for _, r in info] + [r[0] for _, r in visit], pa.string()),
            pa.concat_arrays([left, pa.nulls(m, left.type)]),
            pa.concat_arrays([pa.nulls(n, right.type), right]),
            pa.array([op for op, _ in info] + [op for op, _ in visit], pa.int8()),
        ],
        schema=SCHEMA,
    )


def to_aggregate(joined: pa.Table) -> pa.Table:
    """The join's changes as the aggregate's input: category, length, op."""
    return pa.table(
        {
            "category": joined.column("left").combine_chunks().field("category"),
            "length": joined.column("right").combine_chunks().field("length"),
            "op": joined.column("op"),
        }
    )


def query(tmp_path: Path, partitions: int = 1, top_n: int = 16, aggs: Any = None) -> LocalQuery:
    aggs = aggs or [Agg("max", "length", "max_length")]
    return LocalQuery(
        str(tmp_path / "state"),
        [
            Stage(ChangelogJoin("info_join_visit"), ["_k0"]),
            Stage(
                RetractAggregate("max_by_category", keys=["category"], aggs=aggs, top_n=top_n),
                ["category"],
                before=to_aggregate,
            ),
        ],
        partitions=partitions,
    )


SEED_INFO = [
    ("Apple", "Fruit"),
    ("Banana", "Fruit"),
    ("Carrot", "Vegetable"),
    ("Potato", "Vegetable"),
]
SEED_VISIT = [
    ("Apple", "Alice", 10),
    ("Apple", "Bob", 20),
    ("Carrot", "Bob", 50),
    ("Banana", "Alice", 40),
]


def test_the_seed_query(tmp_path: Path) -> None:
    """The seed's worked state: Fruit 40, Vegetable 50; then + Potato Eve 60 moves Vegetable
    from 50 to 60 (DELETE Vegetable 50, INSERT Vegetable 60); retracting it moves it back."""
    q = query(tmp_path, partitions=2)
    out = q.run(0, changes([(1, r) for r in SEED_INFO], [(1, r) for r in SEED_VISIT]))
    assert sorted(out.to_pylist(), key=str) == [
        {"category": "Fruit", "max_length": 40, "op": 1},
        {"category": "Vegetable", "max_length": 50, "op": 1},
    ]
    out = q.run(1, changes([], [(1, ("Potato", "Eve", 60))]))
    assert out.to_pylist() == [
        {"category": "Vegetable", "max_length": 50, "op": -1},
        {"category": "Vegetable", "max_length": 60, "op": 1},
    ]
    out = q.run(2, changes([], [(-1, ("Potato", "Eve", 60))]))
    assert out.to_pylist() == [
        {"category": "Vegetable", "max_length": 60, "op": -1},
        {"category": "Vegetable", "max_length": 50, "op": 1},
    ]
    # a category change on the info side moves the visits of that product
    # (Vegetable's maximum stays 50: an unchanged result emits nothing)
    out = q.run(3, changes([(-1, ("Banana", "Fruit")), (1, ("Banana", "Vegetable"))], []))
    assert out.to_pylist() == [
        {"category": "Fruit", "max_length": 40, "op": -1},
        {"category": "Fruit", "max_length": 20, "op": 1},
    ]


def recompute(info: Counter[Info], visit: Counter[Visit]) -> dict[str, tuple[Any, ...]]:
    """The query on the current contents (multisets), with count, sum, min, max."""
    lengths: dict[str, list[int]] = {}
    for (product, category), ni in info.items():
        for (p2, _user, length), nv in visit.items():
            if p2 == product:
                lengths.setdefault(category, []).extend([length] * (ni * nv))
    return {c: (len(v), sum(v), min(v), max(v)) for c, v in lengths.items()}


@pytest.mark.parametrize("seed", range(8))
def test_changes_equal_a_batch_recomputation(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    aggs = [Agg("count"), Agg("sum", "length"), Agg("min", "length"), Agg("max", "length")]
    partitions = rng.choice([1, 2, 3])
    top_n = rng.choice([1, 2, 16])
    products = [f"p{i}" for i in range(6)]
    categories = ["c0", "c1", "c2"]
    info: Counter[Info] = Counter()
    visit: Counter[Visit] = Counter()
    view: dict[str, tuple[Any, ...]] = {}
    q = query(tmp_path, partitions, top_n, aggs)
    for epoch in range(40):
        di: list[tuple[int, Info]] = []
        dv: list[tuple[int, Visit]] = []
        for _ in range(rng.randrange(0, 6)):
            if +info and rng.random() < 0.4:
                row = rng.choice(sorted((+info).elements()))
                info[row] -= 1
                di.append((-1, row))
            else:
                row = (rng.choice(products), rng.choice(categories))
                info[row] += 1
                di.append((1, row))
        for _ in range(rng.randrange(0, 10)):
            if +visit and rng.random() < 0.45:
                vrow = rng.choice(sorted((+visit).elements()))
                visit[vrow] -= 1
                dv.append((-1, vrow))
            else:
                vrow = (rng.choice(products), rng.choice("uvw"), rng.randrange(0, 30))
                visit[vrow] += 1
                dv.append((1, vrow))
        info, visit = +info, +visit
        if rng.random() < 0.1:  # a restart: new operators, stores restored from storage
            store_pool().clear()
            q = query(tmp_path, partitions, top_n, aggs)
        out = q.run(epoch, changes(di, dv))
        for r in sorted(out.to_pylist(), key=lambda r: r["op"]):  # retractions first
            row = (r["count"], r["sum(length)"], r["min(length)"], r["max(length)"])
            if r["op"] < 0:
                assert view.pop(r["category"]) == row, f"seed {seed}, epoch {epoch}: retraction"
            else:
                assert r["category"] not in view, f"seed {seed}, epoch {epoch}: double insert"
                view[r["category"]] = row
        assert view == recompute(info, visit), (
            f"seed {seed}, epoch {epoch} (p{partitions}, top {top_n})"
        )
