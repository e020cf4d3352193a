"""The two queries of the operator suites: a windowed count and a keyed running aggregate.

Used by ``spark_operators``, ``spark_matrix``, ``spark_floor``, ``spark_breakdown``,
``spark_driver`` and ``spark_jvm``: the input (:data:`INPUT_SCHEMA`, :func:`batch_table`),
fsstate's flow of each query (:func:`fsstate_flow`), Spark's built-in operator for it
(:func:`builtin_query`) and the running aggregate as a StatefulProcessor, pandas
(:class:`RunningAgg`) and Row (:class:`RunningAggRow`; Spark's Python workers import both from
here), with its dict-state references (:class:`DictAggRow`, :class:`TaskDictAgg`) and the
loader of ``spark_scale``'s state (:class:`LoadAgg`, :func:`load_values`).

* **windowed count** (``window``): ``withWatermark("t", DELAY)`` then a count per
  (``WINDOW_MS`` window, key), append output;
* **running aggregate** (``running``): ``count`` and ``sum(v)`` per key, update output
  (fsstate: a retracting aggregate over an insert-only stream, upsert output).

Invariants: both sides of a comparison compute the same groups and aggregates from the same
rows; the state :class:`LoadAgg` writes for a load row is the one the running aggregate
would; :func:`batch_table` is a pure function of its arguments (seeded by the batch index),
event times of batch ``b`` in ``[10 b, 10 b + 10)`` seconds, so each batch fills one window
and the watermark closes the one before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from bench.harness.datagen import KEY_DIGITS, key_strings

INPUT_SCHEMA = "k STRING, v BIGINT, t TIMESTAMP"
WINDOW_MS = 10_000
DELAY = "5 seconds"


class RunningAgg(StatefulProcessor):
    """count and sum(v) per key in a ValueState; one output row per key and batch."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """One value state."""
        self.agg = handle.getValueState("agg", "n BIGINT, s BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Add the key's rows to its count and sum."""
        n = s = 0
        for frame in rows:
            n += len(frame)
            s += int(frame["v"].sum())
        old = self.agg.get()
        if old is not None:
            n, s = n + int(old[0]), s + int(old[1])
        self.agg.update((n, s))
        yield pd.DataFrame({"k": [key[0]], "n": [n], "s": [s]})

    def close(self) -> None:
        """Nothing to release."""


class RunningAggRow(StatefulProcessor):
    """:class:`RunningAgg` in the Row flavour (``transformWithState``): count and sum(v) per key
    in a ValueState; one output ``Row(k, n, s)`` per key and batch."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """One value state."""
        self.agg = handle.getValueState("agg", "n BIGINT, s BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """Add the key's rows to its count and sum."""
        n = s = 0
        for row in rows:
            n += 1
            s += int(row.v)
        old = self.agg.get()
        if old is not None:
            n, s = n + int(old[0]), s + int(old[1])
        self.agg.update((n, s))
        yield Row(k=key[0], n=n, s=s)

    def close(self) -> None:
        """Nothing to release."""


_DICT_STATE: dict[Any, tuple[int, int]] = {}  # DictAggRow's state: this worker process's


class DictAggRow(StatefulProcessor):
    """:class:`RunningAggRow` with its state in a plain dict of the worker process: what the
    processor costs with free state, the reference that isolates fsstate's share under
    ``tiered()`` (:mod:`bench.suites.spark_key_breakdown`). A cost reference only: the dict is
    neither fault tolerant nor bounded, and a partition that moves to another worker finds
    its keys missing there, so its outputs are not checked."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """No state declared."""

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """Add the key's rows to its count and sum, kept in the dict."""
        n = s = 0
        for row in rows:
            n += 1
            s += int(row.v)
        old = _DICT_STATE.get(key)
        if old is not None:
            n, s = n + old[0], s + old[1]
        _DICT_STATE[key] = (n, s)
        yield Row(k=key[0], n=n, s=s)

    def close(self) -> None:
        """Nothing to release."""


