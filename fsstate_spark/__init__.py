"""fsstate_spark: fsstate's state engine for PySpark Structured Streaming, as three products.

* ``tiered(MyProcessor())`` (:mod:`fsstate_spark.tiered`): a StatefulProcessor's state in
  fsstate, inside Spark's ``transformWithStateInPandas`` / ``transformWithState``::

      from fsstate_spark import tiered

      df.groupBy("key").transformWithStateInPandas(
          tiered(MyProcessor()), output_schema, "Update", "ProcessingTime")

  A stopped tiered query changes its partition count with :func:`rescale_query` (or
  ``python -m fsstate_spark rescale``); it is copied or rolled back at a committed batch with
  :func:`fork_query` and :func:`rollback_query` (``fsstate-spark fork`` / ``rollback``), its
  state following in O(metadata).
* the flow driver (:mod:`fsstate_spark.operators`, ``from fsstate_spark import operators as
  ops``): windows, joins, dedup, retractions and user processors over whole Arrow batches;
* the state sources (:mod:`fsstate_spark.sources`): :func:`register_sources` registers
  ``spark.read.format("fsstate")`` and ``format("fsstate-metadata")``; :func:`state_summary`.

Each batch's fsstate figures per operator (rows, bytes, memory, spill, commit time, in the
shape of Spark's ``StateOperatorProgress``): :func:`progress` and :func:`progress_history` of a
query, and :func:`fsstate_spark.metrics.listen` (one JSON line per batch).

They share :mod:`fsstate_spark.settings` (state location, storage and engine settings),
:mod:`fsstate_spark.runtime` (task identity, storage clients, engine settings in workers) and
:mod:`fsstate_spark.state` (Spark's state API over engine tables). Imports only go down:
products over ``state`` over ``runtime`` over ``settings`` (``make lint`` holds it).

``fsstate_spark.tiered`` is the function; the subpackage's modules are imported by their full
name (``from fsstate_spark.tiered.settings import TieredConfig``), not as attributes.
"""

from __future__ import annotations

from fsstate_spark.pyspark import unsupported_major

if (_error := unsupported_major()) is not None:  # before anything imports PySpark 4's modules
    raise _error

from typing import TYPE_CHECKING

from fsstate.exports import lazy_exports
from fsstate_spark.state.handles import (
    DeletedStateError,
    EmptyListError,
    NoGroupingKeyError,
    TieredHandle,
    TieredListState,
    TieredMapState,
    TieredValueState,
    TimerModeError,
)
from fsstate_spark.tiered import TieredConfig, TieredProcessor, tiered

if TYPE_CHECKING:
    from fsstate_spark.fork import CheckpointCut, fork_query, rollback_query
    from fsstate_spark.metrics import progress, progress_history
    from fsstate_spark.sources import StateSummary, register_sources, state_summary
    from fsstate_spark.tiered.query_rescale import QueryRescale, rescale_query

# Driver-side names, imported on first use (:mod:`fsstate.exports`): a Python worker running a
# tiered() task imports this package too, and the flow driver, the listener, the state sources
# and the rescale of a stopped query are no part of its work; ``tiered`` and the handles stay
# eager (the name ``tiered`` must be the function, not the subpackage).
__getattr__ = lazy_exports(
    __name__,
    {
        "CheckpointCut": "fsstate_spark.fork",
        "fork_query": "fsstate_spark.fork",
        "rollback_query": "fsstate_spark.fork",
        "progress": "fsstate_spark.metrics",
        "progress_history": "fsstate_spark.metrics",
        "StateSummary": "fsstate_spark.sources",
        "register_sources": "fsstate_spark.sources",
        "state_summary": "fsstate_spark.sources",
        "QueryRescale": "fsstate_spark.tiered.query_rescale",
        "rescale_query": "fsstate_spark.tiered.query_rescale",
    },
)

__all__ = [
    "CheckpointCut",
    "DeletedStateError",
    "EmptyListError",
    "NoGroupingKeyError",
    "QueryRescale",
    "StateSummary",
    "TieredConfig",
    "TieredHandle",
    "TieredListState",
    "TieredMapState",
    "TieredProcessor",
    "TieredValueState",
    "TimerModeError",
    "fork_query",
    "progress",
    "progress_history",
    "register_sources",
    "rescale_query",
    "rollback_query",
    "state_summary",
    "tiered",
]
