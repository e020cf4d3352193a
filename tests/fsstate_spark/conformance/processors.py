"""The processors of Spark's Python transformWithState tests, as this project's own port.

Spark's workers import them by module path (``tests.fsstate_spark.conformance.processors``),
so they live here and not in the test modules. Each class reproduces the logic of a processor
of Spark's ``helper_pandas_transform_with_state.py`` (or of one defined inside a test); the
names say which: ``PandasX`` / ``RowX`` for Spark's ``PandasX...`` / ``RowX...`` pair. The
assertions Spark's processors make inside their callbacks (iteration order of list and map
state, the values read back, errors raised by the handles) are kept: a failed one fails the
query, and the way that ran it.

Invariants:

* The logic is Spark's, including its quirks (a pandas processor reading only the last chunk,
  a check that holds only for one-column keys); where a processor needs a wall-clock value
  it is a constructor argument (TTL), so a scenario can choose one whose effect is certain.
* No processor keeps anything between tasks but its state variables: Spark pickles a fresh
  copy per task, and so do the other ways.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

Frames = Iterator[pd.DataFrame]
Rows = Iterator[Row]

VALUE_INT = StructType([StructField("value", IntegerType(), True)])
VALUE_STR = StructType([StructField("value", StringType(), True)])


# -- value state: accumulate, with and without an initial state ------------------------------
class _AccumulateBase(StatefulProcessor):
    """Spark's ``SimpleStatefulProcessorWithInitialState``: the running sum of ``temperature``
    in a value state, seeded by the initial state's ``initVal``."""

    INITIAL = {("0",): 789, ("3",): 987}  # the initial state rows of Spark's test

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.value_state = handle.getValueState("value_state", VALUE_INT)

    def _accumulate(self, added: int) -> int:
        current = self.value_state.get()[0] if self.value_state.exists() else 0
        total = int(current) + added
        self.value_state.update((total,))
        return total

    def _check_initial(self, key: Any, init_val: Any) -> None:
        self.value_state.update((init_val,))
        if len(key) == 1:
            assert self.INITIAL[tuple(key)] == init_val, f"initial state of {key}: {init_val}"

    def close(self) -> None:
        pass


class PandasAccumulate(_AccumulateBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        total = self._accumulate(sum(int(pdf["temperature"].astype(int).sum()) for pdf in rows))
        if len(key) > 1:
            yield pd.DataFrame({"id1": (key[0],), "id2": (key[1],), "value": str(total)})
        else:
            yield pd.DataFrame({"id": key, "value": str(total)})

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: Any) -> None:
        self._check_initial(key, initialState.at[0, "initVal"])


class RowAccumulate(_AccumulateBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        total = self._accumulate(sum(row.temperature for row in rows))
        if len(key) > 1:
            yield Row(id1=key[0], id2=key[1], value=str(total))
        else:
            yield Row(id=key[0], value=str(total))

    def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:
        self._check_initial(key, initialState.initVal)


def _expired_timer(handle: StatefulProcessorHandle, info: ExpiredTimerInfo) -> int:
    expiry = info.getExpiryTimeInMs()
    handle.deleteTimer(expiry)
    return int(expiry)


class PandasAccumulateInitialTimers(PandasAccumulate):
    """Spark's ``StatefulProcessorWithInitialStateTimers``: a timer at the batch time - 1 ms
    registered for every key of the initial state."""

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Frames:
        expiry = _expired_timer(self.handle, expiredTimerInfo)
        yield pd.DataFrame({"id": (f"{key[0]}-expired",), "value": str(expiry)})

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: Any) -> None:
        super().handleInitialState(key, initialState, timerValues)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() - 1)


class RowAccumulateInitialTimers(RowAccumulate):
    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Rows:
        expiry = _expired_timer(self.handle, expiredTimerInfo)
        yield Row(id=f"{key[0]}-expired", value=str(expiry))

    def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:
        super().handleInitialState(key, initialState, timerValues)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() - 1)


