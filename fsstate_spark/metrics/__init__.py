"""fsstate's metrics where Spark users look: per batch and per operator.

* :mod:`fsstate_spark.metrics.model`: the shape of the figures (Spark's
  ``StateOperatorProgress`` fields, fsstate's own in ``customMetrics``);
* :mod:`fsstate_spark.metrics.progress`: one batch's figures on the driver
  (:func:`progress`, :func:`progress_history`), from the tasks' receipts or the manifests;
* :mod:`fsstate_spark.metrics.listen`: :func:`listen`, a StreamingQueryListener writing one JSON
  line per batch (and calling any sinks).

Spark's own progress (``StreamingQueryProgress.stateOperators``, ``observedMetrics``) does not
carry these figures: see docs/monitoring.md, "Why not Spark's own progress".
"""

from __future__ import annotations

from fsstate_spark.metrics.listen import FsStateListener, JsonLinesSink, listen
from fsstate_spark.metrics.model import BatchProgress, OperatorProgress, PartitionMetrics
from fsstate_spark.metrics.progress import batch_progress, progress, progress_history

__all__ = [
    "BatchProgress",
    "FsStateListener",
    "JsonLinesSink",
    "OperatorProgress",
    "PartitionMetrics",
    "batch_progress",
    "listen",
    "progress",
    "progress_history",
]
