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

from typing import TYPE_CHECKING

from fsstate.exports import lazy_exports

if TYPE_CHECKING:
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

# every name on first use (:mod:`fsstate.exports`): a module that needs one operator's helper
# (``fsstate_spark.state.timers``: :class:`DeadlineIndex`) does not import all the operators
__getattr__ = lazy_exports(
    __name__,
    {
        "Agg": "fsstate.operators.aggregates",
        "Epoch": "fsstate.operators.base",
        "Operator": "fsstate.operators.base",
        "ChangelogJoin": "fsstate.operators.changelog_join",
        "BatchProcessor": "fsstate.operators.custom",
        "Deduplicate": "fsstate.operators.dedup",
        "DeadlineIndex": "fsstate.operators.expiry",
        "IntervalJoin": "fsstate.operators.interval_join",
        "join_input_schema": "fsstate.operators.interval_join",
        "LocalQuery": "fsstate.operators.local",
        "Stage": "fsstate.operators.local",
        "WatermarkSpec": "fsstate.operators.planning",
        "RetractAggregate": "fsstate.operators.retract",
        "EpochResult": "fsstate.operators.runner",
        "run_epoch": "fsstate.operators.runner",
        "SessionAggregate": "fsstate.operators.sessions",
        "Window": "fsstate.operators.windows",
        "WindowAggregate": "fsstate.operators.windows",
    },
)

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
