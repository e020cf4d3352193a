"""Building a segment batch: rows that come in key order skip the sort and give the batch the
sort gives; constant columns (every op a put, no expiry) equal their converted lists."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from fsstate.format.schema import EXPIRES, KIND_VALUE, OP, OP_CLEAR, OP_PUT, SEQ, TableSpec
from fsstate.format.segment import _increasing, build_batch

VAL = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

# (key schema, distinct key maker, whether keys in Python's order are Arrow-increasing)
KEYS: dict[str, tuple[pa.Schema, Any, bool]] = {
    "string": (pa.schema([("k", pa.string())]), lambda i: (f"k{i * 7919 % 1000}é{i}",), True),
    "int64": (pa.schema([("k", pa.int64())]), lambda i: (i * 7919 % 100_003 - 50_000,), True),
    "timestamp": (
        pa.schema([("k", pa.timestamp("ms", tz="UTC"))]),
        lambda i: (T0 + dt.timedelta(milliseconds=i * 37),),
        True,
    ),
    "binary": (
        pa.schema([("k", pa.binary())]),
        lambda i: (b"\xff" * (i % 3) + bytes([i % 251]),),
        True,
    ),
    "decimal": (
        pa.schema([("k", pa.decimal128(10, 2))]),
        lambda i: (decimal.Decimal(i * 13 - 900) / 100,),
        True,
    ),
    # no fast path: floats (NaN, -0.0), nulls, two key columns
    "float64": (pa.schema([("k", pa.float64())]), lambda i: (i / 7 - 20.0,), False),
    "with a null": (
        pa.schema([pa.field("k", pa.string(), nullable=True)]),
        lambda i: (None if i == 0 else f"k{i:05d}",),
        False,
    ),
    "two columns": (
        pa.schema([("a", pa.int64()), ("b", pa.string())]),
        lambda i: (i % 5, f"b{i:05d}"),
        False,
    ),
}


def _rows(
    keys: list[tuple[Any, ...]], rng: random.Random, mixed: bool
) -> tuple[list[Any], list[int], list[int], list[Any]]:
    """values, seqs, ops, expires of one value-table row per key: puts only without expiry,
    or (``mixed``) clears and expiries among them."""
    values: list[Any] = []
    ops: list[int] = []
    expires: list[Any] = []
    for i in range(len(keys)):
        clear = mixed and rng.random() < 0.3
        values.append(None if clear else (i, f"v{i}"))
        ops.append(OP_CLEAR if clear else OP_PUT)
        expires.append(None if clear or not mixed or rng.random() < 0.5 else 1_000 + i)
    seqs = rng.sample(range(1, 10 * len(keys)), len(keys))
    return values, seqs, ops, expires


@pytest.mark.parametrize("mixed", [False, True], ids=["puts", "clears and expiries"])
@pytest.mark.parametrize("name", list(KEYS))
def test_rows_in_order_build_the_sorted_batch(
    name: str, mixed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema, make, fast = KEYS[name]
    spec = TableSpec("t", KIND_VALUE, VAL, schema, None, None)
    rng = random.Random(f"{name}-{mixed}")
    keys = [make(i) for i in range(200)]
    values, seqs, ops, expires = _rows(keys, rng, mixed)
    rows = list(zip(keys, values, seqs, ops, expires, strict=True))
    rng.shuffle(rows)
    shuffled = build_batch(spec, *_columns(rows))
    in_order = sorted(rows, key=lambda r: tuple((x is not None, x) for x in r[0]))
    if name != "with a null":  # the sort puts nulls last, Python's key here first
        if fast:  # rows in order are not sorted again
            with monkeypatch.context() as m:
                m.setattr(pc, "sort_indices", _no_sort)
                ordered = build_batch(spec, *_columns(in_order))
        else:
            ordered = build_batch(spec, *_columns(in_order))
        assert ordered.equals(shuffled)
    column = shuffled.column("key").field(0)
    assert _increasing(column) is fast
    assert shuffled.column("value").null_count == ops.count(OP_CLEAR)
    got = {tuple(r["key"].values()): r for r in shuffled.to_pylist()}
    for k, v, s, op, e in rows:
        r = got[tuple(k)]
        assert (r[SEQ], r[OP], r[EXPIRES]) == (s, op, e)
        assert r["value"] == (None if v is None else {"n": v[0], "s": v[1]})


def _no_sort(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("sorted rows in order")


def _columns(
    rows: list[tuple[Any, ...]],
) -> tuple[list[Any], None, list[Any], list[int], list[int], list[Any]]:
    keys, values, seqs, ops, expires = (list(c) for c in zip(*rows, strict=True))
    return keys, None, values, seqs, ops, expires


def test_increasing_needs_strict_order() -> None:
    assert _increasing(pa.array(["a", "b", "c"]))
    assert not _increasing(pa.array(["a", "a", "b"]))  # equal neighbours: not strict
    assert not _increasing(pa.array(["b", "a"]))
    assert not _increasing(pa.array([1.0, 2.0]))  # floats (NaN, -0.0): always the sort
    assert not _increasing(pa.array(["a", None]))
    assert _increasing(pa.array(["a"])) and _increasing(pa.array([], pa.string()))
    assert not _increasing(pa.array([None], pa.string()))
