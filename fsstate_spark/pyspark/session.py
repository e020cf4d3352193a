"""What fsstate reads and sets of PySpark's sessions and contexts beyond their public API: the
process's active session (a class attribute) and its JVM twin, the active SparkContext, py4j's
gateway, Spark's offline checkpoint manager.

Invariant: nothing here starts a session or a context; each function reads, or puts back what
was there.
"""

from __future__ import annotations

import contextlib
from typing import Any


def active_session() -> Any:
    """The process's active classic ``SparkSession`` as PySpark keeps it (None: none, or no
    such attribute)."""
    from pyspark.sql import SparkSession

    return getattr(SparkSession, "_activeSession", None)


def restore_active_session(before: Any) -> None:
    """Make ``before`` (an :func:`active_session`) the active session again, in Python and, as
    PySpark sets it, in the JVM for this thread (JVM failures are ignored)."""
    from pyspark.sql import SparkSession

    if before is None or getattr(SparkSession, "_activeSession", None) is before:
        return
    SparkSession._activeSession = before
    with contextlib.suppress(Exception):
        jclass = SparkSession._get_j_spark_session_class(before._jvm)
        jclass.setActiveSession(before._jsparkSession)


def active_spark_context() -> Any:
    """The active classic ``SparkContext`` (None: none running, or Spark Connect)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def jvm() -> Any:
    """py4j's view of the driver's JVM (the active SparkContext's gateway)."""
    from pyspark import SparkContext

    return SparkContext._jvm


def checkpoint_manager(spark: Any) -> Any:
    """Spark's offline checkpoint manager of a classic session (4.2+:
    ``repartition(checkpoint, partitions, ...)``); None on Spark Connect or before 4.2."""
    return getattr(spark, "_streamingCheckpointManager", None)
