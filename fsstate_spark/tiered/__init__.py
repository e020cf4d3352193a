"""``tiered(processor)``: a StatefulProcessor's state in fsstate, inside Spark's transformWithState.

Usage::

    from fsstate_spark import tiered

    df.groupBy("key").transformWithStateInPandas(
        tiered(MyProcessor()), output_schema, "Update", "ProcessingTime")

Layers, top down: :mod:`~fsstate_spark.tiered.fast_loop` (fsstate's keyed loop as Spark's
Python worker for tiered() tasks, installed by :mod:`pyspark_fsstate.worker`),
:mod:`~fsstate_spark.tiered.processor` (the proxy Spark runs),
:mod:`~fsstate_spark.tiered.lifecycle` (which store a task opens and when it commits),
:mod:`~fsstate_spark.tiered.transient` (in-memory state without micro-batches) and
:mod:`~fsstate_spark.tiered.settings` (:class:`TieredConfig`); beside the proxy,
:mod:`~fsstate_spark.tiered.query_rescale` changes a stopped query's partition count
(:func:`rescale_query`). The handles the user's processor
gets are the shared Spark-shaped state API of :mod:`fsstate_spark.state`. Timers stay with Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsstate.exports import lazy_exports
from fsstate_spark.tiered.processor import TieredProcessor, tiered
from fsstate_spark.tiered.settings import TieredConfig

if TYPE_CHECKING:
    from fsstate_spark.tiered.query_rescale import QueryRescale, rescale_query

# the rescale of a stopped query (the driver's) on first use (:mod:`fsstate.exports`): a worker
# running tiered() tasks imports this package and never rescales
__getattr__ = lazy_exports(
    __name__,
    {
        "QueryRescale": "fsstate_spark.tiered.query_rescale",
        "rescale_query": "fsstate_spark.tiered.query_rescale",
    },
)

__all__ = ["QueryRescale", "TieredConfig", "TieredProcessor", "rescale_query", "tiered"]
