"""A processor for rescaling tests of ``tiered()`` queries, importable by Spark's workers.

:class:`RescaleProbe` keeps value, list and map state with TTL and one processing-time timer
per key, grouped by a two-column key (a string and an INT, so a key placed by a hash of the
wrong type would be found in the wrong partition). Every output row shows the key's whole
state as the partition running it sees it (count, list in order, map in Spark's iteration
order, whether short-TTL state exists, its timers), for input rows and for fired timers alike:
a key whose state a rescale lost, misplaced or gave to another key changes the output, and so
does a timer Spark moved to a partition whose fsstate store lacks the key's state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from tests.support.processors import LONG_TTL_MS, SHORT_TTL_MS

PROBE_INPUT = "k STRING, g INT, v BIGINT"
PROBE_OUTPUT = (
    "k STRING, g INT, kind STRING, count BIGINT, recent STRING, hist STRING, short BOOLEAN, "
    "timers BIGINT"
)


def probe_batches(seed: int, batches: int, keys: int = 24) -> list[list[dict[str, Any]]]:
    """Rows of ``batches`` micro-batches: a seeded subset of the keys, 1-3 rows each."""
    import random

    rng = random.Random(seed)
    out = []
    for b in range(batches):
        rows = []
        for i in rng.sample(range(keys), rng.randrange(keys // 3, keys)):
            for _ in range(rng.randrange(1, 4)):
                rows.append({"k": f"k{i % 7}", "g": i, "v": rng.randrange(100) + 1000 * b})
        out.append(rows)
    return out


class RescaleProbe(StatefulProcessor):
    """Value, list and map state with TTL and processing-time timers (see the module)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "n BIGINT", LONG_TTL_MS)
        self.recent = handle.getListState("recent", "v BIGINT", LONG_TTL_MS)
        self.hist = handle.getMapState("hist", "b INT", "n BIGINT", LONG_TTL_MS)
        self.short = handle.getValueState("short", "n BIGINT", SHORT_TTL_MS)

    def _row(self, key: Any, kind: str) -> pd.DataFrame:
        count = self.count.get()
        return pd.DataFrame(
            {
                "k": [key[0]],
                "g": [int(key[1])],
                "kind": [kind],
                "count": [count[0] if count else -1],
                "recent": [",".join(str(v[0]) for v in self.recent.get())],
                "hist": [";".join(f"{u[0]}:{n[0]}" for u, n in self.hist.iterator())],
                "short": [self.short.exists()],
                "timers": [len(list(self.handle.listTimers()))],
            }
        )

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = sorted(int(x) for pdf in rows for x in pdf["v"])
        old = self.count.get()
        self.count.update(((old[0] if old else 0) + len(vals),))
        recent = [v[0] for v in self.recent.get()] + vals
        self.recent.put([(v,) for v in recent[-4:]])
        for v in vals:
            cur = self.hist.getValue((v % 3,))
            self.hist.updateValue((v % 3,), ((cur[0] if cur else 0) + 1,))
        self.short.update((len(vals),))
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        yield self._row(key, "input")

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        yield self._row(key, "timer")

    def close(self) -> None:
        pass
