"""fsstate's figures after every batch, with one call: :func:`listen`.

:func:`listen` adds a :class:`FsStateListener` (a PySpark ``StreamingQueryListener``) to a
session's streams: at each ``onQueryProgress`` (Spark's progress of a finished batch) it
computes the batch's :class:`~fsstate_spark.metrics.model.BatchProgress`
(:func:`fsstate_spark.metrics.progress.batch_progress`: the tasks' receipts on a classic
session, the manifests on Spark Connect) and hands it to its sinks: :class:`JsonLinesSink`
(``path=``: one JSON line per batch and query, ``BatchProgress.to_json()``, appended and
flushed), a Prometheus exporter it creates and serves (``prometheus_port=``:
:func:`fsstate_spark.metrics.prometheus.exporter`, the listener's ``exporter``) and any
callables (``sinks=``, ``Callable[[BatchProgress], None]``). When a query terminates
(``onQueryTerminated``) each sink with a ``forget(query_id)`` method (the exporter) is told to
drop that query's series.

Where the listener runs (measured on PySpark 4.3; the client-side listener bus of Spark
Connect is the same code in 4.0 to 4.2): on a classic session, in the driver's Python process
(Spark's listener bus thread, after the batch); on a Spark Connect client, in the client's
process too (PySpark 4's Connect client receives the server's listener events and calls its
listeners itself), so ``path`` is a path of the client's machine and the figures come from
the manifests there, read with the client's access to the state.

Invariants:

* A batch without fsstate operators writes nothing; queries without fsstate are ignored.
* Never fails the query or Spark's listener bus: a sink's or a read's exception is logged
  (once per kind and query) and the batch's line skipped; so is a sink's ``forget``.
* One line per (query id, run id, batch id) per listener: a progress event Spark repeats is
  not written twice, and a batch id a rolled-back, forked or restarted query runs again (same
  query id, a new run id) is written again, with that run's figures
  (:func:`fsstate_spark.metrics.progress.batch_progress`: its receipts, its lineage's
  versions) and handed to every sink again.
* On a classic session the JVM calls the listener through :class:`_ProgressOnly`, which reads
  of each event only the four fields the listener uses (query id, run id, batch id, name):
  PySpark's own wrapper converts the whole progress first, a Py4J call per field, per source
  and per state operator's metric, which measured ~200 ms of the driver per batch and query
  (``spark_metrics``' listener row), for every query of the session, fsstate's or not.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from fsstate_spark.metrics.model import BatchProgress
from fsstate_spark.metrics.progress import batch_progress, known_here
from fsstate_spark.pyspark.listener import JvmTargetListener

if TYPE_CHECKING:  # prometheus_client is optional: imported when an exporter is asked for
    from fsstate_spark.metrics.prometheus import PrometheusExporter

log = logging.getLogger(__name__)

Sink = Callable[[BatchProgress], None]
SEEN_MAX = 4096  # (query, run, batch) keys a listener remembers to skip repeats


class JsonLinesSink:
    """Appends ``BatchProgress.to_json()`` as one line to ``path`` (created with its
    directory), flushed per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)

    def __call__(self, progress: BatchProgress) -> None:
        line = json.dumps(progress.to_json(), separators=(",", ":"), sort_keys=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()


class FsStateListener(JvmTargetListener):
    """Computes each batch's fsstate figures and hands them to ``sinks``.

    On a classic session its ``onQueryProgress`` gets an event whose ``progress`` holds only
    ``id``, ``runId``, ``batchId`` and ``name`` (:class:`_ProgressOnly`); for Spark's whole
    progress add a StreamingQueryListener of your own.

    Args:
        sinks: callables taking a :class:`BatchProgress`.
        state_uri: state locations to look in besides what this process made
            (:func:`fsstate_spark.metrics.progress.progress`).
    """

    def __init__(
        self,
        sinks: Sequence[Sink],
        state_uri: str | Sequence[str] | None = None,
        exporter: PrometheusExporter | None = None,
    ):
        self.sinks = list(sinks)
        self.state_uri = state_uri
        self.exporter = exporter  # the one listen() serves (also among the sinks), else None
        self._seen: dict[tuple[str, str, int], None] = {}  # (query, run, batch), oldest first
        self._warned: set[tuple[str, str]] = set()

    def jvm_target(self) -> Any:
        """What the JVM calls on a classic session (PySpark's ``addListener``, through
        :class:`~fsstate_spark.pyspark.listener.JvmTargetListener`): a :class:`_ProgressOnly`."""
        return _ProgressOnly(self)

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to do."""

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to do (no batch ran)."""

    def onQueryTerminated(self, event: Any) -> None:
        """Every sink that keeps figures per query (a ``forget(query_id)`` method: the
        Prometheus exporter) drops the terminated query's."""
        query = str(event.id)
        for sink in self.sinks:
            forget = getattr(sink, "forget", None)
            if callable(forget):
                try:
                    forget(query)
                except Exception as exc:
                    self._warn(query, f"forget {sink!r}", exc)

    def onQueryProgress(self, event: Any) -> None:
        """The finished batch's figures to every sink."""
        p = event.progress
        query, run, batch = str(p.id), str(p.runId), int(p.batchId)
        if (query, run, batch) in self._seen:
            return
        try:
            got = self.figures(query, batch, run, p.name)
        except Exception as exc:  # never break Spark's listener bus
            self._warn(query, "read", exc)
            return
        if got is None:
            return
        self._seen[(query, run, batch)] = None
        while len(self._seen) > SEEN_MAX:
            del self._seen[next(iter(self._seen))]
        for sink in self.sinks:
            try:
                sink(got)
            except Exception as exc:
                self._warn(query, f"sink {sink!r}", exc)

    def figures(
        self, query: str, batch: int, run_id: str | None, name: str | None
    ) -> BatchProgress | None:
        """The batch's figures (None: no fsstate operator of the query is known)."""
        known = known_here(self.state_uri)
        return batch_progress(query, batch, run_id=run_id, name=name, known=known)

    def _warn(self, query: str, what: str, exc: Exception) -> None:
        if (query, what) not in self._warned:
            self._warned.add((query, what))
            log.warning("fsstate: metrics of query %s: %s failed (%r)", query, what, exc)


class _ProgressOnly:
    """Spark's ``PythonStreamingQueryListener`` (a Py4J callback) for a
    :class:`FsStateListener`: hands it events holding only what it reads (``progress.id``,
    ``runId``, ``batchId``, ``name``; a terminated query's ``id``), four Py4J calls a batch
    instead of PySpark's conversion of the whole progress. Never raises into the JVM's
    listener bus."""

    def __init__(self, listener: FsStateListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        """Nothing to do."""

    def onQueryProgress(self, jevent: Any) -> None:
        """The batch's ids to the listener."""
        try:
            p = jevent.progress()
            progress = SimpleNamespace(
                id=str(p.id().toString()),
                runId=str(p.runId().toString()),
                batchId=int(p.batchId()),
                name=p.name(),
            )
        except Exception as exc:  # the gateway is closing: nothing to report
            log.debug("fsstate: a progress event could not be read (%r)", exc)
            return
        self.listener.onQueryProgress(SimpleNamespace(progress=progress))

    def onQueryIdle(self, jevent: Any) -> None:
        """Nothing to do (no batch ran)."""

    def onQueryTerminated(self, jevent: Any) -> None:
        """The query's id to the listener."""
        try:
            query = str(jevent.id().toString())
        except Exception as exc:
            log.debug("fsstate: a termination event could not be read (%r)", exc)
            return
        self.listener.onQueryTerminated(SimpleNamespace(id=query))

    class Java:
        """Py4J: the interface this object implements."""

        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen(
    spark: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    sinks: Sequence[Sink] = (),
    state_uri: str | Sequence[str] | None = None,
    prometheus_port: int | None = None,
    prometheus_addr: str = "127.0.0.1",
) -> FsStateListener:
    """Report fsstate's figures of every batch of every query of ``spark``'s streams.

    One call, before or after queries start::

        from fsstate_spark.metrics import listen

        listen(spark, "/var/log/fsstate/progress.jsonl")

    Args:
        spark: the SparkSession (classic or a Spark Connect client).
        path: a JSON-lines file: one line per batch and query (``BatchProgress.to_json()``),
            appended and flushed (None: no file).
        sinks: more ``Callable[[BatchProgress], None]`` called per batch (e.g. an exporter).
        state_uri: state locations to look in besides what this process made (queries whose
            ``tiered()`` processors or flows were made in another process).
        prometheus_port: create a Prometheus exporter and serve ``/metrics`` on this port of
            ``prometheus_addr`` (0: a free port, then ``listener.exporter.port``); None: none
            (needs ``prometheus_client``: ``pip install 'fsstate[prometheus]'``).
        prometheus_addr: the address the exporter binds (loopback unless told otherwise).

    Returns:
        The listener (``spark.streams.removeListener(listener)`` stops it; its exporter,
        ``listener.exporter``, serves until ``listener.exporter.close()``). On a Spark Connect
        client remove the session's last listener after its queries ended (their termination
        delivered): PySpark's client joins its event thread there while holding the lock that
        thread delivers under, and hangs when an event is pending (SPARK-59623).
    """
    every: list[Sink] = [JsonLinesSink(path)] if path is not None else []
    every.extend(sinks)
    served = None
    if prometheus_port is not None:
        from fsstate_spark.metrics.prometheus import exporter

        served = exporter(prometheus_port, prometheus_addr)
        every.append(served)
    listener = FsStateListener(every, state_uri, served)
    try:
        spark.streams.addListener(listener)
    except BaseException:
        if served is not None:
            served.close()
        raise
    return listener
