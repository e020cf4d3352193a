"""The background collector: garbage collection across lineages, out of the commit path.

A store asks for a collection of its directory every ``orphan_scan_every_commits`` commits
(:meth:`fsstate.store.partition.PartitionStore.commit`); the request is queued here and a
background thread runs :func:`fsstate.store.gc.collect` for that one store (its lineages, its
fork marks, its files; the layout records and leases of its root), so a commit never waits for
it and its cost does not grow with the number of lineages.

Invariants:

* Bounded: one daemon thread per process, a queue of at most :data:`QUEUE_MAX` requests (more
  are dropped: the store asks again at its next scan commit), one request per store queued at
  a time.
* Never raises into a commit: a collection's failure (fail-closed, nothing deleted) is counted
  in :attr:`Collector.errors` and logged at INFO; the next request tries again.
* Its memory is counted in the budget while it runs (:func:`fsstate.store.gc.collect`).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Protocol

from fsstate.config import StoreConfig
from fsstate.errors import FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.store.gc import collect

__all__ = ["QUEUE_MAX", "Collector", "collector", "request_collection"]

log = logging.getLogger(__name__)

QUEUE_MAX = 64


class Collectable(Protocol):
    """What a store gives the collector."""

    fileio: FileIO
    operator: str
    partition: int
    layout: str
    config: StoreConfig


@dataclass(frozen=True)
class _Request:
    fileio: FileIO
    operator: str
    layout: str
    partition: int
    retain: int
    grace_ms: int

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.fileio.describe(""), self.operator, self.layout, self.partition)


class Collector:
    """The process's background collector (see the module docstring)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[_Request | None] = queue.Queue(maxsize=QUEUE_MAX)
        self._queued: set[tuple[str, str, str, int]] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.runs = 0
        self.errors = 0

    def request(self, store: Collectable) -> bool:
        """Queue a collection of ``store``'s directory; False if not queued."""
        cfg = store.config
        req = _Request(
            store.fileio,
            store.operator,
            store.layout,
            store.partition,
            cfg.retain_versions,
            cfg.orphan_grace_ms,
        )
        with self._lock:
            if req.key in self._queued or self._stopping.is_set():
                return False
            try:
                self._queue.put_nowait(req)
            except queue.Full:
                return False
            self._queued.add(req.key)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="fsstate-collector", daemon=True
                )
                self._thread.start()
                atexit.register(self.stop)
        return True

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Block until the queue is drained (tests)."""
        done = threading.Event()

        def waiter() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        done.wait(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (registered with ``atexit``); queued requests are dropped."""
        self._stopping.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            req = self._queue.get()
            try:
                if req is None or self._stopping.is_set():
                    return
                with self._lock:
                    self._queued.discard(req.key)
                collect(
                    req.fileio,
                    req.operator,
                    retain=req.retain,
                    grace_ms=req.grace_ms,
                    stores=[(req.layout, req.partition)],
                )
                self.runs += 1
            except FsStateError as exc:
                self.errors += 1
                log.info("fsstate: background collection of %s skipped: %s", req, exc)
            except Exception:  # never let the thread die; count and log
                self.errors += 1
                log.exception("fsstate: background collection failed")
            finally:
                self._queue.task_done()


_collector = Collector()


def collector() -> Collector:
    """The process's collector."""
    return _collector


def request_collection(store: Collectable) -> bool:
    """Queue a background collection of ``store``'s directory (see the module docstring)."""
    return _collector.request(store)
