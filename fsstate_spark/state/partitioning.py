"""Where Spark's hash partitioning sends a key: each key row's partition, computed by Spark.

Both rescales (a flow's stages, :mod:`fsstate_spark.operators.rescale`; a ``tiered()`` query,
:mod:`fsstate_spark.tiered.rescale`) must put every key into the store of the partition the
query's next shuffle sends its rows to. That partition is ``pmod(hash(keys...), M)``: Spark's
``HashPartitioning`` on the grouping or partition columns (Murmur3 with seed 42 over the
columns in order; a struct of the columns hashes the same, which is what Spark's own offline
repartition of a checkpoint uses on its ``partition_key`` column).

Invariants:

* No Python re-implementation of Spark's hash exists to drift: the key columns, as the state
  holds them, become a DataFrame (Arrow to Spark types, the conversion the state's Arrow types
  came from; with ``key_type``, each column is cast to the Spark type the query groups by, so
  an int32 column hashes as Spark's ``IntegerType`` does) and Spark evaluates the expression.
* One small Spark job per call (a key range of the state), on the caller's session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

__all__ = ["spark_partitioner"]

_INDEX = "_fsstate_row"


def spark_partitioner(
    spark: SparkSession,
    keys: Sequence[str],
    partitions: int,
    key_type: StructType | None = None,
) -> Callable[[pa.Table], np.ndarray]:
    """A ``partition_of`` for :func:`fsstate.store.rescale.rescale`: each key row's partition
    as Spark's hash partitioning into ``partitions`` computes it (see the module docstring).

    Args:
        spark: the session that evaluates the hash.
        keys: the key columns, in the order the query hashes them.
        partitions: the partition count.
        key_type: the Spark types of the key columns (by name), if known; the Arrow types'
            Spark counterparts otherwise.
    """
    types = {f.name: f.dataType for f in key_type.fields} if key_type is not None else {}

    def partition_of(key_table: pa.Table) -> np.ndarray:
        n = key_table.num_rows
        if not n:
            return np.zeros(0, dtype=np.int64)
        indexed = key_table.append_column(_INDEX, pa.array(np.arange(n, dtype=np.int64)))
        df = spark.createDataFrame(indexed)
        cols = [F.col(k).cast(types[k]) if k in types else F.col(k) for k in keys]
        where = F.pmod(F.hash(*cols), F.lit(partitions)).cast("long")
        got = df.select(F.col(_INDEX), where.alias("p")).toArrow()
        out = np.empty(n, dtype=np.int64)
        out[got.column(_INDEX).to_numpy()] = got.column("p").to_numpy()
        return out

    return partition_of
