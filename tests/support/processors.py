"""StatefulProcessors used by the Spark suite, in a module Spark's workers can import.

Each processor is run twice over the same micro-batches, once with Spark's native state and
once through ``fsstate_spark.tiered``; the outputs must be identical. Outputs are
deterministic (map contents in iteration order, which tiered state reproduces: see
``MapListOrder``); TTLs are either far longer than a test run or far shorter than the gap
between two micro-batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StructField, StructType

INPUT_SCHEMA = "k STRING, v BIGINT"
LONG_TTL_MS = 600_000
SHORT_TTL_MS = 50  # far shorter than the gap between two micro-batches (seconds)

SINK_SCHEMA = (
    "k STRING, count BIGINT, items STRING, hist STRING, last STRING, "
    "has_items BOOLEAN, has_hist BOOLEAN, has_bucket1 BOOLEAN"
)
TTL_SCHEMA = (
    "k STRING, kind STRING, long BIGINT, short_exists BOOLEAN, short BIGINT, slist BIGINT, "
    "smap BIGINT, lmap BIGINT, timers BIGINT"
)
ROW_SCHEMA = "k STRING, count BIGINT, recent STRING, seen STRING"


def _fmt_map(pairs: Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]) -> str:
    # unsorted: the iteration order itself must match Spark's handles
    return ";".join(f"{k[0]}:{v[0]}" for k, v in pairs)


def _failing_attempt(batch: str) -> bool:
    tc = TaskContext.get()
    return (
        tc is not None
        and tc.getLocalProperty("streaming.sql.batchId") == batch
        and tc.attemptNumber() == 0
    )


class KitchenSink(StatefulProcessor):
    """Value, list and map state together; optionally fails once after writing state.

    Args:
        fail_key: if set, the first attempt of micro-batch 1 raises after updating this key's
            state (the retry must not see those writes).
        marker: a file created when the failure is injected (proof that it happened).
    """

    def __init__(self, fail_key: str | None = None, marker: str | None = None) -> None:
        self.fail_key = fail_key
        self.marker = marker

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "count BIGINT")
        self.items = handle.getListState("items", StructType([StructField("v", LongType())]))
        self.hist = handle.getMapState("hist", "bucket INT", "n BIGINT")
        self.last = handle.getValueState("last", "v BIGINT, tag STRING")

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = [int(x) for pdf in rows for x in pdf["v"]]
        old = self.count.get()
        count = (old[0] if old else 0) + len(vals)
        self.count.update((count,))
        self.items.appendValue((vals[0],))
        if len(vals) > 1:
            self.items.appendList([(v,) for v in vals[1:]])
        current = [t[0] for t in self.items.get()]
        if len(current) > 4:
            self.items.put([(v,) for v in current[-3:]])
        if 0 in vals:
            self.items.clear()
        for v in vals:
            bucket = (v % 3,)
            cur = self.hist.getValue(bucket)
            self.hist.updateValue(bucket, ((cur[0] if cur else 0) + 1,))
            if v % 5 == 0:
                self.hist.removeKey(bucket)
        if 99 in vals:
            self.hist.clear()
        prev = self.last.get()
        self.last.update((vals[-1], f"t{count}"))
        if key[0] == self.fail_key and _failing_attempt("1"):
            if self.marker:
                Path(self.marker).touch()
            raise RuntimeError("injected failure after state writes (first attempt)")
        yield pd.DataFrame(
            {
                "k": [key[0]],
                "count": [count],
                "items": [",".join(str(t[0]) for t in self.items.get())],
                "hist": [_fmt_map(self.hist.iterator())],
                "last": [f"{prev[0]}/{prev[1]}" if prev else "-"],
                "has_items": [self.items.exists()],
                "has_hist": [self.hist.exists()],
                "has_bucket1": [self.hist.containsKey((1,))],
            }
        )

    def close(self) -> None:
        pass


class TtlTimers(StatefulProcessor):
    """TTL on value, list and map state, plus processing-time timers that read state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.long = handle.getValueState("long", "n BIGINT", LONG_TTL_MS)
        self.short = handle.getValueState("short", "n BIGINT", SHORT_TTL_MS)
        self.slist = handle.getListState("slist", "n BIGINT", SHORT_TTL_MS)
        self.smap = handle.getMapState("smap", "u STRING", "n BIGINT", SHORT_TTL_MS)
        self.lmap = handle.getMapState("lmap", "u STRING", "n BIGINT", LONG_TTL_MS)

    def _row(self, key: Any, kind: str) -> pd.DataFrame:
        long = self.long.get()
        short = self.short.get()
        return pd.DataFrame(
            {
                "k": [key[0]],
                "kind": [kind],
                "long": [long[0] if long else -1],
                "short_exists": [self.short.exists()],
                "short": [short[0] if short else -1],
                "slist": [len(list(self.slist.get()))],
                "smap": [len(list(self.smap.keys()))],
                "lmap": [sum(v[0] for v in self.lmap.values())],
                "timers": [len(list(self.handle.listTimers()))],
            }
        )

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = [int(x) for pdf in rows for x in pdf["v"]]
        out = self._row(key, "input")
        first = not self.long.exists()
        long = self.long.get()
        self.long.update(((long[0] if long else 0) + sum(vals),))
        self.short.update((sum(vals),))
        self.slist.appendList([(v,) for v in vals])
        for v in vals:
            self.smap.updateValue((f"u{v % 2}",), (v,))
            self.lmap.updateValue((f"u{v % 2}",), (v,))
        if first:
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        yield out

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        self.lmap.removeKey(("u0",))
        yield self._row(key, "timer")

    def close(self) -> None:
        pass