class PandasAccumulateListInitial(PandasAccumulate):
    """Spark's ``StatefulProcessorWithListStateInitialState``: the initial state's rows (several
    per key) appended to a list state; the value state starts at 0."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.list_state = handle.getListState("list_state", VALUE_INT)

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: Any) -> None:
        for value in initialState["initVal"].tolist():
            self.list_state.appendValue((value,))


class RowAccumulateListInitial(RowAccumulate):
    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.list_state = handle.getListState("list_state", VALUE_INT)

    def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:
        self.list_state.appendValue((initialState.initVal,))


# -- value state, a deleted state variable, TTL ----------------------------------------------
class _ViolationsBase(StatefulProcessor):
    """Spark's ``SimpleStatefulProcessor``: counts rows and keeps the number of rows over 100
    per key; declares ``tempState``, deletes it with ``deleteIfExists`` and checks that the old
    handle then raises ``PySparkRuntimeError`` on ``exists()``."""

    EXPECTED = {0: {"0": 1, "1": 2}, 1: {"0": 4, "1": 3}}  # violations after each batch
    batch = 0
    TTL_MS: int | None = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        if self.TTL_MS is None:
            self.violations = handle.getValueState("numViolations", "value int")
        else:
            self.violations = handle.getValueState("numViolations", VALUE_INT, self.TTL_MS)
        self.temp_state = handle.getValueState("tempState", VALUE_INT)
        handle.deleteIfExists("tempState")

    def _check_deleted(self) -> None:
        try:
            self.temp_state.exists()
        except PySparkRuntimeError as exc:
            assert "Error checking value state exists" in str(exc), str(exc)
        else:
            raise AssertionError(
                "exists() on a state variable removed with deleteIfExists returned; Spark's "
                "handle raises PySparkRuntimeError"
            )

    def _update(self, key: str, new_violations: int) -> None:
        previous = 0
        if self.violations.exists():
            previous = self.violations.get()[0]
            assert previous == self.EXPECTED[0][key], f"violations of {key}: {previous}"
            self.batch = 1
        updated = previous + new_violations
        assert updated == self.EXPECTED[self.batch][key], f"violations of {key}: {updated}"
        self.violations.update((updated,))

    def close(self) -> None:
        pass


class PandasViolations(_ViolationsBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        self._check_deleted()
        count = new = 0
        for pdf in rows:
            count += int(pdf["temperature"].count())
            new += int(pdf.loc[pdf["temperature"] > 100, "temperature"].count())
        self._update(key[0], new)
        yield pd.DataFrame({"id": key, "countAsString": str(count)})


class RowViolations(_ViolationsBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        self._check_deleted()
        count = new = 0
        for row in rows:
            if row.temperature is not None:
                count += 1
                new += row.temperature > 100
        self._update(key[0], new)
        yield Row(id=key[0], countAsString=str(count))


class PandasViolationsTTL(PandasViolations):
    """Spark's ``SimpleTTLStatefulProcessor``: the same with a 30 s TTL on ``numViolations``."""

    TTL_MS = 30_000


class RowViolationsTTL(RowViolations):
    TTL_MS = 30_000


class _TTLCountsBase(StatefulProcessor):
    """Spark's ``TTLStatefulProcessor``: row counts kept in value, list and map state with a
    TTL and in a value state without; key ``"0"`` skips its TTL updates when its TTL count
    reaches 2. The TTL is an argument (Spark's is 10 s)."""

    def __init__(self, ttl_ms: int = 10_000) -> None:
        self.ttl_ms = ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        user_key = StructType([StructField("id", StringType(), True)])
        self.ttl_count = handle.getValueState("ttl-state", VALUE_INT, self.ttl_ms)
        self.count = handle.getValueState("state", VALUE_INT)
        self.ttl_list = handle.getListState("ttl-list-state", VALUE_INT, self.ttl_ms)
        self.ttl_map = handle.getMapState("ttl-map-state", user_key, VALUE_INT, self.ttl_ms)

    def _counts(self, key: Any, added: int) -> list[tuple[str, int]]:
        ident = key[0]
        count = self.count.get()[0] if self.count.exists() else 0
        ttl_count = self.ttl_count.get()[0] if self.ttl_count.exists() else 0
        list_count = sum(s[0] for s in self.ttl_list.get()) if self.ttl_list.exists() else 0
        map_count = self.ttl_map.getValue(key)[0] if self.ttl_map.exists() else 0
        count, ttl_count = count + added, ttl_count + added
        list_count, map_count = list_count + added, map_count + added
        self.count.update((count,))
        if not (ttl_count == 2 and ident == "0"):
            self.ttl_count.update((ttl_count,))
            self.ttl_list.put([(list_count,), (list_count,)])
            self.ttl_map.updateValue(key, (map_count,))
        return [
            (f"ttl-count-{ident}", ttl_count),
            (f"count-{ident}", count),
            (f"ttl-list-state-count-{ident}", list_count),
            (f"ttl-map-state-count-{ident}", map_count),
        ]

    def close(self) -> None:
        pass


