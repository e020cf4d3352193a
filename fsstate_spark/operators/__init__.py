"""Whole-batch stateful operators on Spark: the user's one import.

Usage::

    from fsstate_spark import operators as ops

    flow = ops.source(events, watermark=("t", "10 seconds")).window_aggregate(
        keys=["k"], time="t", window=ops.Window(size_ms=60_000), aggs=[ops.Agg("count")])
    ops.write_stream(flow, checkpoint_location=ckpt, sink=my_sink).start()

Flows are built with :func:`source`, their methods (:class:`Flow`), :func:`interval_join`,
:func:`changelog_join` and, for unchanged StatefulProcessors, :func:`transform_with_state` /
:func:`transform_with_state_in_pandas` (``ops.transform_with_state_in_pandas(df.groupBy("k"),
MyProcessor(), schema, "Update", "ProcessingTime")``), and run with :func:`write_stream` (a
``foreachBatch`` query whose
stages are shuffles and ``mapInArrow`` tasks over :mod:`fsstate.operators`). This package's
``__init__`` only re-exports. Its layers, top down: :mod:`~fsstate_spark.operators.driver` (the
``foreachBatch`` function), :mod:`~fsstate_spark.operators.flows` (the lazy plan) and
:mod:`~fsstate_spark.operators.tasks` (the worker side), :mod:`~fsstate_spark.operators.settings`
(:class:`FlowSettings`). Each module's docstring states its rules.
"""

from __future__ import annotations

from fsstate.operators import Agg, BatchProcessor, Window
from fsstate_spark.operators.driver import Driver, write_stream
from fsstate_spark.operators.flows import (
    Flow,
    changelog_join,
    interval_join,
    parse_duration_ms,
    source,
)
from fsstate_spark.operators.settings import FlowSettings
from fsstate_spark.operators.transform import transform_with_state, transform_with_state_in_pandas

__all__ = [
    "Agg",
    "BatchProcessor",
    "Driver",
    "Flow",
    "FlowSettings",
    "Window",
    "changelog_join",
    "interval_join",
    "parse_duration_ms",
    "source",
    "transform_with_state",
    "transform_with_state_in_pandas",
    "write_stream",
]
