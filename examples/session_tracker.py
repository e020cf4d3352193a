"""Session tracker: value, list and map state with TTL, kept in fsstate.

Input: click events ``user STRING, page STRING, ms BIGINT``. For every user the processor
keeps:

* ``session`` (ValueState): first and last event time and the event count of the session;
* ``recent`` (ListState): the last pages visited, oldest first (at most ``keep_recent``);
* ``pages`` (MapState): visits per page.

All three expire ``ttl_ms`` of processing time after their last update, so an idle user's
state disappears by itself; TTL needs ``timeMode="ProcessingTime"``. The demo
(``examples/demo.py``) runs it through ``fsstate_spark.tiered``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StructField, StructType

INPUT_SCHEMA = "user STRING, page STRING, ms BIGINT"
OUTPUT_SCHEMA = (
    "user STRING, events BIGINT, session_ms BIGINT, distinct_pages BIGINT, top_page STRING, "
    "recent STRING"
)
SESSION_SCHEMA = StructType(
    [
        StructField("start_ms", LongType()),
        StructField("last_ms", LongType()),
        StructField("events", LongType()),
    ]
)


class SessionTracker(StatefulProcessor):
    """Per-user session summary with value, list and map state under a TTL.

    Args:
        ttl_ms: time to live of every state entry, in processing-time milliseconds.
        keep_recent: how many recent pages to keep.
    """

    def __init__(self, ttl_ms: int = 30 * 60 * 1000, keep_recent: int = 3) -> None:
        self.ttl_ms = ttl_ms
        self.keep_recent = keep_recent

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the three state variables."""
        self.session = handle.getValueState("session", SESSION_SCHEMA, self.ttl_ms)
        self.recent = handle.getListState("recent", "page STRING", self.ttl_ms)
        self.pages = handle.getMapState("pages", "page STRING", "visits BIGINT", self.ttl_ms)

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Fold this batch's clicks into the user's session and emit a summary row."""
        clicks = pd.concat(list(rows)).sort_values(["ms", "page"])
        pages = [str(p) for p in clicks["page"]]
        times = [int(t) for t in clicks["ms"]]
        old = self.session.get()
        start = min(times) if old is None else min(old[0], min(times))
        last = max(times) if old is None else max(old[1], max(times))
        events = len(times) + (old[2] if old else 0)
        self.session.update((start, last, events))

        recent = [p[0] for p in self.recent.get()] + pages
        self.recent.put([(p,) for p in recent[-self.keep_recent :]])

        for page in pages:
            visits = self.pages.getValue((page,))
            self.pages.updateValue((page,), ((visits[0] if visits else 0) + 1,))
        counts = {k[0]: v[0] for k, v in self.pages.iterator()}
        top = min(counts, key=lambda p: (-counts[p], p))
        yield pd.DataFrame(
            {
                "user": [key[0]],
                "events": [events],
                "session_ms": [last - start],
                "distinct_pages": [len(counts)],
                "top_page": [top],
                "recent": [" > ".join(recent[-self.keep_recent :])],
            }
        )

    def close(self) -> None:
        """Nothing to release."""
