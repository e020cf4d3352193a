"""The processor stage without Spark: run by the engine's runner against a dict model, over
seeded random epochs with failed attempts, re-runs of published epochs and restarts."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from fsstate import PartitionStore
from fsstate.operators.base import Epoch, canonical_order
from fsstate.operators.runner import run_epoch
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.pool import StorePool
from fsstate_spark.operators import processor_stage
from fsstate_spark.operators.processor_stage import ProcessorSpec, ProcessorStage
from fsstate_spark.state.handles import TimerModeError

OUT = StructType(
    [
        StructField("k", StringType()),
        StructField("kind", StringType()),
        StructField("n", LongType()),
        StructField("last", StringType()),
    ]
)


class Boom(RuntimeError):
    """An injected failure."""


class Tally(StatefulProcessor):
    """Per key: a count (value), the values seen (list), per-parity counts (map), a timer
    ``gap`` ms after each batch that saw the key; a fired timer reports and clears the list.
    ``fail_at`` makes the processor raise after writing state for that (epoch, key)."""

    def __init__(self, pandas: bool, gap: int, fail_at: tuple[int, str] | None = None) -> None:
        self.pandas, self.gap, self.fail_at = pandas, gap, fail_at

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.h = handle
        self.n = handle.getValueState("n", "n BIGINT")
        self.vals = handle.getListState("vals", "v BIGINT")
        self.par = handle.getMapState("par", "p INT", "c BIGINT")

    def _out(self, key: Any, kind: str) -> Any:
        n = self.n.get()
        last = ",".join(str(v[0]) for v in self.vals.get())
        if self.pandas:
            return pd.DataFrame(
                {"k": [key[0]], "kind": [kind], "n": [n[0] if n else 0], "last": [last]}
            )
        return Row(k=key[0], kind=kind, n=n[0] if n else 0, last=last)

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
        if self.pandas:
            vs = [int(v) for df in rows for v in df["v"]]
        else:
            vs = [int(r.v) for r in rows]
        old = self.n.get()
        self.n.update(((old[0] if old else 0) + len(vs),))
        self.vals.appendList([(v,) for v in vs])
        for v in vs:
            c = self.par.getValue((v % 2,))
            self.par.updateValue((v % 2,), ((c[0] if c else 0) + 1,))
        self.h.registerTimer(timerValues.getCurrentProcessingTimeInMs() + self.gap)
        if self.fail_at is not None and self.fail_at == (self.epoch, key[0]):
            raise Boom(f"injected at {self.fail_at}")
        yield self._out(key, "input")

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Any]:
        yield self._out(key, "timer")
        self.vals.clear()

    def close(self) -> None:
        pass


class Model:
    """What the processor's state and output must be, in plain Python."""

    def __init__(self, gap: int) -> None:
        self.gap = gap
        self.n: dict[str, int] = {}
        self.vals: dict[str, list[int]] = {}
        self.timers: dict[str, set[int]] = {}

    def epoch(self, rows: list[tuple[str, int]], now: int) -> list[tuple[Any, ...]]:
        out = []
        by_key: dict[str, list[int]] = {}
        for k, v in sorted(rows):
            by_key.setdefault(k, []).append(v)
        for k, vs in sorted(by_key.items()):
            self.n[k] = self.n.get(k, 0) + len(vs)
            self.vals.setdefault(k, []).extend(vs)
            self.timers.setdefault(k, set()).add(now + self.gap)
            out.append((k, "input", self.n[k], ",".join(map(str, self.vals[k]))))
        due = sorted((ts, k) for k, tss in self.timers.items() for ts in tss if ts <= now)
        for ts, k in due:
            out.append((k, "timer", self.n.get(k, 0), ",".join(map(str, self.vals.get(k, [])))))
            self.vals[k] = []
            self.timers[k].discard(ts)
        return sorted(out)


def _run(
    tmp: Path, pool: StorePool, proc: Tally, pandas: bool, epoch: int, rows: Any, now: int
) -> list[tuple[Any, ...]]:
    spec = ProcessorSpec(
        keys=("k",),
        output_type=OUT,
        output_mode="update",
        time_mode="processingtime",
        pandas=pandas,
    )
    proc.epoch = epoch  # type: ignore[attr-defined]
    op = ProcessorStage("tally", proc, spec)
    table = pa.table(
        {
            "k": pa.array([k for k, _ in rows], pa.string()),
            "v": pa.array([v for _, v in rows], pa.int64()),
        }
    )
    fileio = FileIO(Location.parse(str(tmp)))
    res = run_epoch(op, fileio, 0, epoch, table, pool=pool, now_ms=now)
    return sorted(tuple(r.values()) for r in res.output.to_pylist())


