"""Stateful operators over whole Arrow batches, on the tiered state engine.

Operators (each in its module, all under :class:`fsstate.operators.base.Operator`):

* :class:`WindowAggregate`: tumbling and sliding windows (panes), append and update output;
* :class:`SessionAggregate`: session windows (append);
* :class:`IntervalJoin`: stream-stream join on keys within an event-time range, inner or left
  outer;
* :class:`ChangelogJoin`: inner join of two change streams (+/- rows), a changelog out;
* :class:`RetractAggregate`: count / sum / min / max over a changelog with retractions;
* :class:`Deduplicate`: Spark's ``dropDuplicatesWithinWatermark``;
* :class:`BatchProcessor`: user logic over a partition's batch and batched state tables.

:func:`run_epoch` runs one partition's epoch exactly once; :class:`LocalQuery` drives a chain
of operators without Spark (``fsstate_spark.operators`` does it on a cluster).
"""

from __future__ import annotations

from fsstate.operators.aggregates import Agg
from fsstate.operators.base import Epoch, Operator
from fsstate.operators.changelog_join import ChangelogJoin
from fsstate.operators.custom import BatchProcessor
from fsstate.operators.dedup import Deduplicate
from fsstate.operators.expiry import DeadlineIndex
from fsstate.operators.interval_join import IntervalJoin, join_input_schema
from fsstate.operators.local import LocalQuery, Stage
from fsstate.operators.planning import WatermarkSpec
from fsstate.operators.retract import RetractAggregate
from fsstate.operators.runner import EpochResult, run_epoch
from fsstate.operators.sessions import SessionAggregate
from fsstate.operators.windows import Window, WindowAggregate

__all__ = [
    "Agg",
    "BatchProcessor",
    "ChangelogJoin",
    "DeadlineIndex",
    "Deduplicate",
    "Epoch",
    "EpochResult",
    "IntervalJoin",
    "LocalQuery",
    "Operator",
    "RetractAggregate",
    "SessionAggregate",
    "Stage",
    "WatermarkSpec",
    "Window",
    "WindowAggregate",
    "join_input_schema",
    "run_epoch",
]
