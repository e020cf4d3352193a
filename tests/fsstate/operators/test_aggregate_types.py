"""Aggregates over every column type Spark aggregates, on the engine (LocalQuery): min / max
over timestamps, dates, booleans, strings and NaN; exact decimal sums and averages typed as
Spark types them; global aggregates (``keys=[]``); nulls and all-null groups; the types
Spark refuses, refused with a ConfigError before anything runs. Then seeded random queries
(types, 0-2 keys, aggregates, several epochs and partitions, restarts) against a pure-Python
statement of Spark's rules; the seed is in every assertion message.

Spark's types and values were checked by hand on Spark 4.3 (local mode, ANSI on): e.g.
``sum(decimal(10,2))`` is decimal(20,2), ``avg`` of it decimal(14,6) rounded half up (64 values
summing to 0.02 average to 0.000313), ``max`` of 1.0 and NaN is NaN, ``min`` is 1.0.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate.errors import ConfigError
from fsstate.operators import (
    Agg,
    Deduplicate,
    LocalQuery,
    Operator,
    RetractAggregate,
    SessionAggregate,
    Stage,
    WatermarkSpec,
    Window,
    WindowAggregate,
    run_epoch,
)
from fsstate.storage.fileio import FileIO
from fsstate.store.pool import store_pool
from tests.support import spark_rules

US = 1_000_000
TS = pa.timestamp("us", tz="UTC")
DEC = pa.decimal128(10, 2)
UTC = dt.UTC
T0 = dt.datetime(2021, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
D0 = dt.date(2021, 3, 4)
NAN = float("nan")

# values of each type, in Spark's order (ascending): the smallest first, NaN above numbers
ORDERED: dict[str, tuple[pa.DataType, list[Any]]] = {
    "timestamp": (TS, [T0 - dt.timedelta(days=400), T0, T0 + dt.timedelta(microseconds=1)]),
    "date": (pa.date32(), [D0 - dt.timedelta(days=4000), D0, D0 + dt.timedelta(days=1)]),
    "boolean": (pa.bool_(), [False, True]),
    "string": (pa.string(), ["", "B", "a", "ab"]),
    "decimal": (DEC, [Decimal("-99999999.99"), Decimal("0.01"), Decimal("99999999.99")]),
    "double": (pa.float64(), [-math.inf, -1.5, 0.25, math.inf, NAN]),
    "int64": (pa.int64(), [-(2**62), 0, 2**62]),
}


# -- helpers -----------------------------------------------------------------------------------
def _state(tmp_path: Path) -> str:
    return str(tmp_path / "state")


def _times(n: int, base_s: int = 100) -> pa.Array:
    return pa.array([(base_s + i % 3) * US for i in range(n)], pa.int64()).cast(TS)


def _input(values: list[Any], typ: pa.DataType, *, op: list[int] | None = None) -> pa.Table:
    cols: dict[str, pa.Array] = {
        "k": pa.array(["a"] * len(values), pa.string()),
        "t": _times(len(values)),
        "v": pa.array(values, typ),
    }
    if op is not None:
        cols["op"] = pa.array(op, pa.int8())
    return pa.table(cols)


def _make(kind: str, aggs: Sequence[Agg], keys: Sequence[str] = ("k",)) -> Operator:
    if kind == "window":
        w = Window(60_000)
        return WindowAggregate("w", keys=keys, time="t", window=w, aggs=aggs, mode="update")
    if kind == "session":
        return SessionAggregate("s", keys=keys, time="t", gap_ms=5_000, aggs=aggs)
    return RetractAggregate("r", keys=keys, aggs=aggs, output="upsert")


def _run(tmp_path: Path, kind: str, aggs: Sequence[Agg], batches: list[pa.Table]) -> dict[str, Any]:
    """The aggregate row after the batches (one group, key "a"); a session is closed by a last
    epoch whose watermark passes it."""
    op = _make(kind, aggs)
    wm = WatermarkSpec({"input": 0}) if kind != "retract" else None
    q = LocalQuery(_state(tmp_path), [Stage(op, ["k"])], partitions=2, watermark=wm)
    last: dict[str, Any] = {}
    for epoch, batch in enumerate(batches):
        store_pool().clear()  # every epoch restores the stored partials from storage
        for row in q.run(epoch, batch).to_pylist():
            last = row
    if kind == "session":
        far = _input([None], batches[0].schema.field("v").type)
        far = far.set_column(1, "t", pa.array([10**6 * US], pa.int64()).cast(TS))
        q.run(len(batches), far.set_column(0, "k", pa.array(["z"])))
        for row in q.run(len(batches) + 1, far.slice(0, 0)).to_pylist():
            if row["k"] == "a":
                last = row
    return last


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return (math.isnan(x) and math.isnan(y)) or x == y
    return bool(type(x) is type(y) and x == y)


# -- 1. min / max over every orderable type, merged with stored state ------------------------
@pytest.mark.parametrize("kind", ["window", "session", "retract"])
@pytest.mark.parametrize("name", sorted(ORDERED))
def test_min_max_over_orderable_types(tmp_path: Path, kind: str, name: str) -> None:
    typ, ordered = ORDERED[name]
    lo, hi = ordered[0], ordered[-1]
    rest = ordered[1:-1] or ordered
    # the extremes arrive in different epochs, so they merge with stored partials
    batches = [_input([rest[0], None], typ), _input([hi, None], typ), _input([lo], typ)]
    if kind == "retract":
        batches = [b.append_column("op", pa.array([1] * b.num_rows, pa.int8())) for b in batches]
    got = _run(tmp_path, kind, [Agg("min", "v"), Agg("max", "v"), Agg("count", "v")], batches)
    assert _same(got["min(v)"], lo) and _same(got["max(v)"], hi), (kind, name, got)
    assert got["count(v)"] == 3


def test_max_puts_nan_above_numbers_min_skips_it(tmp_path: Path) -> None:
    batches = [_input([1.0, NAN], pa.float64()), _input([-2.0], pa.float64())]
    got = _run(tmp_path, "window", [Agg("min", "v"), Agg("max", "v")], batches)
    assert got["min(v)"] == -2.0 and math.isnan(got["max(v)"]), got
    only_nan = _run(tmp_path / "b", "window", [Agg("min", "v")], [_input([NAN], pa.float64())])
    assert math.isnan(only_nan["min(v)"])


def test_retract_min_max_retracting_nan(tmp_path: Path) -> None:
    aggs = [Agg("min", "v"), Agg("max", "v")]
    b0 = _input([NAN, 1.0, NAN], pa.float64(), op=[1, 1, 1])
    b1 = _input([NAN], pa.float64(), op=[-1])
    b2 = _input([NAN], pa.float64(), op=[-1])
    assert math.isnan(_run(tmp_path, "retract", aggs, [b0, b1])["max(v)"])
    got = _run(tmp_path / "b", "retract", aggs, [b0, b1, b2])
    assert got["min(v)"] == 1.0 and got["max(v)"] == 1.0, got


# -- 2. decimals: exact sums and averages, Spark's types --------------------------------------
@pytest.mark.parametrize("kind", ["window", "session", "retract"])
def test_decimal_sum_and_avg_exact(tmp_path: Path, kind: str) -> None:
    big = Decimal("99999999.99")
    values: list[list[Any]] = [[big, Decimal("0.01"), None], [big, Decimal("-0.03")]]
    batches = [_input(v, DEC) for v in values]
    if kind == "retract":
        batches = [b.append_column("op", pa.array([1] * b.num_rows, pa.int8())) for b in batches]
    aggs = [Agg("sum", "v"), Agg("avg", "v")]
    got = _run(tmp_path, kind, aggs, batches)
    schema = _make(kind, aggs).output_schema(batches[0].schema)
    assert schema.field("sum(v)").type == pa.decimal128(20, 2)
    assert schema.field("avg(v)").type == pa.decimal128(14, 6)
    assert got["sum(v)"] == Decimal("199999999.96")
    assert got["avg(v)"] == Decimal("49999999.990000")


@pytest.mark.parametrize("kind", ["window", "retract"])
@pytest.mark.parametrize("sign", [1, -1])
def test_decimal_avg_rounds_half_up(tmp_path: Path, kind: str, sign: int) -> None:
    cent = Decimal("0.01") * sign
    batches = [_input([cent] + [Decimal(0)] * 31, DEC), _input([cent] + [Decimal(0)] * 31, DEC)]
    if kind == "retract":
        batches = [b.append_column("op", pa.array([1] * b.num_rows, pa.int8())) for b in batches]
    got = _run(tmp_path, kind, [Agg("avg", "v")], batches)
    assert got["avg(v)"] == Decimal("0.000313") * sign  # 0.0003125: Spark rounds half up


def test_decimal_precision_is_bounded_at_38(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.string()), ("t", TS), ("v", pa.decimal128(36, 30))])
    op = _make("window", [Agg("sum", "v"), Agg("avg", "v")])
    out = op.output_schema(schema)
    assert out.field("sum(v)").type == pa.decimal128(38, 30)
    assert out.field("avg(v)").type == pa.decimal128(38, 34)


# -- 3. global aggregates: keys=[] -------------------------------------------------------------
def _global_rows(changes: list[dict[str, Any]], view: Counter[tuple[Any, ...]]) -> None:
    for r in changes:
        row = tuple(v for k, v in sorted(r.items()) if k != "op")
        view[row] += r["op"]
        if not view[row]:
            del view[row]


@pytest.mark.parametrize("partitions", [1, 3])
def test_retract_aggregate_without_keys(tmp_path: Path, partitions: int) -> None:
    aggs = [Agg("count"), Agg("count", "v"), Agg("sum", "v"), Agg("max", "v"), Agg("avg", "v")]
    op = RetractAggregate("g", keys=[], aggs=aggs)
    q = LocalQuery(_state(tmp_path), [Stage(op, [])], partitions=partitions)
    schema = pa.schema([("v", pa.int64()), ("op", pa.int8())])
    epochs: list[list[tuple[int | None, int]]] = [[], [(5, 1), (None, 1), (7, 1)], [(7, -1)]]
    epochs += [[(5, -1), (None, -1)], [], [(2, 1)]]
    want = [(0, 0, None, None, None), (3, 2, 12, 7, 6.0), (2, 1, 5, 5, 5.0)]
    want += [(0, 0, None, None, None)] * 2 + [(1, 1, 2, 2, 2.0)]
    view: Counter[tuple[Any, ...]] = Counter()
    for epoch, rows in enumerate(epochs):
        batch = pa.table(
            [pa.array([v for v, _ in rows], pa.int64()), pa.array([o for _, o in rows], pa.int8())],
            schema=schema,
        )
        _global_rows(q.run(epoch, batch).to_pylist(), view)
        # the materialized changelog is one row, as SELECT ... without GROUP BY
        names = ["avg(v)", "count", "count(v)", "max(v)", "sum(v)"]
        expected = dict(zip(["count", "count(v)", "sum(v)", "max(v)", "avg(v)"], want[epoch]))
        assert view == Counter({tuple(expected[n] for n in names): 1}), (epoch, view)


def test_global_retract_refuses_rows_outside_partition_zero(tmp_path: Path) -> None:
    op = RetractAggregate("g", keys=[], aggs=[Agg("count")])
    batch = pa.table({"v": pa.array([1], pa.int64()), "op": pa.array([1], pa.int8())})
    with pytest.raises(ConfigError, match="partition 0"):
        run_epoch(op, FileIO(_state(tmp_path)), 1, 0, batch, late_ms=0, evict_ms=0)


@pytest.mark.parametrize("kind", ["window", "session"])
def test_windows_without_keys(tmp_path: Path, kind: str) -> None:
    aggs = [Agg("count"), Agg("sum", "v"), Agg("min", "v")]
    batches: list[list[dict[str, Any]]] = [
        [{"t": 1, "v": 3}, {"t": 12, "v": None}, {"t": 2, "v": -1}],
        [{"t": 14, "v": 4}, {"t": 31, "v": 9}],
        [{"t": 70, "v": 1}],
    ]
    if kind == "window":
        op: Operator = WindowAggregate("w", keys=[], time="t", window=Window(10_000), aggs=aggs)
        ref = spark_rules.model_window_agg(
            batches, key=[], time="t", size_s=10, aggs=[("count", "*"), ("sum", "v"), ("min", "v")]
        )
    else:
        op = SessionAggregate("s", keys=[], time="t", gap_ms=5_000, aggs=aggs)
        ref = spark_rules.model_window_agg(
            batches,
            key=[],
            time="t",
            session_gap_s=5,
            aggs=[("count", "*"), ("sum", "v"), ("min", "v")],
        )
    q = LocalQuery(
        _state(tmp_path), [Stage(op, [])], partitions=2, watermark=WatermarkSpec({"input": 0})
    )
    for b, rows in enumerate(batches):
        table = pa.table(
            {
                "t": pa.array([r["t"] * US for r in rows], pa.int64()).cast(TS),
                "v": pa.array([r["v"] for r in rows], pa.int64()),
            }
        )
        out = q.run(b, table).to_pylist()
        wcol = "window" if kind == "window" else "session_window"
        got = sorted(
            (
                int(r[wcol]["start"].timestamp()),
                int(r[wcol]["end"].timestamp()),
                r["count"],
                r["sum(v)"],
                r["min(v)"],
            )
            for r in out
        )
        want = sorted(
            (r["window_start"], r["window_end"], r["count"], r["sum_v"], r["min_v"])
            for r in ref[b]["rows"]
        )
        assert got == want, (kind, b, got, want)


def test_deduplicate_without_keys_is_refused() -> None:
    with pytest.raises(ConfigError, match="list every column"):
        Deduplicate("d", keys=[], time="t", delay_ms=0)


# -- 4. nulls and all-null groups ----------------------------------------------------------------
NULL_TYPES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int32": (pa.int32(), [1, 2]),
    "double": (pa.float64(), [0.5, 1.5]),
    "decimal": (DEC, [Decimal("1.10"), Decimal("2.20")]),
    "string": (pa.string(), ["x", "y"]),
    "boolean": (pa.bool_(), [True, False]),
    "timestamp": (TS, [T0, T0 + dt.timedelta(seconds=1)]),
}


def _valid_aggs(name: str) -> list[Agg]:
    aggs = [Agg("count"), Agg("count", "v"), Agg("min", "v"), Agg("max", "v")]
    if name in ("int32", "double", "decimal"):
        aggs += [Agg("sum", "v"), Agg("avg", "v")]
    return aggs


@pytest.mark.parametrize("kind", ["window", "session", "retract"])
@pytest.mark.parametrize("name", sorted(NULL_TYPES))
def test_all_null_group_then_values(tmp_path: Path, kind: str, name: str) -> None:
    typ, values = NULL_TYPES[name]
    aggs = _valid_aggs(name)
    nulls = [_input([None, None], typ), _input([None], typ)]
    with_op = kind == "retract"
    if with_op:
        nulls = [b.append_column("op", pa.array([1] * b.num_rows, pa.int8())) for b in nulls]
    got = _run(tmp_path, kind, aggs, nulls)
    assert got["count"] == 3 and got["count(v)"] == 0, got
    assert all(got[a.name] is None for a in aggs if a.func != "count"), got
    # values after an all-null state: the nulls stay skipped
    more = _input(values, typ)
    if with_op:
        more = more.append_column("op", pa.array([1] * more.num_rows, pa.int8()))
    got = _run(tmp_path / "b", kind, aggs, [*nulls, more])
    assert got["count"] == 5 and got["count(v)"] == 2, got
    assert got["min(v)"] == min(values) and got["max(v)"] == max(values), got
    if "sum(v)" in got:
        assert got["sum(v)"] == values[0] + values[1], got


# -- refused types ---------------------------------------------------------------------------
REFUSED = [
    ("sum", pa.string()),
    ("avg", pa.string()),
    ("sum", pa.bool_()),
    ("avg", pa.bool_()),
    ("sum", pa.date32()),
    ("avg", pa.date32()),
    ("sum", TS),
    ("avg", TS),
    ("sum", pa.decimal256(40, 2)),
    ("min", pa.list_(pa.int64())),
    ("max", pa.struct([("a", pa.int64())])),
    ("max", pa.duration("us")),
]


@pytest.mark.parametrize("kind", ["window", "session", "retract"])
@pytest.mark.parametrize(("func", "typ"), REFUSED, ids=[f"{f}-{t}" for f, t in REFUSED])
def test_types_spark_refuses_are_config_errors(kind: str, func: str, typ: pa.DataType) -> None:
    schema = pa.schema([("k", pa.string()), ("t", TS), ("c", typ), ("op", pa.int8())])
    op = _make(kind, [Agg("count"), Agg(func, "c", "x")])
    with pytest.raises(ConfigError) as err:
        op.output_schema(schema)
    msg = str(err.value)
    assert f"operator {op.name!r}" in msg and "'x'" in msg and "column 'c'" in msg, msg
    assert func in msg, msg


# -- seeded random queries against a pure-Python statement of Spark's rules ----------------------
TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": TS,
    "boolean": pa.bool_(),
    "decimal": DEC,
}
NUMERIC = {"int32", "int64", "double", "decimal"}


def _draw_value(rng: random.Random, name: str, nan: bool) -> Any:
    if rng.random() < 0.2:
        return None
    if name == "string":
        return rng.choice(["", "a", "ab", "b", "Z"])
    if name == "int32":
        return rng.randrange(-(2**31), 2**31) if rng.random() < 0.1 else rng.randrange(-9, 9)
    if name == "int64":
        return rng.randrange(-(2**40), 2**40)
    if name == "double":
        if nan and rng.random() < 0.1:
            return NAN
        return rng.randrange(-40, 40) / 4  # dyadic: sums are exact in any order
    if name == "date":
        return D0 + dt.timedelta(days=rng.randrange(-900, 900))
    if name == "timestamp":
        return T0 + dt.timedelta(microseconds=rng.randrange(-(10**12), 10**12))
    if name == "boolean":
        return rng.random() < 0.5
    return Decimal(rng.randrange(-(10**10) + 1, 10**10)).scaleb(-2)


def _expected_type(func: str, typ: pa.DataType) -> pa.DataType:
    if func == "count":
        return pa.int64()
    if func == "sum":
        if typ == DEC:
            return pa.decimal128(20, 2)
        return pa.float64() if typ == pa.float64() else pa.int64()
    if func == "avg":
        return pa.decimal128(14, 6) if typ == DEC else pa.float64()
    return typ


def _reference(func: str, values: list[Any], typ: pa.DataType) -> Any:
    """Spark's result over the values of one group (nulls included in ``values``)."""
    xs = [v for v in values if v is not None]
    if func == "count":
        return len(xs)
    if not xs:
        return None
    if func in ("min", "max"):
        key: Callable[[Any], Any] = lambda v: (1, 0.0) if v != v else (0, v)  # noqa: E731
        return (min if func == "min" else max)(xs, key=key)
    total = sum(xs)
    if func == "sum":
        return float(total) if typ == pa.float64() else total
    if typ == DEC:
        with localcontext() as ctx:
            ctx.prec = 100
            return (total / len(xs)).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
    return float(total) / len(xs)