@pytest.mark.parametrize("seed", [11, 12, 13])
@pytest.mark.parametrize("pandas", [True, False])
def test_random_epochs_with_failures_reruns_and_restarts(
    tmp_path: Path, seed: int, pandas: bool
) -> None:
    rng = random.Random(seed)
    gap = 25
    model = Model(gap)
    pool = StorePool()
    now = 1_000
    outputs: dict[int, list[tuple[Any, ...]]] = {}
    for epoch in range(25):
        now += rng.choice([0, 10, 20, 30])
        rows = [(rng.choice("abcde"), rng.randint(0, 9)) for _ in range(rng.randint(0, 8))]
        if rows and rng.random() < 0.25:  # a failed attempt first: nothing of it may remain
            with pytest.raises(Boom):
                _run(
                    tmp_path,
                    pool,
                    Tally(pandas, gap, (epoch, rows[0][0])),
                    pandas,
                    epoch,
                    rows,
                    now,
                )
        got = _run(tmp_path, pool, Tally(pandas, gap), pandas, epoch, rows, now)
        want = model.epoch(rows, now)
        assert got == want, f"seed {seed} epoch {epoch}"
        outputs[epoch] = got
        if rng.random() < 0.2:  # a re-run of the published epoch adopts it: same rows
            assert _run(tmp_path, StorePool(), Tally(pandas, gap), pandas, epoch, rows, now) == got
        if rng.random() < 0.2:  # a restart: stores reopened from storage
            pool = StorePool()


