"""The worker module's conf line never changes another Python UDF, on any PySpark it can be set on.

The suite's session runs fsstate's worker module (``spark.python.worker.module =
pyspark_fsstate.worker``, conf/spark-defaults.conf); every kind of Python UDF this PySpark has
runs through it here and must give exactly the rows plain Python computes for the same input:
``udf`` (pickled and Arrow-optimized), ``pandas_udf`` (scalar, iterator, grouped aggregate),
Arrow UDFs where the release has them, ``mapInPandas``, ``mapInArrow``, ``applyInPandas``,
``applyInArrow`` where present, cogrouped ``applyInPandas``. Run on every supported PySpark
minor and Python by ``make test-compat``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

# the compatibility matrix (devkit/compat_matrix.py): every other minor and every other Python
pytestmark = [pytest.mark.compat, pytest.mark.compat_python]

N = 20
EXPECTED_PLUS_ONE = [(i, i + 1) for i in range(N)]


def _pairs(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _plus_one_series(s: pd.Series) -> pd.Series:
    return s + 1


def _plus_one_iter(it: Iterator[pd.Series]) -> Iterator[pd.Series]:
    for s in it:
        yield s + 1


def _map_pandas(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for pdf in it:
        yield pdf.assign(v=pdf.id + 1)


def _map_arrow(it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow.compute as pc

    for batch in it:
        ids = batch.column(0)
        yield pa.RecordBatch.from_arrays([ids, pc.add(ids, 1)], names=["id", "v"])


def _group_sum(pdf: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"k": [pdf.k.iloc[0]], "s": [int(pdf.id.sum())]})


def _cogroup(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    k = left.k.iloc[0] if len(left) else right.k.iloc[0]
    return pd.DataFrame({"k": [k], "n": [len(left) + len(right)]})


@pytest.fixture()
def ids(spark: SparkSession) -> DataFrame:
    return spark.range(N).select(F.col("id").cast("long").alias("id"))


def test_row_at_a_time_udfs_run_as_stock(ids: DataFrame) -> None:
    """``udf`` pickled and Arrow-optimized (``useArrow=True``)."""
    plus = F.udf(lambda x: x + 1, "long")
    assert _pairs(ids.select("id", plus("id"))) == EXPECTED_PLUS_ONE
    arrow_plus = F.udf(lambda x: x + 1, "long", useArrow=True)
    assert _pairs(ids.select("id", arrow_plus("id"))) == EXPECTED_PLUS_ONE


def test_pandas_udfs_run_as_stock(ids: DataFrame) -> None:
    """Scalar, scalar iterator and grouped-aggregate ``pandas_udf``."""
    scalar = F.pandas_udf(_plus_one_series, "long")
    assert _pairs(ids.select("id", scalar("id"))) == EXPECTED_PLUS_ONE
    iterator = F.pandas_udf(_plus_one_iter, "long")
    assert _pairs(ids.select("id", iterator("id"))) == EXPECTED_PLUS_ONE

    @F.pandas_udf("long")  # type: ignore[call-overload]
    def total(s: pd.Series) -> int:
        return int(s.sum())

    grouped = ids.withColumn("k", F.col("id") % 3).groupBy("k").agg(total("id"))
    expected = sorted((k, sum(i for i in range(N) if i % 3 == k)) for k in range(3))
    assert _pairs(grouped) == expected


def test_arrow_udfs_run_as_stock(ids: DataFrame) -> None:
    """Arrow scalar UDFs (``arrow_udf``, PySpark 4.1+)."""
    arrow_udf = getattr(F, "arrow_udf", None)
    if arrow_udf is None:
        pytest.skip(f"PySpark {pyspark.__version__} has no arrow_udf")
    import pyarrow.compute as pc

    plus = arrow_udf(lambda a: pc.add(a, 1), "long")
    assert _pairs(ids.select("id", plus("id"))) == EXPECTED_PLUS_ONE


def test_map_and_grouped_functions_run_as_stock(ids: DataFrame) -> None:
    """``mapInPandas``, ``mapInArrow``, ``applyInPandas``, cogrouped ``applyInPandas`` and
    ``applyInArrow`` where the release has it."""
    schema = "id long, v long"
    assert _pairs(ids.mapInPandas(_map_pandas, schema)) == EXPECTED_PLUS_ONE
    assert _pairs(ids.mapInArrow(_map_arrow, schema)) == EXPECTED_PLUS_ONE
    keyed = ids.withColumn("k", F.col("id") % 4)
    sums = keyed.groupBy("k").applyInPandas(_group_sum, "k long, s long")
    assert _pairs(sums) == sorted((k, sum(i for i in range(N) if i % 4 == k)) for k in range(4))
    other = keyed.filter(F.col("id") < 6)
    co = keyed.groupBy("k").cogroup(other.groupBy("k")).applyInPandas(_cogroup, "k long, n long")
    counts = [(k, sum(1 for i in range(N) if i % 4 == k) + sum(1 for i in range(6) if i % 4 == k))
              for k in range(4)]  # fmt: skip
    assert _pairs(co) == sorted(counts)
    grouped = keyed.groupBy("k")
    if hasattr(grouped, "applyInArrow"):

        def arrow_sum(table: pa.Table) -> pa.Table:
            import pyarrow.compute as pc

            k = table.column("k")[0].as_py()
            return pa.table({"k": [k], "s": [pc.sum(table.column("id")).as_py()]})

        got = grouped.applyInArrow(arrow_sum, "k long, s long")
        assert _pairs(got) == _pairs(sums)


def test_the_session_runs_fsstates_worker_module(spark: SparkSession) -> None:
    """The tests above ran through fsstate's worker module (or this run says why not)."""
    module = spark.sparkContext.getConf().get("spark.python.worker.module", None)
    if module is None:
        pytest.skip("this run's session does not set spark.python.worker.module")
    assert module == "pyspark_fsstate.worker"
