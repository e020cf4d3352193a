"""Versions of one processor whose value state changes schema between restarts (importable
by Spark's workers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

OUT_SCHEMA = "k STRING, count BIGINT, total BIGINT, last STRING"


class TotalsV1(StatefulProcessor):
    """Counts and sums ``v`` per key in ``struct<count int, total int>``."""

    schema = "count INT, total INT"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("totals", self.schema)

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = [int(x) for pdf in rows for x in pdf["v"]]
        cur = self.state.get()
        count, total = (cur[0], cur[1]) if cur else (0, 0)
        count, total = count + len(vals), total + sum(vals)
        self.state.update((count, total))
        yield pd.DataFrame({"k": [key[0]], "count": [count], "total": [total], "last": [None]})

    def close(self) -> None:
        pass


class TotalsV2(StatefulProcessor):
    """Version 2: fields reordered and widened, a nullable ``last`` added."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("totals", "total BIGINT, count BIGINT, last STRING")

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = [int(x) for pdf in rows for x in pdf["v"]]
        cur = self.state.get()
        total, count, last = cur if cur else (0, 0, None)
        out_last = last  # what the stored row says (None for rows written by version 1)
        total, count = total + sum(vals), count + len(vals)
        self.state.update((total, count, f"v{vals[-1]}"))
        yield pd.DataFrame({"k": [key[0]], "count": [count], "total": [total], "last": [out_last]})

    def close(self) -> None:
        pass


class TotalsBadType(TotalsV1):
    """A forbidden change: ``count`` becomes a string."""

    schema = "count STRING, total INT"


class TotalsDropped(StatefulProcessor):
    """An allowed change: ``count`` is gone (stored rows drop it when read, as Spark's Avro
    state encoding reads a removed field); sums ``v`` only."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("totals", "total INT")

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = [int(x) for pdf in rows for x in pdf["v"]]
        cur = self.state.get()
        total = (cur[0] if cur else 0) + sum(vals)
        self.state.update((total,))
        yield pd.DataFrame({"k": [key[0]], "count": [None], "total": [total], "last": [None]})

    def close(self) -> None:
        pass