class TaskDictAgg(StatefulProcessor):
    """:class:`RunningAgg` (pandas) with its state in a plain dict that each task makes anew in
    ``init``: what the processor costs with free state, the reference that isolates fsstate's
    share of a pandas batch under ``tiered()`` (``spark_scale``). A task's keys are its own
    (Spark partitions by key), so within a task every get and update is the processor's as
    with real state; unlike :class:`DictAggRow`'s, the dict holds one task's keys only, so
    the reference adds nothing to the worker's memory across batches (``spark_scale``
    measures peak worker RSS with it beside the others). A cost reference only: its outputs
    forget earlier batches and are not checked."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """No state declared; a new dict for the task."""
        self.state: dict[Any, tuple[int, int]] = {}

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Add the key's rows to its count and sum, kept in the task's dict."""
        n = s = 0
        for frame in rows:
            n += len(frame)
            s += int(frame["v"].sum())
        old = self.state.get(key)
        if old is not None:
            n, s = n + old[0], s + old[1]
        self.state[key] = (n, s)
        yield pd.DataFrame({"k": [key[0]], "n": [n], "s": [s]})

    def close(self) -> None:
        """Nothing to release."""


LOAD_VALUE_MOD = 100  # a loaded key's v: its id modulo this (load_values, LoadAgg)


def load_values(ids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The ``v`` of the load rows of key ids ``ids`` (one row per key): ``id % 100``."""
    return np.asarray(ids, dtype=np.int64) % LOAD_VALUE_MOD


class LoadAgg(StatefulProcessor):
    """Puts the running aggregate's state of a load batch in place: every key of a load batch
    comes once, with ``v`` = :func:`load_values` of its id, so its state after the batch is
    ``(1, v)``; the processor writes that from the key alone (the id is the key's last
    :data:`~bench.harness.datagen.KEY_DIGITS` digits), never reading its rows nor emitting
    output. Either flavour, under ``tiered()`` or the flow driver, with the state name of the
    running aggregate that continues from it (``spark_scale``'s untimed load: PySpark's pandas
    frames per key would make it ~50 µs a key)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """The running aggregate's value state."""
        self.agg = handle.getValueState("agg", "n BIGINT, s BIGINT")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Any:
        """The key's state after its one load row; no output, ``rows`` left untouched."""
        self.agg.update((1, int(key[0][-KEY_DIGITS:]) % LOAD_VALUE_MOD))
        return iter(())

    def close(self) -> None:
        """Nothing to release."""


def batch_table(batch: int, rows: int, keys: int) -> pa.Table:
    """Micro-batch ``batch`` (seeded by its index): ``rows`` rows over ``keys`` keys, event
    times in ``[10 batch, 10 batch + 10)`` seconds."""
    rng = np.random.default_rng(batch)
    ids = rng.integers(0, keys, rows, dtype=np.int64)
    t_ms = batch * WINDOW_MS + rng.integers(0, WINDOW_MS, rows, dtype=np.int64)
    return pa.table(
        {
            "k": key_strings(ids),
            "v": pa.array(rng.integers(0, 100, rows, dtype=np.int64)),
            "t": pa.array(t_ms * 1000, pa.timestamp("us", "UTC")),
        }
    )


def fsstate_flow(df: Any, group: str, name: str | None = None) -> Any:
    """The fsstate flow of ``group`` (``window`` or ``running``) over the input ``df``;
    ``name`` names its operator (the default operator name if None)."""
    from pyspark.sql import functions as F

    from fsstate_spark import operators as ops

    named = {} if name is None else {"name": name}
    if group == "window":
        return ops.source(df, watermark=("t", DELAY)).window_aggregate(
            keys=["k"], time="t", window=ops.Window(WINDOW_MS), aggs=[ops.Agg("count")], **named
        )
    return (
        ops.source(df)
        .transform(lambda d: d.withColumn("op", F.lit(1).cast("tinyint")))
        .retract_aggregate(
            keys=["k"],
            aggs=[ops.Agg("count", alias="n"), ops.Agg("sum", "v", "s")],
            output="upsert",
            **named,
        )
    )


def builtin_query(df: Any, group: str) -> tuple[Any, str]:
    """Spark's built-in operator for ``group`` over ``df``, and its output mode."""
    from pyspark.sql import functions as F

    if group == "window":
        out = (
            df.withWatermark("t", DELAY)
            .groupBy(F.window("t", "10 seconds"), "k")
            .agg(F.count(F.lit(1)).alias("n"))
        )
        return out, "append"
    return df.groupBy("k").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s")), "update"
