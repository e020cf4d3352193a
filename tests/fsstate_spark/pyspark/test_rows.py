"""fsstate's Row classes (:mod:`fsstate_spark.pyspark.rows`) behave as the Rows Spark's worker
makes (``Row(*names)(*values)``): every read, comparison, conversion and error alike."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from pyspark.sql.types import Row

from fsstate_spark.pyspark.rows import CLASSES_MAX, row_class

NAMES = [
    ("k", "v", "t"),
    ("count", "index", "asDict", "v"),  # Row's and tuple's own names stay methods
    ("v", "w", "v"),  # a repeated name reads its first column
    ("a b", "1x", "__x", "_y"),  # not identifiers, dunder, private
    (),
]


def _pair(names: tuple[str, ...]) -> tuple[Any, Any]:
    values = tuple(range(10, 10 + len(names)))
    return tuple.__new__(row_class(names), values), Row(*names)(*values)


def _outcome(f: Any) -> Any:
    try:
        return ("ok", f())
    except Exception as exc:  # the same error type as Spark's Row raises
        return ("raised", type(exc).__name__)


@pytest.mark.parametrize("names", NAMES, ids=lambda n: ",".join(n) or "none")
def test_rows_read_compare_and_convert_as_sparks(names: tuple[str, ...]) -> None:
    ours, spark = _pair(names)
    assert isinstance(ours, Row)
    assert ours == spark and hash(ours) == hash(spark) and tuple(ours) == tuple(spark)
    assert ours.__fields__ == spark.__fields__ and repr(ours) == repr(spark)
    assert _outcome(ours.asDict) == _outcome(spark.asDict)
    for name in (*names, "missing", "__missing", "count", "index"):
        got = _outcome(lambda r=ours, n=name: getattr(r, n))
        want = _outcome(lambda r=spark, n=name: getattr(r, n))
        if got[0] == "ok" and callable(got[1]):  # bound methods: the same method, called
            assert want[0] == "ok" and got[1].__name__ == want[1].__name__
            continue
        assert got == want, name
        assert _outcome(lambda r=ours, n=name: r[n]) == _outcome(lambda r=spark, n=name: r[n])
        assert (name in ours) == (name in spark)
    back = pickle.loads(pickle.dumps(ours))
    assert back == spark and back.__fields__ == spark.__fields__


def test_row_classes_are_kept_per_names_and_bounded() -> None:
    assert row_class(("k", "v")) is row_class(("k", "v"))
    first = row_class(("bounded-0",))
    for i in range(CLASSES_MAX):
        row_class((f"bounded-{i + 1}",))
    assert row_class(("bounded-0",)) is not first
