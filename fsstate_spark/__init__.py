"""fsstate_spark: keep a PySpark StatefulProcessor's state in fsstate with one line.

Usage::

    from fsstate_spark import tiered

    df.groupBy("key").transformWithStateInPandas(
        tiered(MyProcessor()), output_schema, "Update", "ProcessingTime")

The processor is unchanged: it gets a handle whose ``getValueState`` / ``getListState`` /
``getMapState`` return objects with the API of Spark's handles, backed by a per-partition
fsstate store that snapshots on every micro-batch commit. Timers stay with Spark.

Reading the state back: :func:`register_sources` registers ``spark.read.format("fsstate")``
and ``format("fsstate-metadata")`` (:mod:`fsstate_spark.source`).

Invariants: see :mod:`fsstate_spark.processor` (callbacks), :mod:`fsstate_spark.lifecycle`
(which store a task opens and when it commits) and :mod:`fsstate_spark.config` (settings).
"""

from __future__ import annotations

from fsstate_spark.config import TieredConfig
from fsstate_spark.handles import (
    EmptyListError,
    NoGroupingKeyError,
    TieredHandle,
    TieredListState,
    TieredMapState,
    TieredValueState,
)
from fsstate_spark.inspect import StateSummary, state_summary
from fsstate_spark.processor import TieredProcessor, tiered
from fsstate_spark.source import register_sources

__all__ = [
    "EmptyListError",
    "NoGroupingKeyError",
    "StateSummary",
    "TieredConfig",
    "TieredHandle",
    "TieredListState",
    "TieredMapState",
    "TieredProcessor",
    "TieredValueState",
    "register_sources",
    "state_summary",
    "tiered",
]
