"""Grouping keys, in one place: their values as the store holds them, the key a task's state
calls act on, and where Spark's hash partitioning sends them.

* Values (:func:`normalize_key`, :func:`store_key_column`): Spark hands a processor its key as
  a tuple of numpy / pandas scalars (pandas flavour) or Python values (Row flavour); the store
  holds plain Python scalars (numpy scalars by ``item()``, pandas timestamps as ``datetime``).
  A key column converted at once gives exactly what converting each key gives.
* Binding (:class:`KeyBinding`): the one grouping key the state objects of a task act on; the
  processor proxy (``tiered()``) or the processor stage (the flow driver) sets it before user
  code runs for a key, and again before each step of what the key's call yields
  (:func:`bound_items`: a lazy generator's code runs while the items are consumed, after
  other keys' calls).
* Placement: a key's partition is ``pmod(hash(keys...), M)``, Spark's ``HashPartitioning`` on
  the grouping or partition columns (Murmur3 with seed 42 over the columns in order; a struct of
  the columns hashes the same, which is what Spark's own offline repartition of a checkpoint
  uses on its ``partition_key`` column). No Python re-implementation of Spark's hash exists to
  drift: :func:`partition_column` is the expression, :func:`ints_hashed_to` and
  :func:`spark_partitioner` have Spark evaluate it (one small Spark job per call, on the
  caller's session). Both rescales (a flow's stages, a ``tiered()`` query) put every key into
  the store of the partition the query's next shuffle sends its rows to this way; the flow
  driver tags every row with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from fsstate.interfaces import Key
from fsstate_spark.settings import keeping_active_session

__all__ = [
    "KeyBinding",
    "bound_items",
    "ints_hashed_to",
    "normalize_key",
    "partition_column",
    "spark_partitioner",
    "store_key_column",
]

_INDEX = "_fsstate_row"
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def _plain(v: Any) -> Any:
    """A Python scalar for numpy / pandas scalars; anything else unchanged."""
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        return v.item()
    return v


def normalize_key(key: Any) -> Key:
    """Spark's grouping key as a tuple of plain Python scalars (a bare value is a one-field
    key)."""
    items: tuple[Any, ...] = (
        key if type(key) is tuple else (tuple(key) if isinstance(key, (tuple, list)) else (key,))
    )
    for v in items:
        if type(v) not in _PLAIN:
            return tuple(_plain(x) for x in items)
    return items


def store_key_column(values: np.ndarray[Any, Any]) -> list[Any]:
    """A key column's values as the store's: :func:`normalize_key` of each, for a whole column
    at once."""
    if values.dtype != object or set(map(type, values)) <= _PLAIN:
        out: list[Any] = values.tolist()  # numpy's ``item()`` of each element
        return out
    return [_plain(v) for v in values]


class KeyBinding:
    """The grouping key the state objects of one task currently act on."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: Key | None = None


def bound_items(items: Iterable[Any] | None, bind: Callable[[], object]) -> Iterator[Any]:
    """The items a processor's call yielded (None: none), ``bind()`` re-binding the call's key
    before each step of them."""
    if items is None:
        return
    it = iter(items)
    while True:
        bind()
        try:
            item = next(it)
        except StopIteration:
            return
        yield item


def partition_column(keys: Sequence[Column], partitions: int) -> Column:
    """Each row's partition as Spark's hash partitioning of ``keys`` into ``partitions``
    computes it (an int column)."""
    return F.pmod(F.hash(*keys), F.lit(partitions)).cast("int")


def ints_hashed_to(df: DataFrame, buckets: int, sql_type: str) -> tuple[int, ...]:
    """For each bucket ``b`` of ``buckets``, a small non-negative int that Spark's hash
    partitioning of a ``sql_type`` value sends to ``b`` (``pmod(hash(x), buckets) = b``),
    found with Spark's own ``hash`` on ``df``'s session: Murmur3 spreads small ints evenly,
    one round in practice."""
    found: dict[int, int] = {}
    span, start = 64 * buckets + 64, 0
    while len(found) < buckets:
        rows = (
            df.sparkSession.range(start, start + span)
            .select(F.pmod(F.hash(F.col("id").cast(sql_type)), F.lit(buckets)).alias("b"), "id")
            .collect()
        )
        for r in rows:
            found.setdefault(int(r[0]), int(r[1]))
        start += span
    return tuple(found[b] for b in range(buckets))


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
        with keeping_active_session():
            df = spark.createDataFrame(indexed)
        cols = [F.col(k).cast(types[k]) if k in types else F.col(k) for k in keys]
        where = partition_column(cols, partitions).cast("long")
        got = df.select(F.col(_INDEX), where.alias("p")).toArrow()
        out = np.empty(n, dtype=np.int64)
        out[got.column(_INDEX).to_numpy()] = got.column("p").to_numpy()
        return out

    return partition_of