def _norm(v: Any) -> Any:
    return "NaN" if isinstance(v, float) and v != v else v


def _random_query(
    rng: random.Random, allow_nan_in_sums: bool
) -> tuple[list[str], list[tuple[str, str | None]], dict[str, str]]:
    """(keys, [(func, column)], {column: type name})."""
    keys = ["k1", "k2"][: rng.choice([0, 1, 2])]
    cols = {f"c{j}": rng.choice(sorted(TYPES)) for j in range(rng.choice([1, 2]))}
    aggs: list[tuple[str, str | None]] = [("count", None)] if rng.random() < 0.5 else []
    for col, name in cols.items():
        funcs = ["count", "min", "max"] + (["sum", "avg"] if name in NUMERIC else [])
        aggs += [(f, col) for f in rng.sample(funcs, rng.randrange(1, len(funcs) + 1))]
    if not allow_nan_in_sums:  # a retracted NaN leaves a running sum NaN (see retract.py)
        for f, c in aggs:
            if f in ("sum", "avg") and c is not None and cols[c] == "double":
                cols[c] = "double:nonan"
    return keys, aggs, cols


def _schema(keys: list[str], cols: dict[str, str], extra: list[pa.Field]) -> pa.Schema:
    fields = [pa.field("k1", pa.string()), pa.field("k2", pa.int32())][: len(keys)]
    fields += [pa.field(c, TYPES[n.split(":")[0]]) for c, n in cols.items()]
    return pa.schema(fields + extra)


