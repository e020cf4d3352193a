"""A ``StreamingQueryListener`` whose JVM twin calls a Python object of the listener's choice
(PySpark's ``addListener`` and ``removeListener`` read a listener's private ``_jlistener``).

Invariant: the JVM twin is made once per listener, on first use (classic sessions only).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener


class JvmTargetListener(StreamingQueryListener):
    """A listener whose JVM handle is Spark's ``PythonStreamingQueryListenerWrapper`` around
    :meth:`jvm_target` instead of around the listener itself."""

    def jvm_target(self) -> Any:
        """The Python object the JVM calls (Py4J's ``Java.implements`` of Spark's
        ``PythonStreamingQueryListener``)."""
        raise NotImplementedError

    @property
    def _jlistener(self) -> Any:
        """The JVM's handle on this listener, made once (what ``addListener`` and
        ``removeListener`` use)."""
        obj = getattr(self, "_jlistenerobj", None)
        if obj is None:
            from fsstate_spark.pyspark.session import jvm

            obj = jvm().PythonStreamingQueryListenerWrapper(self.jvm_target())
            self._jlistenerobj = obj
        return obj
