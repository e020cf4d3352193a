"""fsstate's metrics where Spark users look: per batch and per operator.

:mod:`fsstate_spark.metrics.model` is the shape of the figures (Spark's
``StateOperatorProgress`` fields, fsstate's own in ``customMetrics``).
"""

from __future__ import annotations