def _draw_row(rng: random.Random, keys: list[str], cols: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    if keys:
        row["k1"] = rng.choice(["p", "q", None])
    if len(keys) > 1:
        row["k2"] = rng.choice([1, 2, None])
    for c, n in cols.items():
        name, _, flag = n.partition(":")
        row[c] = _draw_value(rng, name, nan=flag != "nonan")
    return row


def _aggs(aggs: list[tuple[str, str | None]]) -> list[Agg]:
    return [Agg(f, c, f"a{j}") for j, (f, c) in enumerate(aggs)]


def _result(
    rows: list[dict[str, Any]], aggs: list[tuple[str, str | None]], schema: pa.Schema
) -> tuple[Any, ...]:
    out = []
    for f, c in aggs:
        if c is None:
            out.append(len(rows))
        else:
            out.append(_norm(_reference(f, [r[c] for r in rows], schema.field(c).type)))
    return tuple(out)


def _timed_batches(
    rng: random.Random, keys: list[str], cols: dict[str, str]
) -> list[list[dict[str, Any]]]:
    """6 batches of 0 to 13 random rows, each with an event time ``t`` (seconds) up to 12 s
    behind or 9 s ahead of a base time that moves on by 0 to 8 s a batch."""
    batches = []
    base = 100
    for _ in range(6):
        rows = [_draw_row(rng, keys, cols) for _ in range(rng.randrange(0, 14))]
        for r in rows:
            r["t"] = base + rng.randrange(-12, 10)
        base += rng.randrange(0, 9)
        batches.append(rows)
    return batches


@pytest.mark.parametrize("seed", range(16))
def test_random_window_aggregate_matches_reference(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    keys, agg_specs, cols = _random_query(rng, allow_nan_in_sums=True)
    size_s, delay_s = rng.choice([5, 10]), rng.choice([0, 4])
    mode, partitions = rng.choice(["append", "update"]), rng.choice([1, 2, 3])
    schema = _schema(keys, cols, [pa.field("t", TS)])
    params = f"seed {seed}: keys {keys} aggs {agg_specs} cols {cols} {mode} p{partitions}"
    batches = _timed_batches(rng, keys, cols)
    used, final = spark_rules.batch_watermarks(
        [[[r["t"] * US for r in b] for b in batches]], [delay_s * 1000]
    )
    plan = spark_rules._plan_batches(len(batches), used, final, False)
    op = WindowAggregate(
        "w", keys=keys, time="t", window=Window(size_s * 1000), aggs=_aggs(agg_specs), mode=mode
    )
    out_schema = op.output_schema(schema)
    for j, (f, c) in enumerate(agg_specs):
        t = pa.int64() if c is None else _expected_type(f, schema.field(c).type)
        assert out_schema.field(f"a{j}").type == t, params
    state: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for b, late, evict, _ in plan:
        touched = set()
        for r in batches[b]:
            start = r["t"] - r["t"] % size_s
            if (start + size_s) * 1000 <= late:
                continue
            g = (start, *(r[k] for k in keys))
            state.setdefault(g, []).append(r)
            touched.add(g)
        closing = [g for g in state if (g[0] + size_s) * 1000 <= evict]
        emit = touched if mode == "update" else closing
        want = Counter((*g, *_result(state[g], agg_specs, schema)) for g in emit)
        for g in closing:
            del state[g]
        if rng.random() < 0.3:
            store_pool().clear()
        q = LocalQuery(
            _state(tmp_path),
            [Stage(op, keys)],
            partitions=partitions,
            watermark=WatermarkSpec({"input": delay_s * 1000}),
        )
        table = pa.Table.from_pylist(
            [{**r, "t": dt.datetime.fromtimestamp(r["t"], UTC)} for r in batches[b]], schema
        )
        out = q.run(b, table)
        assert out.schema == out_schema, params
        got = Counter(
            (
                int(r["window"]["start"].timestamp()),
                *(r[k] for k in keys),
                *(_norm(r[f"a{j}"]) for j in range(len(agg_specs))),
            )
            for r in out.to_pylist()
        )
        assert got == want, f"{params}: epoch {b}\n got {got}\nwant {want}"


@pytest.mark.parametrize("seed", range(16))
def test_random_retract_aggregate_matches_reference(tmp_path: Path, seed: int) -> None:
    rng = random.Random(1000 + seed)
    keys, agg_specs, cols = _random_query(rng, allow_nan_in_sums=False)
    output, partitions = rng.choice(["changelog", "upsert"]), rng.choice([1, 2, 3])
    top_n = rng.choice([1, 16])
    schema = _schema(keys, cols, [pa.field("op", pa.int8())])
    params = f"seed {seed}: keys {keys} aggs {agg_specs} cols {cols} {output} p{partitions}"
    op = RetractAggregate("r", keys=keys, aggs=_aggs(agg_specs), output=output, top_n=top_n)
    out_schema = op.output_schema(schema)
    for j, (f, c) in enumerate(agg_specs):
        t = pa.int64() if c is None else _expected_type(f, schema.field(c).type)
        assert out_schema.field(f"a{j}").type == t, params
    live: list[dict[str, Any]] = []
    view: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for epoch in range(7):
        changes: list[dict[str, Any]] = []
        for _ in range(rng.randrange(0, 12)):
            if live and rng.random() < 0.4:
                changes.append({**live.pop(rng.randrange(len(live))), "op": -1})
            else:
                row = _draw_row(rng, keys, cols)
                live.append(row)
                changes.append({**row, "op": 1})
        if rng.random() < 0.3:
            store_pool().clear()
        q = LocalQuery(_state(tmp_path), [Stage(op, keys)], partitions=partitions)
        out = q.run(epoch, pa.Table.from_pylist(changes, schema))
        assert out.schema == out_schema, params
        for r in out.to_pylist():
            g = tuple(r[k] for k in keys)
            res = tuple(_norm(r[f"a{j}"]) for j in range(len(agg_specs)))
            if r["op"] == 1:
                assert output == "upsert" or g not in view, f"{params}: epoch {epoch} {r}"
                view[g] = res
            else:
                assert output == "upsert" or view.get(g) == res, f"{params}: epoch {epoch} {r}"
                view.pop(g)
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {} if keys else {(): []}
        for r in live:
            groups.setdefault(tuple(r[k] for k in keys), []).append(r)
        want = {g: _result(rows, agg_specs, schema) for g, rows in groups.items()}
        assert view == want, f"{params}: epoch {epoch}\n got {view}\nwant {want}"
