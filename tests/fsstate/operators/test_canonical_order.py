"""The runner's canonical order: one order for one set of rows, whatever order they came in,
led by the columns an operator groups by when it names them (``Operator.leading_order``)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from fsstate.operators import base
from fsstate.operators.base import canonical_order, leading_columns

STRUCT = pa.struct([("x", pa.int64()), ("y", pa.string())])


def _table(seed: int, n: int = 300) -> pa.Table:
    """Few distinct values per column: many rows tie on every sortable column and differ
    only in a list or a map."""
    rng = random.Random(seed)
    return pa.table(
        {
            "a": pa.array([rng.choice([None, 1, 2, 3]) for _ in range(n)], pa.int64()),
            "k": pa.array([rng.choice([None, "p", "q", "r", "s"]) for _ in range(n)]),
            "s": pa.array(
                [{"x": rng.randrange(3), "y": rng.choice("uv")} for _ in range(n)], STRUCT
            ),
            "l": pa.array([[rng.randrange(9)] for _ in range(n)], pa.list_(pa.int64())),
            "d": pa.array([rng.choice("xyz") for _ in range(n)]).dictionary_encode(),
            "m": pa.array(
                [[("e", rng.randrange(4))] for _ in range(n)], pa.map_(pa.string(), pa.int64())
            ),
            "z": pa.nulls(n),
        }
    )


def _shuffled(table: pa.Table, seed: int) -> pa.Table:
    order = list(range(table.num_rows))
    random.Random(seed).shuffle(order)
    return table.take(pa.array(order))


def _sort_key(row: dict[str, object], cols: list[str]) -> tuple[object, ...]:
    """Ascending with nulls last, as Arrow sorts."""
    out: list[object] = []
    for c in cols:
        v = row[c] if "." not in c else row[c.split(".")[0]][c.split(".")[1]]  # type: ignore[index]
        if isinstance(v, list):
            v = repr(v)  # lists and maps break ties by their repr, after the other columns
        out += [v is None, v if v is not None else 0]
    return tuple(out)


@pytest.mark.parametrize("first", [(), ("k",), ("k", "a")])
def test_one_order_for_one_set_of_rows_led_by_the_named_columns(first: tuple[str, ...]) -> None:
    table = _table(1)
    lead = leading_columns(table.schema, first)
    assert lead == first
    want = canonical_order(table, lead)
    for seed in range(5):
        assert canonical_order(_shuffled(table, seed), lead).equals(want)
    rest = [c for c in ("a", "k", "s.x", "s.y", "d") if c not in lead] + ["l", "m"]
    rows = want.to_pylist()
    assert rows == sorted(rows, key=lambda r: _sort_key(r, [*lead, *rest]))


def test_leading_columns_are_top_level_sortable_and_unambiguous() -> None:
    schema = _table(2).schema
    assert leading_columns(schema, ("s",)) == ()  # a struct: its fields sort, not it
    assert leading_columns(schema, ("l",)) == ()  # a list does not sort
    assert leading_columns(schema, ("missing",)) == ()
    assert leading_columns(schema, ("k", "missing")) == ()
    clash = pa.schema([("s.x", pa.int64()), ("s", STRUCT)])  # "s.x" twice once flattened
    assert leading_columns(clash, ("s.x",)) == ()
    assert leading_columns(schema, ()) == ()


def test_nested_columns_are_printed_only_to_break_ties(monkeypatch: pytest.MonkeyPatch) -> None:
    printed: list[int] = []
    real = base._printed

    def counting(col: pa.ChunkedArray) -> pa.Array:
        printed.append(len(col))
        return real(col)

    monkeypatch.setattr(base, "_printed", counting)
    lists = pa.array([[3], [1], [2], [1]], pa.list_(pa.int64()))
    distinct = pa.table({"k": [4, 3, 2, 1], "l": lists})
    assert canonical_order(distinct).column("k").to_pylist() == [1, 2, 3, 4]
    assert printed == []
    tied = pa.table({"k": [1, 1, 2, 2], "l": lists})
    assert canonical_order(tied).column("l").to_pylist() == [[1], [3], [1], [2]]
    assert printed == [4]
    only_nested = pa.table({"l": lists})
    assert canonical_order(only_nested).column("l").to_pylist() == [[1], [1], [2], [3]]