class RowCounter(StatefulProcessor):
    """Row-flavour (transformWithState) processor with value and list state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "c BIGINT")
        self.recent = handle.getListState("recent", "v BIGINT")
        self.seen = handle.getMapState("seen", "v BIGINT", "n INT")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Row]:
        n = 0
        for row in rows:
            n += 1
            self.recent.appendValue((row.v,))
            cur = self.seen.getValue((row.v,))
            self.seen.updateValue((row.v,), ((cur[0] if cur else 0) + 1,))
        old = self.count.get()
        count = (old[0] if old else 0) + n
        self.count.update((count,))
        recent = [t[0] for t in self.recent.get()][-3:]
        self.recent.put([(v,) for v in recent])
        yield Row(
            k=key[0],
            count=count,
            recent=",".join(map(str, recent)),
            seen=_fmt_map(self.seen.iterator()),
        )

    def close(self) -> None:
        pass


ORDER_INPUT_SCHEMA = "k STRING, i BIGINT, op STRING, s STRING, n BIGINT"
ORDER_SCHEMA = "k STRING, maps STRING, list STRING"


class MapListOrder(StatefulProcessor):
    """Emits the *unsorted* iteration order of map and list state after each key's rows.

    Rows are applied in ``i`` order (Spark does not keep the input order within a key).
    ``op``: ``put`` / ``del`` an entry keyed by ``s`` / ``n`` in maps with string, BIGINT, INT,
    composite (STRING, BIGINT) and DOUBLE user keys; ``mclr`` clears the string map; ``app``,
    ``appl``, ``lput``, ``lclr`` append to, extend, replace or clear the list.

    Args:
        flavour: ``"pandas"`` (transformWithStateInPandas) or ``"row"`` (transformWithState).
    """

    def __init__(self, flavour: str = "pandas") -> None:
        self.flavour = flavour

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.m_str = handle.getMapState("m_str", "u STRING", "v BIGINT")
        self.m_long = handle.getMapState("m_long", "u BIGINT", "v BIGINT")
        self.m_int = handle.getMapState("m_int", "u INT", "v BIGINT")
        self.m_comp = handle.getMapState("m_comp", "s STRING, n BIGINT", "v BIGINT")
        self.m_dbl = handle.getMapState("m_dbl", "d DOUBLE", "v BIGINT")
        self.lst = handle.getListState("lst", "v BIGINT")

    def _apply(self, i: int, op: str, s: str, n: int) -> None:
        small = n if -(2**31) <= n < 2**31 else n % 2**31
        if op == "put":
            self.m_str.updateValue((s,), (n,))
            self.m_long.updateValue((n,), (i,))
            self.m_int.updateValue((small,), (i,))
            self.m_comp.updateValue((s, n), (i,))
            self.m_dbl.updateValue((n / 4.0,), (i,))
        elif op == "del":
            self.m_str.removeKey((s,))
            self.m_long.removeKey((n,))
            self.m_int.removeKey((small,))
            self.m_comp.removeKey((s, n))
            self.m_dbl.removeKey((n / 4.0,))
        elif op == "mclr":
            self.m_str.clear()
        elif op == "app":
            self.lst.appendValue((n,))
        elif op == "appl":
            self.lst.appendList([(n,), (n + 1,)])
        elif op == "lput":
            self.lst.put([(n,), (i,)])
        elif op == "lclr":
            self.lst.clear()

    def _orders(self) -> tuple[str, str]:
        import json

        maps = {
            "str_keys": [k[0] for k in self.m_str.keys()],
            "str_values": [v[0] for v in self.m_str.values()],
            "long_keys": [k[0] for k in self.m_long.keys()],
            "int_items": [[k[0], v[0]] for k, v in self.m_int.iterator()],
            "comp_items": [[list(k), v[0]] for k, v in self.m_comp.iterator()],
            "dbl_keys": [k[0] for k in self.m_dbl.keys()],
        }
        return json.dumps(maps), json.dumps([v[0] for v in self.lst.get()])

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
        if self.flavour == "row":
            ops = sorted((int(r.i), r.op, r.s, int(r.n)) for r in rows)
        else:
            pdf = pd.concat(list(rows)).sort_values("i")
            ops = [(int(i), op, s, int(n)) for i, op, s, n in pdf[["i", "op", "s", "n"]].values]
        for op in ops:
            self._apply(*op)
        maps, lst = self._orders()
        if self.flavour == "row":
            yield Row(k=key[0], maps=maps, list=lst)
        else:
            yield pd.DataFrame({"k": [key[0]], "maps": [maps], "list": [lst]})

    def close(self) -> None:
        pass


# the input of the KitchenSink comparisons (test_streaming, test_object_storage, test_connect)
SINK_BATCHES = [
    [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 4}, {"k": "d", "v": 7}],
    [{"k": "a", "v": 3}, {"k": "c", "v": 0}, {"k": "b", "v": 5}, {"k": "b", "v": 8}],
    [{"k": "a", "v": 6}, {"k": "c", "v": 1}, {"k": "b", "v": 99}, {"k": "a", "v": 10}],
]


# the input of the MapListOrder comparisons (test_order, test_object_storage)
LONG_S = "x" * 235  # an UnsafeRow of 256 bytes: its size's low byte sorts before ''s


def _order_rows(k: str, start: int, ops: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    return [{"k": k, "i": start + j, "op": op, "s": s, "n": n} for j, (op, s, n) in enumerate(ops)]


ORDER_BATCHES = [
    _order_rows(
        "g1",
        0,
        [
            ("put", "a", 1),
            ("put", "B", 256),
            ("put", "aa", 2),
            ("put", "", -1),
            ("put", LONG_S, 255),
            ("app", "", 5),
            ("app", "", 3),
            ("appl", "", 9),
        ],
    )
    + _order_rows("g2", 100, [("put", "é", 2**40), ("put", "b", 0), ("app", "", 7)]),
    _order_rows(
        "g1",
        10,
        [
            ("put", "a", 257),
            ("del", "B", 256),
            ("put", "zz", -2),
            ("put", "a", 1),  # an update of an existing entry
            ("appl", "", 2),
        ],
    )
    + _order_rows(
        "g2",
        110,
        [("del", "b", 0), ("put", "b", 0), ("put", "abcdefghi", 65536), ("lput", "", 4)],
    ),
    _order_rows(
        "g1",
        20,
        [("put", "B", 256), ("put", "中文", -(2**33)), ("del", "aa", 2), ("app", "", 8)],
    )
    + _order_rows("g2", 120, [("mclr", "", 0), ("put", "q", 3), ("lclr", "", 0), ("app", "", 1)]),
]


class KitchenSinkRenamed(KitchenSink):
    """The same processor under another class name (a new release of the user's code)."""


class GcProbe(StatefulProcessor):
    """Row flavour: per key one ``Row(k, young, frozen)``: the worker's young-generation GC
    threshold and frozen-object count while the key runs (the keyed loop's task settings,
    :mod:`fsstate.osmem`), after a value-state round trip."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.seen = handle.getValueState("seen", "n BIGINT")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Row]:
        import gc

        old = self.seen.get()
        self.seen.update(((old[0] if old else 0) + sum(1 for _ in rows),))
        yield Row(k=key[0], young=gc.get_threshold()[0], frozen=gc.get_freeze_count())

    def close(self) -> None:
        pass


GC_PROBE_SCHEMA = "k STRING, young BIGINT, frozen BIGINT"