class PandasTTLCounts(_TTLCountsBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        pairs = self._counts(key, sum(int(pdf["temperature"].count()) for pdf in rows))
        yield pd.DataFrame({"id": [p[0] for p in pairs], "count": [p[1] for p in pairs]})


class RowTTLCounts(_TTLCountsBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        pairs = self._counts(key, sum(1 for row in rows if row.temperature is not None))
        return iter([Row(id=p[0], count=p[1]) for p in pairs])


class _MissingValueBase(StatefulProcessor):
    """Spark's ``InvalidSimpleStatefulProcessor``: reads and clears a value state never set."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.violations = handle.getValueState("numViolations", VALUE_INT)

    def _check(self) -> None:
        assert not self.violations.exists()
        assert self.violations.get() is None
        self.violations.clear()


class PandasMissingValue(_MissingValueBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        self._check()
        yield pd.DataFrame({"id": key, "countAsString": "0"})


class RowMissingValue(_MissingValueBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        self._check()
        yield Row(id=key[0], countAsString="0")


# -- timers ----------------------------------------------------------------------------------
class _MaxEventTimeBase(StatefulProcessor):
    """Spark's ``EventTimeStatefulProcessor``: the largest event time seen (seconds), a timer at
    the current watermark, the state cleared when it fires."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.max_state = handle.getValueState("max_state", VALUE_STR)

    def _update(self, seconds: list[int], timerValues: TimerValues) -> str:
        current = int(self.max_state.get()[0]) if self.max_state.exists() else 0
        largest = str(max(current, max(seconds)))
        self.max_state.update((largest,))
        self.handle.registerTimer(timerValues.getCurrentWatermarkInMs())
        return largest

    def _expire(self, info: ExpiredTimerInfo) -> int:
        self.max_state.clear()
        return _expired_timer(self.handle, info)

    def close(self) -> None:
        pass


class PandasMaxEventTime(_MaxEventTimeBase):
    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Frames:
        expiry = self._expire(expiredTimerInfo)
        yield pd.DataFrame({"id": (f"{key[0]}-expired",), "timestamp": str(expiry)})

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        seconds: list[int] = []
        for pdf in rows:  # datetime64[ns] as int64 nanoseconds, to seconds (Spark's code)
            seconds.extend((pdf["eventTime"].astype("int64") // 10**9).tolist())
        yield pd.DataFrame({"id": key, "timestamp": self._update(seconds, timerValues)})


class RowMaxEventTime(_MaxEventTimeBase):
    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Rows:
        expiry = self._expire(expiredTimerInfo)
        yield Row(id=f"{key[0]}-expired", timestamp=str(expiry))

    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        seconds = [int(row.eventTime.timestamp()) for row in rows]
        yield Row(id=key[0], timestamp=self._update(seconds, timerValues))


class _MinEventTimeBase(StatefulProcessor):
    """Spark's ``MinEventTimeStatefulProcessor``: the smallest event time seen (no timers)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.min_state = handle.getValueState("min_state", VALUE_STR)

    def _update(self, seconds: list[int]) -> str:
        current = int(self.min_state.get()[0]) if self.min_state.exists() else sys.maxsize
        smallest = str(min(current, min(seconds)))
        self.min_state.update((smallest,))
        return smallest

    def close(self) -> None:
        pass


class PandasMinEventTime(_MinEventTimeBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        seconds: list[int] = []
        for pdf in rows:
            seconds.extend((pdf["eventTime"].astype("int64") // 10**9).tolist())
        yield pd.DataFrame({"id": key, "timestamp": self._update(seconds)})


class RowMinEventTime(_MinEventTimeBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        yield Row(id=key[0], timestamp=self._update([int(r.eventTime.timestamp()) for r in rows]))


class _ProcTimeCountBase(StatefulProcessor):
    """Spark's ``ProcTimeStatefulProcessor``: a running row count; key ``"0"`` registers a
    timer 1 ms after every batch time, and a firing timer clears the count (listing the key's
    timers twice on the way: both listings must agree, and hold two timers)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count_state = handle.getValueState("count_state", VALUE_STR)

    def _expire(self, info: ExpiredTimerInfo) -> int:
        first = list(self.handle.listTimers())
        second = list(self.handle.listTimers())
        assert first == second, f"two listings of the timers differ: {first} / {second}"
        if first:
            assert len(first) == 2, f"timers: {first}"
        self.count_state.clear()
        return _expired_timer(self.handle, info)

    def _count(self, key: Any, added: int, timerValues: TimerValues) -> tuple[str, str]:
        count = int(self.count_state.get()[0]) if self.count_state.exists() else 0
        now = timerValues.getCurrentProcessingTimeInMs()
        if tuple(key) == ("0",):
            self.handle.registerTimer(now + 1)
        count += added
        self.count_state.update((str(count),))
        return str(count), str(now)

    def close(self) -> None:
        pass


class PandasProcTimeCount(_ProcTimeCountBase):
    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Frames:
        expiry = self._expire(expiredTimerInfo)
        yield pd.DataFrame({"id": key, "countAsString": "-1", "timeValues": str(expiry)})

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        count, now = self._count(key, sum(len(pdf) for pdf in rows), timerValues)
        yield pd.DataFrame({"id": key, "countAsString": count, "timeValues": now})


class RowProcTimeCount(_ProcTimeCountBase):
    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Rows:
        expiry = self._expire(expiredTimerInfo)
        yield Row(id=key[0], countAsString="-1", timeValues=str(expiry))

    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        count, now = self._count(key, sum(1 for _ in rows), timerValues)
        yield Row(id=key[0], countAsString=count, timeValues=now)


class PandasChainingOps(StatefulProcessor):
    """Spark's ``StatefulProcessorChainingOps``: no state; emits the first event time of the
    key's last chunk, for a downstream stateful operator."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        times: list[Any] = []
        for pdf in rows:
            times = pdf["eventTime"].tolist()
        yield pd.DataFrame({"id": key, "outputTimestamp": times[0]})

    def close(self) -> None:
        pass


class RowChainingOps(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        times = [row.eventTime for row in rows]
        yield Row(id=key[0], outputTimestamp=times[0])

    def close(self) -> None:
        pass


# -- list state ------------------------------------------------------------------------------
TEMPERATURE = StructType([StructField("temperature", IntegerType(), True)])
TIME = StructType([StructField("time", TimestampType(), True)])


class _ListStateBase(StatefulProcessor):
    """Spark's ``ListStateProcessor``: put, appendValue and appendList on two list states per
    chunk (pandas) or row (Row), then three interleaved iterators over them must resume where
    they stopped; a list of timestamps (batch time + 1 minute) is written too."""

    TTL_MS: int | None = None
    FIRST, SECOND = 120, 20

    def init(self, handle: StatefulProcessorHandle) -> None:
        ttl = () if self.TTL_MS is None else (self.TTL_MS,)
        self.list_state1 = handle.getListState("listState1", TEMPERATURE, *ttl)
        self.list_state2 = handle.getListState("listState2", TEMPERATURE, *ttl)
        self.list_state_timestamp = handle.getListState("listStateTimestamp", TIME)

    def _write(self, timerValues: TimerValues) -> tuple[dt.datetime]:
        pair = [(self.FIRST,), (self.SECOND,)]
        self.list_state1.put(pair)
        self.list_state2.put(pair)
        self.list_state1.appendValue((111,))
        self.list_state2.appendValue((222,))
        self.list_state1.appendList(pair)
        self.list_state2.appendList(pair)
        now = dt.datetime.fromtimestamp(timerValues.getCurrentProcessingTimeInMs() / 1000)
        return (now + dt.timedelta(minutes=1),)

    def _check(self, times: list[tuple[dt.datetime]]) -> None:
        it1, it2 = self.list_state1.get(), self.list_state2.get()
        first, second = self.FIRST, self.SECOND
        assert next(it1)[0] == first and next(it2)[0] == first
        assert next(it1)[0] == second and next(it2)[0] == second
        it3 = self.list_state1.get()
        assert next(it3)[0] == first and next(it3)[0] == second
        assert next(it1)[0] == 111 and next(it2)[0] == 222 and next(it3)[0] == 111
        for expected in (first, second):
            assert next(it1)[0] == expected
            assert next(it2)[0] == expected
            assert next(it3)[0] == expected
        if times:
            self.list_state_timestamp.put(times)

    def close(self) -> None:
        pass


class PandasListState(_ListStateBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        count = 0
        times = []
        for pdf in rows:
            times.append(self._write(timerValues))
            count += int(pdf["temperature"].count())
        self._check(times)
        yield pd.DataFrame({"id": key, "countAsString": str(count)})


class RowListState(_ListStateBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        count = 0
        times = []
        for row in rows:
            times.append(self._write(timerValues))
            count += row.temperature is not None
        self._check(times)
        yield Row(id=key[0], countAsString=str(count))


class PandasListStateTTL(PandasListState):
    """Spark's ``ListStateLargeTTLProcessor``: the same with a 30 s TTL on both lists."""

    TTL_MS = 30_000


class RowListStateTTL(RowListState):
    TTL_MS = 30_000


class _LargeListBase(StatefulProcessor):
    """Spark's ``ListStateLargeListProcessor``: 100 elements with a null field written with put
    (key ``"0"``) or appendList (others), then 90 more; the list read back must match the size
    kept in a value state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        element = StructType(
            [StructField("value", IntegerType(), True), StructField("valueNull", IntegerType())]
        )
        self.list_state = handle.getListState("listState", element)
        self.size_state = handle.getValueState(
            "listSizeState", StructType([StructField("size", IntegerType(), True)])
        )

    def _update(self, key: Any) -> tuple[str, str]:
        elements = list(self.list_state.get())
        put = tuple(key) == ("0",)
        if not elements:
            assert self.size_state.get() is None
            new = [(i, None) for i in range(100)]
            if put:
                self.list_state.put(new)
            else:
                self.list_state.appendList(new)
            self.size_state.update((len(new),))
        else:
            size = self.size_state.get()
            assert size is not None
            size = size[0]
            assert size == len(elements), f"list size {size} != {len(elements)}"
            expected = [(i, None) for i in range(size)]
            assert [tuple(e) for e in elements] == expected, f"list: {elements}"
            if put:
                self.list_state.put([(i, None) for i in range(size + 90)])
            else:
                self.list_state.appendList([(i, None) for i in range(size, size + 90)])
            self.size_state.update((size + 90,))
        previous = ",".join(str(e[0]) for e in elements)
        updated = ",".join(str(e[0]) for e in self.list_state.get())
        return previous, updated

    def close(self) -> None:
        pass


class PandasLargeList(_LargeListBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        previous, updated = self._update(key)
        yield pd.DataFrame({"id": key, "prevElements": previous, "updatedElements": updated})


class RowLargeList(_LargeListBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        previous, updated = self._update(key)
        yield Row(id=key[0], prevElements=previous, updatedElements=updated)


# -- map state -------------------------------------------------------------------------------
class _MapStateBase(StatefulProcessor):
    """Spark's ``MapStateProcessor``: two entries updated with the row count, then keys(),
    values() and iterator() must list them in insertion order, removeKey and clear must
    show in containsKey and exists."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.map_state = handle.getMapState("mapState", "name string", "count int")

    def _exercise(self, count: int) -> None:
        key1, key2 = ("key1",), ("key2",)
        value1 = value2 = count
        if self.map_state.exists():
            if self.map_state.containsKey(key1):
                value1 += self.map_state.getValue(key1)[0]
            if self.map_state.containsKey(key2):
                value2 += self.map_state.getValue(key2)[0]
        self.map_state.updateValue(key1, (value1,))
        self.map_state.updateValue(key2, (value2,))
        keys = self.map_state.keys()
        assert next(keys)[0] == "key1" and next(keys)[0] == "key2"
        values = self.map_state.values()
        assert next(values)[0] == value1 and next(values)[0] == value2
        entries = self.map_state.iterator()
        assert next(entries)[0] == key1
        assert next(entries)[1] == (value2,)
        self.map_state.removeKey(key1)
        assert not self.map_state.containsKey(key1)
        assert self.map_state.exists()
        self.map_state.clear()
        assert not self.map_state.exists()

    def close(self) -> None:
        pass


class PandasMapState(_MapStateBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        count = sum(int(pdf["temperature"].count()) for pdf in rows)
        self._exercise(count)
        yield pd.DataFrame({"id": key, "countAsString": str(count)})


class RowMapState(_MapStateBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        count = sum(1 for row in rows if row.temperature is not None)
        self._exercise(count)
        yield Row(id=key[0], countAsString=str(count))


NAME = StructType([StructField("name", StringType(), True)])
ONE_YEAR_MS = 31_536_000_000


class PandasMapStateTTL(PandasMapState):
    """Spark's ``MapStateLargeTTLProcessor``: the same with a one-year TTL on the map, and an
    unused list state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        value = StructType([StructField("count", IntegerType(), True)])
        self.map_state = handle.getMapState("mapState", NAME, value, ONE_YEAR_MS)
        self.list_state = handle.getListState("listState", NAME)


class RowMapStateTTL(RowMapState):
    def init(self, handle: StatefulProcessorHandle) -> None:
        value = StructType([StructField("count", IntegerType(), True)])
        self.map_state = handle.getMapState("mapState", NAME, value, ONE_YEAR_MS)
        self.list_state = handle.getListState("listState", NAME)


# -- composite types -------------------------------------------------------------------------
class Address(NamedTuple):
    road_id: int
    city: str


OBJ_SCHEMA = StructType(
    [
        StructField("id", ArrayType(IntegerType())),
        StructField("tags", ArrayType(ArrayType(StringType()))),
        StructField(
            "metadata",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", StringType())])
            ),
        ),
        StructField(
            "address",
            ArrayType(
                StructType(
                    [StructField("road_id", IntegerType()), StructField("city", StringType())]
                )
            ),
        ),
    ]
)
MAP_VALUE_SCHEMA = StructType(
    [
        StructField("id", IntegerType(), True),
        StructField("attributes", MapType(StringType(), ArrayType(IntegerType())), True),
        StructField("confs", MapType(StringType(), MapType(StringType(), IntegerType())), True),
    ]
)


class _CompositeTypeBase(StatefulProcessor):
    """Spark's ``StatefulProcessorCompositeType``: arrays, nested arrays, arrays of structs and
    maps of maps in value, list and map state; the map state is addressed with a bare string
    as its one-field user key (as Spark's test does)."""

    TAGS = [["dummy1", "dummy2"], ["dummy3"]]
    METADATA = [{"key": "env", "value": "prod"}, {"key": "region", "value": "us-west"}]
    ATTRIBUTES = {"key1": [1], "key2": [10]}
    CONFS = {"e1": {"e2": 5, "e3": 10}}
    ADDRESS = [Address(1, "Seattle"), Address(3, "SF")]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.obj_state = handle.getValueState("obj_state", OBJ_SCHEMA)
        self.list_state = handle.getListState("list_state", OBJ_SCHEMA)
        self.map_state = handle.getMapState("map_state", "name string", MAP_VALUE_SCHEMA)

    def _update_obj(self, total: int) -> list[int]:
        if self.obj_state.exists():
            ids, tags, metadata, address = self.obj_state.get()
            assert tags == self.TAGS, f"tags: {tags}"
            assert metadata == [Row(**m) for m in self.METADATA], f"metadata: {metadata}"
            assert address == [Row(**a._asdict()) for a in self.ADDRESS], f"address: {address}"
            ids = [int(x + total) for x in ids]
        else:
            ids = [0]
        self.obj_state.update((ids, self.TAGS, self.METADATA, self.ADDRESS))
        return ids

    def _update_list(self, total: int, first: tuple[Any, ...]) -> list[int]:
        updated = []
        for ids, tags, metadata, address in self.list_state.get():
            ids.append(total)
            updated.append((ids, tags, [m.asDict() for m in metadata], address))
        if not updated:
            updated.append(first)
        self.list_state.put(updated)
        return [i for ids, _, _, _ in updated for i in ids]

    def _update_map(self, key: str, total: int) -> tuple[Any, Any]:
        if not self.map_state.containsKey(key):
            self.map_state.updateValue(key, (0, self.ATTRIBUTES, self.CONFS))
        else:
            ident, attributes, confs = self.map_state.getValue(key)
            attributes[key] = [total]
            confs.setdefault("e1", {})[key] = total
            self.map_state.updateValue(key, (ident, attributes, confs))
        value = self.map_state.getValue(key)
        return value[1], value[2]

    def _row(self, key: str, total: int) -> dict[str, str]:
        ids = self._update_obj(total)
        flat = self._update_list(total, (ids, self.TAGS, self.METADATA, self.ADDRESS))
        attributes, confs = self._update_map(key, total)

        def plain(x: Any) -> Any:
            return int(x) if isinstance(x, np.integer) else x

        return {
            "id": key,
            "value_arr": ",".join(map(str, ids)),
            "list_state_arr": ",".join(map(str, flat)),
            "map_state_arr": json.dumps(attributes, default=plain, sort_keys=True),
            "nested_map_state_arr": json.dumps(confs, default=plain, sort_keys=True),
        }

    def close(self) -> None:
        pass


class PandasCompositeType(_CompositeTypeBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        total = sum(pdf["temperature"].astype(int).sum() for pdf in rows)
        row = self._row(key[0], total)
        yield pd.DataFrame({k: [v] for k, v in row.items()})


class RowCompositeType(_CompositeTypeBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        yield Row(**self._row(key[0], sum(int(row.temperature) for row in rows)))


def _composite_output(key: str, count: int) -> dict[str, Any]:
    """Spark's ``CompositeOutputProcessor`` output: arrays and maps of primitives and of
    structs, sized by the count."""

    def inner(i: int, scale: int, factor: float) -> dict[str, Any]:
        return {
            "intValue": i * scale,
            "doubleValue": float(i * factor),
            "arrayValue": [f"elem_{i}_{j}" for j in range(i + 1)],
            "mapValue": {f"map_{i}_{j}": f"val_{i}_{j}" for j in range(i + 1)},
        }

    return {
        "primitiveValue": f"key_{key}_count_{count}",
        "listOfPrimitive": [f"item_{i}" for i in range(count)],
        "mapOfPrimitive": {f"key{i}": f"value{i}" for i in range(count)},
        "listOfComposite": [inner(i, 1, 1.5) for i in range(count)],
        "mapOfComposite": {f"nested_key{i}": inner(i, 10, 2.5) for i in range(count)},
    }


class _CompositeOutputBase(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count_state = handle.getValueState("count_state", VALUE_INT)

    def _count(self, added: int) -> int:
        count = (self.count_state.get()[0] if self.count_state.exists() else 0) + added
        self.count_state.update((count,))
        return count

    def close(self) -> None:
        pass


class PandasCompositeOutput(_CompositeOutputBase):
    """Spark's ``CompositeOutputProcessor``: a row count, output as nested types."""

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        out = _composite_output(key[0], self._count(sum(len(pdf) for pdf in rows)))
        yield pd.DataFrame({k: [v] for k, v in out.items()})


class RowCompositeOutput(_CompositeOutputBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        out = _composite_output(key[0], self._count(sum(1 for _ in rows)))
        out["listOfComposite"] = [Row(**c) for c in out["listOfComposite"]]
        out["mapOfComposite"] = {k: Row(**c) for k, c in out["mapOfComposite"].items()}
        yield Row(**out)


LARGE = "a" * (512 * 1024)


class _LargeValueBase(StatefulProcessor):
    """Spark's ``LargeValueStatefulProcessor``: 512 KiB strings through value, list and map
    state, read back."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.value_state = handle.getValueState("valueState", VALUE_STR)
        self.list_state = handle.getListState("listState", VALUE_STR)
        self.map_state = handle.getMapState("mapState", "key string", "value string")

    def _results(self) -> tuple[str, str, str]:
        self.value_state.update((LARGE,))
        value = self.value_state.get()[0]
        self.list_state.put([(LARGE,), (LARGE + "b",), (LARGE + "c",)])
        listed = ",".join(e[0] for e in self.list_state.get())
        map_key = ("large_string_key",)
        self.map_state.updateValue(map_key, (LARGE,))
        mapped = f"{map_key[0]}:{self.map_state.getValue(map_key)[0]}"
        return value, listed, mapped

    def close(self) -> None:
        pass


class PandasLargeValue(_LargeValueBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        value, listed, mapped = self._results()
        yield pd.DataFrame(
            {
                "id": key,
                "valueStateResult": [value],
                "listStateResult": [listed],
                "mapStateResult": [mapped],
            }
        )


class RowLargeValue(_LargeValueBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        value, listed, mapped = self._results()
        yield Row(id=key[0], valueStateResult=value, listStateResult=listed, mapStateResult=mapped)


# -- schema evolution (Avro state encoding) --------------------------------------------------
def _struct(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(name, kind(), True) for name, kind in fields])


BASIC_SCHEMA = _struct(("id", IntegerType), ("name", StringType))
ADDED_SCHEMA = _struct(
    ("id", IntegerType),
    ("name", StringType),
    ("count", IntegerType),
    ("active", BooleanType),
    ("score", FloatType),
)
REORDERED_SCHEMA = _struct(
    ("name", StringType),
    ("id", IntegerType),
    ("score", FloatType),
    ("count", IntegerType),
    ("active", BooleanType),
)
UPCAST_SCHEMA = _struct(("id", LongType), ("name", StringType))
NOT_NULLABLE_SCHEMA = StructType(
    [StructField("id", IntegerType(), False), StructField("name", StringType(), False)]
)


class _EvolutionBase(StatefulProcessor):
    """One state variable ``state`` whose schema each subclass changes (Spark's schema
    evolution processors); the output's ``value`` is a struct of the state's schema."""

    state_schema = BASIC_SCHEMA

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("state", self.state_schema)

    def _value(self, key: Any) -> dict[str, Any]:
        ident = int(key[0])
        self.state.update((ident, f"name-{ident}"))
        return {"id": ident, "name": f"name-{ident}"}

    def close(self) -> None:
        pass


def _pandas_value(key: Any, value: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame({"id": [key[0]], "value": [value]})


class PandasBasicState(_EvolutionBase):
    """Spark's ``BasicProcessor``: ``(id, name)`` from the key."""

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        yield _pandas_value(key, self._value(key))


class RowBasicState(_EvolutionBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        yield Row(id=key[0], value=self._value(key))


class PandasNotNullableState(PandasBasicState):
    """Spark's ``BasicProcessorNotNullable``: the same with non-nullable fields."""

    state_schema = NOT_NULLABLE_SCHEMA


class RowNotNullableState(RowBasicState):
    state_schema = NOT_NULLABLE_SCHEMA


class _AddedFieldsBase(_EvolutionBase):
    """Spark's ``AddFieldsProcessor``: three more fields; emits the state read (or defaults)
    and stores it with ``"0"`` appended to the name."""

    state_schema = ADDED_SCHEMA
    ORDER = ("id", "name", "count", "active", "score")
    SUFFIX = "0"  # appended to the stored name

    def _value(self, key: Any) -> dict[str, Any]:
        ident = int(key[0])
        if self.state.exists():
            value = dict(zip(self.ORDER, self.state.get()))
        else:
            defaults = {"name": f"name-{ident}", "id": ident, "count": 100, "active": True}
            value = {name: defaults.get(name, 99.9) for name in self.ORDER}
        stored = {**value, "name": value["name"] + self.SUFFIX}
        self.state.update(tuple(stored[name] for name in self.ORDER))
        return value


class PandasAddedFields(_AddedFieldsBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        yield _pandas_value(key, self._value(key))


class RowAddedFields(_AddedFieldsBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        yield Row(id=key[0], value=self._value(key))


class _RemovedFieldsBase(_EvolutionBase):
    """Spark's ``RemoveFieldsProcessor``: back to ``(id, name)``, keeping the stored name."""

    def _value(self, key: Any) -> dict[str, Any]:
        ident = int(key[0])
        name = self.state.get()[1] if self.state.exists() else f"name-{ident}"
        self.state.update((ident, name))
        return {"id": ident, "name": name}


class PandasRemovedFields(_RemovedFieldsBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        yield _pandas_value(key, self._value(key))


class RowRemovedFields(_RemovedFieldsBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        yield Row(id=key[0], value=self._value(key))


class _ReorderedFieldsBase(_AddedFieldsBase):
    """Spark's ``ReorderedFieldsProcessor``: the five fields in another order, stored as read."""

    state_schema = REORDERED_SCHEMA
    ORDER = ("name", "id", "score", "count", "active")
    SUFFIX = ""


class PandasReorderedFields(_ReorderedFieldsBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        yield _pandas_value(key, self._value(key))


class RowReorderedFields(_ReorderedFieldsBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        yield Row(id=key[0], value=self._value(key))


class _UpcastBase(_EvolutionBase):
    """Spark's ``UpcastProcessor``: ``id`` widened to BIGINT, incremented by the stored id + 1."""

    state_schema = UPCAST_SCHEMA

    def _value(self, key: Any) -> dict[str, Any]:
        ident = int(key[0])
        if self.state.exists():
            ident += self.state.get()[0] + 1
        self.state.update((ident, f"name-{int(key[0])}"))
        return {"id": ident, "name": f"name-{int(key[0])}"}


class PandasUpcast(_UpcastBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        yield _pandas_value(key, self._value(key))


class RowUpcast(_UpcastBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        yield Row(id=key[0], value=self._value(key))


# -- Arrow batches: chunks, coercion (pandas only, as in Spark) ------------------------------
class PandasChunkCount(StatefulProcessor):
    """Spark's ``ChunkCountProcessor``: how many pandas frames a key's rows came in."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        yield pd.DataFrame({"id": [key[0]], "chunkCount": [sum(1 for _ in rows)]})

    def close(self) -> None:
        pass


class PandasChunkCountInitial(PandasChunkCount):
    """Spark's ``ChunkCountWithInitialStateProcessor``: the same with an initial state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.value_state = handle.getValueState("value_state", VALUE_INT)

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: Any) -> None:
        self.value_state.update((initialState.at[0, "initVal"],))


class PandasIntToDecimal(StatefulProcessor):
    """The processor of Spark's ``test_transform_with_state_int_to_decimal_coercion``: a
    Python int in a DECIMAL output column."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count_state = handle.getValueState("count", VALUE_INT)

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        count = self.count_state.get()[0] if self.count_state.exists() else 0
        self.count_state.update((count + sum(len(pdf) for pdf in rows),))
        yield pd.DataFrame({"id": [key[0]], "decimal_result": [12345]})

    def close(self) -> None:
        pass


# -- the processors of Spark's TwsTester fuzz tests ------------------------------------------
class PandasRunningCount(StatefulProcessor):
    """Spark's ``RunningCountStatefulProcessor`` (pandas): rows seen per key."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", VALUE_INT)

    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        count = self.count.get()[0] if self.count.exists() else 0
        count += sum(1 for pdf in rows for _ in pdf.iterrows())
        self.count.update((count,))
        yield pd.DataFrame({"key": [key[0]], "count": [count]})

    def close(self) -> None:
        pass


class RowRunningCount(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", VALUE_INT)

    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        count = (self.count.get()[0] if self.count.exists() else 0) + sum(1 for _ in rows)
        self.count.update((count,))
        yield Row(key=key[0], count=count)

    def close(self) -> None:
        pass


class _TopKBase(StatefulProcessor):
    """Spark's ``TopKProcessor``: the k highest scores per key, kept sorted in a list state."""

    def __init__(self, k: int = 10) -> None:
        self.k = k

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.topk = handle.getListState("topK", "score double")

    def _top(self, scores: list[float]) -> list[float]:
        top = sorted([s[0] for s in self.topk.get()] + scores, reverse=True)[: self.k]
        self.topk.put([(s,) for s in top])
        return top

    def close(self) -> None:
        pass


class PandasTopK(_TopKBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        top = self._top([row.score for pdf in rows for _, row in pdf.iterrows()])
        yield pd.DataFrame({"key": [key[0]] * len(top), "score": top})


class RowTopK(_TopKBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        for score in self._top([row.score for row in rows]):
            yield Row(key=key[0], score=score)


class _WordFrequencyBase(StatefulProcessor):
    """Spark's ``WordFrequencyProcessor``: a running count per word in a map state, one output
    row per input row."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.freq = handle.getMapState("frequencies", "key string", "value long")

    def _bump(self, word: str) -> int:
        count = (self.freq.getValue((word,))[0] if self.freq.containsKey((word,)) else 0) + 1
        self.freq.updateValue((word,), (count,))
        return count

    def close(self) -> None:
        pass


class PandasWordFrequency(_WordFrequencyBase):
    def handleInputRows(self, key: Any, rows: Frames, timerValues: TimerValues) -> Frames:
        out = [
            {"key": key[0], "word": row.word, "count": self._bump(row.word)}
            for pdf in rows
            for _, row in pdf.iterrows()
        ]
        if out:
            yield pd.DataFrame(out)


class RowWordFrequency(_WordFrequencyBase):
    def handleInputRows(self, key: Any, rows: Rows, timerValues: TimerValues) -> Rows:
        for row in rows:
            yield Row(key=key[0], word=row.word, count=self._bump(row.word))