def test_timers_need_a_time_mode(tmp_path: Path) -> None:
    class Timed(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.h = handle

        def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
            self.h.registerTimer(5)
            yield from ()

        def close(self) -> None:
            pass

    spec = ProcessorSpec(
        keys=("k",), output_type=OUT, output_mode="update", time_mode="none", pandas=False
    )
    op = ProcessorStage("timed", Timed(), spec)
    fileio = FileIO(Location.parse(str(tmp_path)))
    with pytest.raises(TimerModeError, match="timeMode"):
        run_epoch(op, fileio, 0, 0, pa.table({"k": ["a"], "v": [1]}), pool=StorePool())


class Echo(StatefulProcessor):
    """Records the key tuples and input Rows it is given; yields nothing."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, list[Any]]] = []

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
        self.seen.append((key, list(rows)))
        yield from ()

    def close(self) -> None:
        pass


def test_row_input_as_spark_makes_it_with_two_key_columns(tmp_path: Path) -> None:
    """Rows are made lazily in bulk; they must be what Spark's worker makes:
    ``Row(*names)(*values)`` (same values, same ``__fields__``), keys as Python tuples."""
    table = pa.table(
        {
            "a": pa.array([2, 1, None, 1, 2], pa.int64()),
            "b": pa.array(["x", "y", "z", "y", None], pa.string()),
            "v": pa.array([1.5, 2.5, 3.5, 4.5, 5.5], pa.float64()),
        }
    )
    spec = ProcessorSpec(
        keys=("a", "b"), output_type=OUT, output_mode="update", time_mode="none", pandas=False
    )
    proc = Echo()
    fileio = FileIO(Location.parse(str(tmp_path)))
    run_epoch(ProcessorStage("echo", proc, spec), fileio, 0, 0, table, pool=StorePool())
    data_row = Row("a", "b", "v")
    want = {}
    for r in table.to_pylist():
        want.setdefault((r["a"], r["b"]), []).append(data_row(r["a"], r["b"], r["v"]))
    got = {key: rows for key, rows in proc.seen}
    assert sorted(got, key=repr) == sorted(want, key=repr)
    for key, rows in got.items():
        assert sorted(rows) == sorted(want[key])
        assert all(isinstance(r, Row) and r.__fields__ == data_row for r in rows)
        assert all((r.a, r.b, r.v) == (r["a"], r["b"], r["v"]) == tuple(r) for r in rows)
        assert [r.asDict() for r in sorted(rows)] == [r.asDict() for r in sorted(want[key])]


def test_row_output_equals_spark_conversion() -> None:
    """The Row output's fast path (Rows with the output's fields and plain values, gathered
    by column) gives the batch Spark's ``from_pylist`` of ``asDict(True)`` gives, and any other
    Row (other field order, fewer values, nested values, a row type's Row) still converts as
    Spark converts it."""
    import datetime as dt

    from fsstate_spark.state.keyed import RowOutput

    schema = pa.schema(
        [
            ("k", pa.string()),
            ("n", pa.int64()),
            ("t", pa.timestamp("us", "UTC")),
            ("tags", pa.list_(pa.int64())),
            ("inner", pa.struct([("x", pa.int64())])),
        ]
    )
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    flat = [
        Row(k="a", n=1, t=t0, tags=None, inner=None),
        Row(k=None, n=None, t=None, tags=None, inner=None),
    ]
    other = [
        Row(n=2, k="b", t=t0, tags=None, inner=None),  # another field order
        Row("k", "n", "t", "tags", "inner")("c", 3),  # a row type's Row with fewer values
        Row(k="d", n=4, t=t0, tags=[1, 2], inner=Row(x=5)),  # nested values
        Row(k="e", n=5, t=t0, tags=[], inner={"x": 6}),
    ]
    for rows in (flat, other, flat + other, other + flat, []):
        out = RowOutput(schema)
        for r in rows:
            out.add(r)
        want = pa.RecordBatch.from_pylist([r.asDict(True) for r in rows], schema=schema)
        assert out.table().equals(pa.Table.from_batches([want]))
    tags = [1]
    out = RowOutput(schema)
    out.add(Row(k="f", n=1, t=None, tags=tags, inner=None))
    tags.append(2)  # converted when yielded, as Spark's worker does
    assert out.table().column("tags").to_pylist() == [[1]]


def test_store_keys_of_pandas_key_columns() -> None:
    """Store keys computed per column are :func:`normalize_key` of each key."""
    import numpy as np

    from fsstate_spark.state.keys import normalize_key, store_key_column

    columns = [
        np.array([1, 2, 3], dtype=np.int64),
        np.array([1.5, float("nan"), 2.0]),
        np.array(["a", None, "c"], dtype=object),
        np.array([np.int64(1), "b", None], dtype=object),
        np.array(["2024-01-01T00:00:00", "NaT", "1970-01-01"], dtype="datetime64[ns]"),
        np.array([True, False, True]),
    ]
    for col in columns:
        got = store_key_column(col)
        want = [normalize_key((v,))[0] for v in col]
        assert [repr(g) for g in got] == [repr(w) for w in want]
        assert [type(g) for g in got] == [type(w) for w in want]


TS_VALUES = [
    0,
    -1,
    1_700_000_000_000_000,
    None,
    1_699_167_600_000_000,  # 2023-11-05 07:00 UTC: the hour Los Angeles repeats (fold)
    1_699_171_200_000_000,
    1_699_171_199_999_999,
    -62_135_596_800_000_000,  # datetime.min
    253_402_300_799_999_999,  # datetime.max
]


@pytest.mark.parametrize(
    "tz", [None, "UTC", "+00:00", "Etc/UTC", "America/Los_Angeles", "Europe/Berlin", "+05:30"]
)
@pytest.mark.parametrize(
    "values",
    [TS_VALUES, TS_VALUES[:7], [None, None], [], [5], [253_402_300_799_999_999 + 1]],
    ids=["edges", "in-range", "nulls", "empty", "one", "beyond"],
)
def test_row_timestamps_as_pyarrow_converts_them(tz: str | None, values: list[Any]) -> None:
    """Row values of a ``timestamp[us]`` column, converted in bulk, are ``to_pylist``'s: same
    values, wall times, folds and tzinfo objects, and the same error where it raises."""
    from fsstate_spark.state.keyed import _py_values

    col = pa.chunked_array(
        [pa.array(values[:3], pa.timestamp("us", tz)), pa.array(values[3:], pa.timestamp("us", tz))]
    )
    try:
        want = col.to_pylist()
    except Exception as exc:  # whatever pyarrow raises, the same must be raised
        with pytest.raises(type(exc)):
            _py_values(col)
        return
    got = _py_values(col)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
            continue
        assert (g, g.replace(tzinfo=None), g.fold) == (w, w.replace(tzinfo=None), w.fold)
        assert g.tzinfo is w.tzinfo or (tz is not None and tz.startswith("+"))


class _CountingCompute:
    """``pyarrow.compute`` as the processor stage sees it, counting its sorts."""

    def __init__(self) -> None:
        self.sorts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(pc, name)

    def sort_indices(self, *args: Any, **kwargs: Any) -> Any:
        self.sorts += 1
        return pc.sort_indices(*args, **kwargs)


def test_the_runners_key_led_order_is_not_sorted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an initial state the runner's canonical order leads with the grouping keys
    (``Epoch.sorted_by``), and the stage groups the batch as it is: the same keys and the
    same rows per key, in the same order, as a stage that sorts a shuffled batch itself."""
    rng = random.Random(7)
    rows = [
        (rng.choice([None, 2, 1]), rng.choice("xyz"), float(rng.randrange(5))) for _ in range(60)
    ]
    table = pa.table(
        {
            "a": pa.array([r[0] for r in rows], pa.int64()),
            "b": pa.array([r[1] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.float64()),
        }
    )
    spec = ProcessorSpec(
        keys=("a", "b"), output_type=OUT, output_mode="update", time_mode="none", pandas=False
    )
    counting = _CountingCompute()
    monkeypatch.setattr(processor_stage, "pc", counting)
    by_runner, by_itself = Echo(), Echo()
    op = ProcessorStage("echo", by_runner, spec)
    assert op.leading_order(table.schema) == ("a", "b")
    run_epoch(op, FileIO(Location.parse(str(tmp_path / "runner"))), 0, 0, table, pool=StorePool())
    assert counting.sorts == 0
    ordered = canonical_order(table, ("a", "b"))
    shuffled = ordered.take(pa.array(rng.sample(range(60), 60)))
    itself = ProcessorStage("echo", by_itself, spec)
    store = PartitionStore.open(FileIO(Location.parse(str(tmp_path / "itself"))), "echo", 0, None)
    itself.bind(store, table.schema)
    itself.process(shuffled, Epoch(0, 0))  # no sorted_by: the stage sorts (stable)
    store.close()
    assert counting.sorts == 1
    assert [k for k, _ in by_runner.seen] == [k for k, _ in by_itself.seen]
    assert [sorted(r) for _, r in by_runner.seen] == [sorted(r) for _, r in by_itself.seen]
    with_init = ProcessorSpec(("a", "b"), OUT, "update", "none", False, initial_state=True)
    assert ProcessorStage("init", Echo(), with_init).leading_order(table.schema) == ()


class ChunkSizes(StatefulProcessor):
    """Yields, per key, the sizes of the pandas chunks it was handed."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
        sizes = ",".join(str(len(frame)) for frame in rows)
        yield pd.DataFrame({"k": [key[0]], "sizes": [sizes]})

    def close(self) -> None:
        pass


def _stage_rows(
    where: Path, processor: StatefulProcessor, out: StructType, table: pa.Table, **spec: Any
) -> list[tuple[Any, ...]]:
    """The sorted output rows of one pandas-flavour epoch of ``processor`` over ``table``
    (grouped by ``k``), with ``spec``'s settings of its ProcessorSpec."""
    options = {"output_mode": "update", "time_mode": "none", "pandas": True, **spec}
    op = ProcessorStage("stage", processor, ProcessorSpec(keys=("k",), output_type=out, **options))
    res = run_epoch(op, FileIO(Location.parse(str(where))), 0, 0, table, pool=StorePool())
    return sorted(tuple(r.values()) for r in res.output.to_pylist())


def test_pandas_chunks_follow_sparks_byte_limit_per_key(tmp_path: Path) -> None:
    """``spark.sql.execution.arrow.maxBytesPerBatch`` cuts a key's rows into several frames by
    the average Arrow row size, as Spark's worker does (the records limit applies too)."""
    out = StructType([StructField("k", StringType()), StructField("sizes", StringType())])
    table = pa.table({"k": ["a"] * 5 + ["b"] * 3, "v": ["x" * 100] * 8})
    row_bytes = sum(b.size for c in table.columns for ch in c.chunks for b in ch.buffers() if b)
    average = row_bytes / table.num_rows

    def sizes(max_records: int, max_bytes: int) -> list[tuple[Any, ...]]:
        where = tmp_path / f"{max_records}-{max_bytes}"
        return _stage_rows(
            where,
            ChunkSizes(),
            out,
            table,
            max_records_per_batch=max_records,
            max_bytes_per_batch=max_bytes,
        )

    assert sizes(10_000, 2**31 - 1) == [("a", "5"), ("b", "3")]
    # a chunk ends once its rows times the average row size reach the limit: 2 rows here
    assert sizes(10_000, int(average * 1.5)) == [("a", "2,2,1"), ("b", "2,1")]
    assert sizes(1, int(average * 1.5)) == [("a", "1,1,1,1,1"), ("b", "1,1,1")]


class DecimalOut(StatefulProcessor):
    """Yields an integer column for a decimal output field."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Any]:
        total = sum(int(frame["v"].sum()) for frame in rows)
        yield pd.DataFrame({"k": [key[0]], "amount": [total]})

    def close(self) -> None:
        pass


def test_integer_output_is_coerced_into_a_decimal_field_when_spark_says_so(
    tmp_path: Path,
) -> None:
    """``spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled``: an integer column
    yielded for a decimal output field converts, as in Spark's worker; without it, Spark's
    conversion refuses it (an error, not a wrong value)."""
    from pyspark.sql.types import DecimalType

    out = StructType([StructField("k", StringType()), StructField("amount", DecimalType(10, 2))])
    table = pa.table({"k": ["a", "a", "b"], "v": [1, 2, 5]})

    def run(coerce: bool) -> list[tuple[Any, ...]]:
        return _stage_rows(tmp_path / str(coerce), DecimalOut(), out, table, int_to_decimal=coerce)

    import decimal

    assert run(True) == [("a", decimal.Decimal("3.00")), ("b", decimal.Decimal("5.00"))]
    with pytest.raises(Exception, match="decimal"):
        run(False)
