"""Spark's state-server client (``pyspark.sql.streaming.stateful_processor_api_client``) as
fsstate's keyed loop drives it (:mod:`fsstate_spark.tiered.fast_loop`); what fsstate reads of
a handle's client elsewhere is :mod:`fsstate_spark.pyspark.handle` (which does not import the
client's module).

Invariant: the implicit key a :class:`DeferredKeyClient` is given reaches Spark's state server
before the next request that goes to it (sent lazily, never skipped, never sent twice in a
row).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor_api_client import (
    StatefulProcessorApiClient,
    StatefulProcessorHandleState,
)

__all__ = [
    "DeferredKeyClient",
    "StatefulProcessorHandleState",
    "expired_timers",
]


class DeferredKeyClient(StatefulProcessorApiClient):
    """Spark's state-server client whose implicit key is sent with the first request after it
    was set that goes to the server (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: tuple[Any, ...] | None = None
        self._sent: tuple[Any, ...] | None = None
        self._flushing = False

    def set_implicit_key(self, key: tuple[Any, ...]) -> None:
        self._pending = key

    def remove_implicit_key(self) -> None:
        self._pending = None
        if self._sent is not None:
            self._sent = None
            super().remove_implicit_key()

    def _send_proto_message(self, message: bytes) -> None:
        key = self._pending
        if key is not None and not self._flushing and (self._sent is None or key != self._sent):
            self._flushing = True
            try:
                super().set_implicit_key(key)
            finally:
                self._flushing = False
            self._sent = key
        super()._send_proto_message(message)


def expired_timers(client: Any, through: int) -> Iterator[tuple[Any, int]]:
    """``(key, expiry)`` of every timer Spark finds expired at ``through``, in Spark's order.
    (Imported here: PySpark 4.0 has no such iterator, and there the module must still import,
    so that the worker can say why fsstate's loop is off, :data:`~fsstate_spark.pyspark.
    worker.STOCK_ONLY`.)"""
    from pyspark.sql.streaming.stateful_processor_api_client import ExpiredTimerIterator

    it: Iterator[tuple[Any, int]] = ExpiredTimerIterator(client, through)
    return it
