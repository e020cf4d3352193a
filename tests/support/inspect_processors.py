"""A processor whose every output row is the whole state of its key after the batch, so that
what the state readers return can be compared with what the processor saw (importable by
Spark's workers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

LEDGER_SCHEMA = "k STRING, total BIGINT, events STRING, tags STRING"
EVENTS_TTL_MS = 600_000

NOOP, CLEAR_TOTAL, CLEAR_EVENTS, DROP_T0, RESET_EVENTS, CLEAR_TAGS = -6, -1, -2, -3, -4, -5


class Ledger(StatefulProcessor):
    """Value, list (with TTL) and map state under adds, deletes, clears and re-puts.

    Input ``v``: ``v >= 0`` adds ``v`` to ``total``, appends it to ``events`` and counts it
    in ``tags[t<v % 3>]``; negative values are the operations named above. Each key's output
    row is its state after its rows (``total`` null when absent; ``events`` in order;
    ``tags`` sorted by user key).
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", "n BIGINT")
        self.events = handle.getListState("events", "e BIGINT", EVENTS_TTL_MS)
        self.tags = handle.getMapState("tags", "u STRING", "c BIGINT")

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        for pdf in rows:
            for v in (int(x) for x in pdf["v"]):
                if v >= 0:
                    cur = self.total.get()
                    self.total.update(((cur[0] if cur else 0) + v,))
                    self.events.appendValue((v,))
                    tag = (f"t{v % 3}",)
                    got = self.tags.getValue(tag)
                    self.tags.updateValue(tag, ((got[0] if got else 0) + 1,))
                elif v == CLEAR_TOTAL:
                    self.total.clear()
                elif v == CLEAR_EVENTS:
                    self.events.clear()
                elif v == DROP_T0:
                    self.tags.removeKey(("t0",))
                elif v == RESET_EVENTS:
                    self.events.put([(100,), (101,)])
                elif v == CLEAR_TAGS:
                    self.tags.clear()
        total = self.total.get()
        events = ",".join(str(e[0]) for e in self.events.get())
        tags = ";".join(f"{u[0]}:{c[0]}" for u, c in sorted(self.tags.iterator()))
        yield pd.DataFrame(
            {
                "k": [key[0]],
                "total": [total[0] if total else None],
                "events": [events],
                "tags": [tags],
            }
        )

    def close(self) -> None:
        pass
