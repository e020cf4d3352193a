"""StatefulProcessors for the flow driver's equivalence tests (importable by Spark's workers).

Each is run by Spark's ``transformWithStateInPandas`` / ``transformWithState`` with Spark's
handles and by fsstate's driver (``ops.transform_with_state[_in_pandas]``) over the same
micro-batches; the outputs must be equal. Outputs never show absolute processing times (two
runs have different clocks): timers are reported relative to the batch time they were
registered at.

* :class:`EventTimers` (pandas, ``EventTime``): a timer per key at its latest event time + 5 s
  (keys of one batch share times, so several keys expire together), and for ``v % 4 == 0`` a
  timer 60 s in the past (at or below the watermark: it fires in the next batch whose
  watermark passed it); an expired timer reports and clears the key's state.
* :class:`ProcTimers` (Row, ``ProcessingTime``): per key, timers at the batch time (fires in
  the same batch), one second before it (fires in the same batch too), one ms after (next
  batch) and one registered and deleted again; ``listTimers`` reported as sorted offsets
  (Spark lists timers in the byte order of their absolute times, different in two runs;
  :class:`EventTimers` compares the order itself, on equal times).
* :class:`JoinChanges` and :class:`MaxWithRetractions` (pandas, None): the seed-003 query as
  two processors: ``info`` and ``visit`` change rows of a product joined per product (the
  join's changes out), and MAX of ``length`` per category over a change stream, keeping every
  value's count so a retraction of the maximum finds the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

EVENT_INPUT = "k STRING, v BIGINT, t TIMESTAMP"
EVENT_OUTPUT = "k STRING, kind STRING, n BIGINT, total BIGINT, info STRING"


class EventTimers(StatefulProcessor):
    """Event-time timers that expire together, and timers at or below the watermark."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.total = handle.getValueState("total", "n BIGINT, total BIGINT")
        self.seen = handle.getListState("seen", "v BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        df = pd.concat(list(rows))
        old = self.total.get() or (0, 0)
        n, total = old[0] + len(df), old[1] + int(df["v"].sum())
        self.total.update((n, total))
        self.seen.appendList([(int(v),) for v in sorted(df["v"])])
        latest = int(df["t"].max().value // 1_000_000)  # ms
        self.handle.registerTimer(latest + 5_000)
        for v in df["v"]:
            if int(v) % 4 == 0:
                self.handle.registerTimer(latest - 60_000)
        timers = list(self.handle.listTimers())  # Spark's order (same times in both runs)
        info = f"wm={timerValues.getCurrentWatermarkInMs()} timers={timers}"
        yield pd.DataFrame(
            {"k": [key[0]], "kind": ["input"], "n": [n], "total": [total], "info": [info]}
        )

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        cur = self.total.get() or (0, 0)
        seen = ",".join(str(v[0]) for v in self.seen.get())
        ts = expiredTimerInfo.getExpiryTimeInMs()
        timers = list(self.handle.listTimers())
        info = f"ts={ts} wm={timerValues.getCurrentWatermarkInMs()} timers={timers} seen={seen}"
        if ts % 10_000 == 5_000:  # the latest-time timer: the key is done
            self.total.clear()
            self.seen.clear()
        yield pd.DataFrame(
            {"k": [key[0]], "kind": ["timer"], "n": [cur[0]], "total": [cur[1]], "info": [info]}
        )

    def close(self) -> None:
        pass


PROC_OUTPUT = "k STRING, kind STRING, count BIGINT, info STRING"


class ProcTimers(StatefulProcessor):
    """Processing-time timers at, before and after the batch time (Row flavour)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "c BIGINT")
        self.base = handle.getValueState("base", "ms BIGINT")  # batch time of registration

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Row]:
        n = sum(1 for _ in rows)
        old = self.count.get()
        count = (old[0] if old else 0) + n
        self.count.update((count,))
        now = timerValues.getCurrentProcessingTimeInMs()
        base = self.base.get()
        if base is None:
            self.base.update((now,))
            self.handle.registerTimer(now)
            self.handle.registerTimer(now - 1_000)
            self.handle.registerTimer(now + 1)
            self.handle.registerTimer(now + 7)
            self.handle.deleteTimer(now + 7)
            base = (now,)
        # sorted: Spark lists in the byte order of the absolute times, which differ between runs
        offsets = sorted(ts - base[0] for ts in self.handle.listTimers())
        yield Row(k=key[0], kind="input", count=count, info=f"timers={offsets}")

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        base = self.base.get()
        assert base is not None
        ts = expiredTimerInfo.getExpiryTimeInMs() - base[0]
        offsets = sorted(t - base[0] for t in self.handle.listTimers())
        cur = self.count.get()
        yield Row(
            k=key[0], kind="timer", count=cur[0] if cur else 0, info=f"ts={ts} timers={offsets}"
        )

    def close(self) -> None:
        pass


JOIN_INPUT = "product STRING, side STRING, category STRING, user STRING, length BIGINT, op INT"
JOIN_OUTPUT = "category STRING, product STRING, user STRING, length BIGINT, op INT"


class JoinChanges(StatefulProcessor):
    """``info JOIN visit USING (product)`` over change rows: the join's changes."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.info = handle.getMapState("info", "category STRING", "n BIGINT")
        self.visits = handle.getMapState("visits", "user STRING, length BIGINT", "n BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        df = pd.concat(list(rows)).sort_values(["side", "op", "category", "user", "length"])
        out: list[tuple[Any, ...]] = []
        for r in df.itertuples(index=False):
            op = int(r.op)
            if r.side == "info":
                mine, other = self.info, self.visits
                ukey: tuple[Any, ...] = (r.category,)
                pairs = [((r.category,), u) for u, _ in other.iterator()]
            else:
                mine, other = self.visits, self.info
                ukey = (r.user, int(r.length))
                pairs = [(c, ukey) for c, _ in other.iterator()]
            cur = mine.getValue(ukey)
            n = (cur[0] if cur else 0) + op
            if n > 0:
                mine.updateValue(ukey, (n,))
            else:
                mine.removeKey(ukey)
            for (cat,), (user, length) in pairs:
                out.append((cat, key[0], user, length, op))
        yield pd.DataFrame(out, columns=["category", "product", "user", "length", "op"])

    def close(self) -> None:
        pass


MAX_INPUT = "category STRING, length BIGINT, op INT"
MAX_OUTPUT = "category STRING, max_length BIGINT, n BIGINT"


class MaxWithRetractions(StatefulProcessor):
    """MAX(length) per category over +1 / -1 changes (every value's count is kept)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.counts = handle.getMapState("counts", "length BIGINT", "n BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        for df in rows:
            for length, op in zip(df["length"], df["op"], strict=True):
                cur = self.counts.getValue((int(length),))
                n = (cur[0] if cur else 0) + int(op)
                if n > 0:
                    self.counts.updateValue((int(length),), (n,))
                else:
                    self.counts.removeKey((int(length),))
        live = [(k[0], v[0]) for k, v in self.counts.iterator()]
        top = max((k for k, _ in live), default=None)
        yield pd.DataFrame(
            {"category": [key[0]], "max_length": [top], "n": [sum(n for _, n in live)]}
        )

    def close(self) -> None:
        pass
