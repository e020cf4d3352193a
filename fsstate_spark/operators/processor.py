"""A user's unchanged StatefulProcessor run by fsstate over a partition's whole batch.

:class:`ProcessorStage` is an :class:`fsstate.operators.Operator`: the flow driver shuffles a
micro-batch by the grouping columns and, in each ``mapInArrow`` task, the runner hands it the
partition's rows and its store (:mod:`fsstate.operators.runner`). The stage then does in one
Python process, with no state server and no socket, what Spark's Python worker and JVM do
per key (``pyspark.sql.streaming.stateful_processor_util``, pyspark 4.3):

1. ``init(handle)`` with a handle whose value / list / map state are the ``tiered()`` state
   objects (:mod:`fsstate_spark.state.handles`) and whose timers live in the store
   (:mod:`fsstate_spark.state.timers`);
2. in the first micro-batch, ``handleInitialState`` for every row (Row flavour) or chunk
   (pandas) of the initial state of each key, before that key's input;
3. ``handleInputRows(key, rows, timerValues)`` once per key with input: the batch is sorted by
   key once and sliced; ``rows`` is a lazy iterator of pandas DataFrames (chunks of at most
   ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, a fresh ``RangeIndex`` each) or of
   ``Row`` objects (all made in bulk on the first read), so a processor that does not read its
   rows pays no conversion;
4. ``handleExpiredTimer`` for every timer due (processing time in ``ProcessingTime`` mode, the
   eviction watermark in ``EventTime`` mode), in expiry order, each timer deleted after its
   callback, as Spark does; timers registered meanwhile at or before that time fire in the
   next micro-batch (as in Spark);
5. ``close()``, then TTL cleanup at the batch's processing time; the runner commits.

Outputs are gathered per task: pandas frames column by column (no concat of small frames),
converted once with Spark's own pandas-to-Arrow conversion (names or positions, casts and
checks as Spark's); Rows as Spark's worker converts them (``asDict(True)`` and
``RecordBatch.from_pylist``), plain Rows with the output's fields gathered by column into the
same lists.

Invariants:

* Spark's arguments exactly: ``key`` is a tuple (numpy scalars from the pandas frame in the
  pandas flavour, Python values in the Row flavour), ``TimerValues`` is ``(-1, -1)`` in time
  mode None, ``(batch time, eviction watermark)`` otherwise (0 without a watermark).
* Deterministic given the store version and the set of input rows (rows of a key in the
  runner's canonical order; processing time fixed per micro-batch by the driver), so retries
  and re-runs adopt the published version and produce the same rows.
* In ``EventTime`` mode input rows at or below the previous micro-batch's watermark are late
  and dropped before the processor sees them, as Spark's operator does.
* Timer calls in time mode None raise :class:`fsstate_spark.state.handles.TimerModeError`,
  as Spark refuses them.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    TimerValues,
)
from pyspark.sql.types import Row, StructType

from fsstate.errors import ConfigError, SchemaError
from fsstate.operators.base import SIDE, Epoch, Operator, time_us
from fsstate.store.partition import PartitionStore
from fsstate.tables.resolve import first_of_group
from fsstate_spark.state.handles import KeyBinding, TieredHandle
from fsstate_spark.state.map_order import UNSAFEROW
from fsstate_spark.state.timers import Timers

TIME_MODES = {"none": "none", "processingtime": "processingtime", "eventtime": "eventtime"}
OUTPUT_MODES = ("append", "update")
INPUT = "input"  # struct column of the input rows when an initial state shares the stage
INIT = "init"  # struct column of the initial state rows


@dataclass(frozen=True)
class ProcessorSpec:
    """How a stage calls its processor (decided on the driver, pickled with the stage).

    Attributes:
        keys: the grouping columns (of the input; ``_k0..`` with an initial state).
        output_type: Spark's output schema.
        output_mode: ``append`` or ``update`` (Spark's; it changes nothing in the stage).
        time_mode: ``none``, ``processingtime`` or ``eventtime``.
        pandas: the pandas flavour (``transformWithStateInPandas``) or the Row one.
        event_time: the watermark column of the input (event time recorded, late rows
            dropped in ``eventtime`` mode), or None (a stage after another stateful stage: the
            flow's watermark still fires its timers; the stage before dropped late rows).
        watermarked: whether the flow has a watermark at all (``eventtime`` needs one).
        initial_state: whether the input carries an initial state (``_side``, ``input``,
            ``init`` columns).
        init_keys: the grouping columns of the initial state rows.
        timezone: the session time zone (timestamps in pandas frames, as Spark's).
        max_records_per_batch: rows per pandas chunk (``arrow.maxRecordsPerBatch``).
        state_encoding: Spark's state encoding (MapState iteration order).
    """

    keys: tuple[str, ...]
    output_type: StructType
    output_mode: str
    time_mode: str
    pandas: bool
    event_time: str | None = None
    initial_state: bool = False
    init_keys: tuple[str, ...] = ()
    watermarked: bool = False
    timezone: str = "UTC"
    max_records_per_batch: int = 10_000
    state_encoding: str = UNSAFEROW

    def __post_init__(self) -> None:
        if self.time_mode not in TIME_MODES.values():
            raise ConfigError(
                f"timeMode={self.time_mode!r}: use 'None', 'ProcessingTime' or 'EventTime'"
            )
        if self.output_mode not in OUTPUT_MODES:
            raise ConfigError(f"outputMode={self.output_mode!r}: use 'Append' or 'Update'")
        if self.time_mode == "eventtime" and self.event_time is None and not self.watermarked:
            raise ConfigError(
                "timeMode='EventTime' needs a watermark: ops.source(df, watermark=(column, "
                "delay)) or df.withWatermark(column, delay) before groupBy"
            )


def output_arrow_schema(output_type: StructType) -> pa.Schema:
    """The Arrow schema of a processor's output (timestamps ``timestamp[us, UTC]``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(output_type, timezone="UTC")


class ProcessorStage(Operator):
    """A StatefulProcessor as a whole-batch stage (see the module docstring).

    Args:
        name: the stage's state name.
        processor: the user's processor (unchanged).
        spec: how it is called.
    """

    def __init__(self, name: str, processor: StatefulProcessor, spec: ProcessorSpec) -> None:
        super().__init__(name)
        if not isinstance(processor, StatefulProcessor):
            raise ConfigError(
                f"operator {name!r}: transform_with_state takes a pyspark StatefulProcessor, "
                f"got {type(processor).__name__}"
            )
        self.processor = processor
        self.spec = spec
        self.time = spec.event_time
        self.uses_clock = spec.time_mode != "none"
        self._out_schema = output_arrow_schema(spec.output_type)

    # -- the operator contract -----------------------------------------------------------------
    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return self._out_schema

    def _input_schema(self, schema: pa.Schema) -> pa.Schema:
        if not self.spec.initial_state:
            return schema
        return pa.schema(list(schema.field(INPUT).type))

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        rows = self._input_schema(input_schema)
        missing = [k for k in self.spec.keys if k not in rows.names]
        if missing:
            raise SchemaError(
                f"operator {self.name!r}: grouping column(s) {missing} are not in the input "
                f"({rows.names})"
            )
        self._key_schema = pa.schema([rows.field(k).with_nullable(True) for k in self.spec.keys])
        self._timers = (
            Timers(store, self._key_schema, self.spec.state_encoding)
            if self.spec.time_mode != "none"
            else None
        )

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        if self.time is None:
            return {}
        rows = self._rows(batch, 0)
        return {"input": time_us(rows.column(self.time), self.name, self.time)}

    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        spec = self.spec
        rows = self._rows(batch, 0)
        init = self._rows(batch, 1) if spec.initial_state and epoch.epoch == 0 else None
        if spec.time_mode == "eventtime" and self.time is not None and rows.num_rows:
            t = time_us(rows.column(self.time), self.name, self.time)
            late = pc.fill_null(pc.less_equal(t, epoch.late_ms * 1000), False)
            rows = rows.filter(pc.invert(late))
        if spec.time_mode == "none":
            values = TimerValues(-1, -1)
        else:
            now = -1 if epoch.now_ms is None else epoch.now_ms
            values = TimerValues(now, epoch.evict_ms)
        binding = KeyBinding()
        handle = TieredHandle(
            None,
            self.store,
            binding,
            spec.state_encoding,
            key_schema=self._key_schema,
            timers=self._timers,
            timers_allowed=spec.time_mode != "none",
        )
        out = _PandasOutput(spec.output_type) if spec.pandas else _RowOutput(self._out_schema)
        self.processor.init(handle)
        self._run_keys(rows, init, binding, values, out)
        if self._timers is not None:
            through = epoch.evict_ms if spec.time_mode == "eventtime" else epoch.now_ms
            if through is not None:
                self._fire(self._timers, through, binding, values, out)
        binding.key = None
        self.processor.close()
        if self._timers is not None:
            self._timers.flush()
        if spec.time_mode != "none" and epoch.now_ms is not None:
            self.store.expire()
        return out.table()

    # -- input ---------------------------------------------------------------------------------
    def _rows(self, batch: pa.Table, side: int) -> pa.Table:
        """The input rows (side 0) or the initial state rows (side 1) as plain columns."""
        if not self.spec.initial_state:
            return batch
        mask = pc.equal(batch.column(SIDE), side)
        col = batch.filter(mask).column(INPUT if side == 0 else INIT).combine_chunks()
        struct_type = col.type
        if isinstance(col, pa.ChunkedArray):  # pragma: no cover - combine_chunks gives an Array
            col = col.combine_chunks()
        fields = list(struct_type)
        return pa.Table.from_arrays(col.flatten(), schema=pa.schema(fields))

    def _groups(
        self, table: pa.Table, keys: tuple[str, ...]
    ) -> tuple[pa.Table, np.ndarray[Any, Any]]:
        """``table`` sorted by ``keys`` (stable) and the row offsets where each key starts."""
        if table.num_rows == 0:
            return table, np.zeros(1, np.int64)
        sort_keys = [(k, "ascending") for k in keys]
        order = pc.sort_indices(table, sort_keys=sort_keys)  # nulls last
        table = table.take(order)
        cols = [table.column(k).combine_chunks() for k in keys]
        starts = np.flatnonzero(first_of_group(cols))
        return table, np.append(starts, table.num_rows)

    def _run_keys(
        self,
        rows: pa.Table,
        init: pa.Table | None,
        binding: KeyBinding,
        values: TimerValues,
        out: _Output,
    ) -> None:
        spec = self.spec
        proc = self.processor
        rows, bounds = self._groups(rows, spec.keys)
        data = _Slicer(rows, bounds, spec, spec.keys) if rows.num_rows else None
        if init is not None and init.num_rows:
            init, init_bounds = self._groups(init, spec.init_keys)
            init_data: _Slicer | None = _Slicer(init, init_bounds, spec, spec.init_keys)
        else:
            init_data = None
        for key, k, i, j in _merge_keys(data, init_data):
            binding.key = k
            if j is not None:
                assert init_data is not None
                for chunk in init_data.chunks(j):
                    binding.key = k
                    proc.handleInitialState(key, chunk, values)
            if i is not None:
                assert data is not None
                binding.key = k
                result = proc.handleInputRows(key, data.chunks(i), values)
                if result is not None:
                    for item in result:
                        binding.key = k  # a lazy generator may interleave: re-bind
                        out.add(item)

    def _fire(
        self,
        timers: Timers,
        through_ms: int,
        binding: KeyBinding,
        values: TimerValues,
        out: _Output,
    ) -> None:
        proc = self.processor
        for key, ts in timers.due(through_ms):
            binding.key = key
            result = proc.handleExpiredTimer(key, values, ExpiredTimerInfo(ts))
            if result is not None:
                for item in result:
                    binding.key = key
                    out.add(item)
            binding.key = key
            timers.delete(key, ts)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_timers", None)
        return state


def _store_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """The store's key of a Spark key (numpy scalars as Python values)."""
    if all(type(v) in _PLAIN for v in key):
        return key
    return tuple(
        v.item() if hasattr(v, "item") and type(v).__module__ == "numpy" else v for v in key
    )


_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


class _Slicer:
    """The rows of each key of a sorted table, in the processor's flavour.

    ``keys`` are Spark's key tuples (numpy scalars from the frame in the pandas flavour, Python
    values in the Row flavour) and ``store_keys`` the store's (Python values), both per group,
    computed column by column. Row objects are made on the first read of any key's rows, all
    at once (a processor that never reads its rows pays for no conversion).
    """

    def __init__(
        self,
        table: pa.Table,
        bounds: np.ndarray[Any, Any],
        spec: ProcessorSpec,
        keys: tuple[str, ...],
    ) -> None:
        self.bounds: list[int] = bounds.tolist()
        self.spec = spec
        self.n = len(bounds) - 1
        names = table.column_names
        key_idx = [names.index(k) for k in keys]
        starts = bounds[:-1]
        if spec.pandas:
            self.frame = _to_pandas(table, spec.timezone)
            key_cols = [self.frame.iloc[:, i].to_numpy()[starts] for i in key_idx]
            self.keys: list[tuple[Any, ...]] = list(zip(*key_cols))
            self.store_keys: list[tuple[Any, ...]] = list(zip(*map(_plain_values, key_cols)))
        else:
            self.table = table
            self.row_type = Row(*names)
            self._rows: list[Any] | None = None
            take = pa.array(starts)
            self.keys = list(zip(*(table.column(i).take(take).to_pylist() for i in key_idx)))
            self.store_keys = self.keys

    def chunks(self, g: int) -> Iterator[Any]:
        """A lazy iterator over group ``g``'s rows (pandas chunks, or Rows)."""
        a, b = self.bounds[g], self.bounds[g + 1]
        if not self.spec.pandas:
            return self._row_range(a, b)
        return self._frames(a, b)

    def _row_range(self, a: int, b: int) -> Iterator[Any]:
        rows = self._rows if self._rows is not None else self._make_rows()
        yield from rows[a:b]

    def _make_rows(self) -> list[Any]:
        """Every row as a ``Row`` of the table's column names, as Spark's worker makes them
        (``Row(*names)(*values)``: a Row whose ``__fields__`` is that Row of names), built
        without the per-row call chain of ``Row.__call__``."""
        row_type = self.row_type
        new = tuple.__new__
        rows = [new(Row, v) for v in zip(*(_py_values(c) for c in self.table.columns))]
        for r in rows:
            r.__dict__["__fields__"] = row_type
        self._rows = rows
        return rows

    def _frames(self, a: int, b: int) -> Iterator[Any]:
        import pandas as pd

        step = self.spec.max_records_per_batch
        for s in range(a, b, step):
            e = min(b, s + step)
            chunk = self.frame.iloc[s:e]
            chunk.index = pd.RangeIndex(e - s)
            yield chunk


_MIN_US = -62_135_596_800_000_000  # datetime(1, 1, 1) in µs since the epoch
_MAX_US = 253_402_300_799_999_999  # datetime(9999, 12, 31, 23, 59, 59, 999999)


def _py_values(col: pa.ChunkedArray) -> list[Any]:
    """``col.to_pylist()``, what Spark's worker gives a Row (``as_py()`` of each value).

    A ``timestamp[us]`` column (Spark's timestamps) is converted in bulk with the same
    arithmetic: pyarrow makes ``datetime(1970, 1, 1) + timedelta(microseconds=v)`` (numpy's
    ``tolist`` of ``datetime64[us]`` makes the same naive datetimes) and, with a time zone,
    ``.replace(tzinfo=timezone.utc).astimezone(tz)`` of it, ``tz`` being pyarrow's own tzinfo
    of the column (for UTC that is ``.replace(tzinfo=tz)``). Values outside ``datetime``'s
    range, other units, and zones for which pyarrow makes a new tzinfo per value (fixed
    offsets such as ``+05:30``) go through ``to_pylist``.
    """
    t = col.type
    plain: list[Any]
    if not pa.types.is_timestamp(t) or t.unit != "us" or col.null_count == len(col):
        plain = col.to_pylist()
        return plain
    lo, hi = pc.min_max(col.cast(pa.int64())).values()
    if lo.as_py() < _MIN_US or hi.as_py() > _MAX_US:
        plain = col.to_pylist()
        return plain
    naive: list[Any] = col.to_numpy().tolist()
    if t.tz is None:
        return naive
    first = col.drop_null()[0]
    tz = first.as_py().tzinfo  # pyarrow's tzinfo of the column's zone
    if first.as_py().tzinfo is not tz:  # a new tzinfo per value (fixed offsets): keep that
        plain = col.to_pylist()
        return plain
    if tz is dt.timezone.utc or getattr(tz, "key", None) == "UTC":
        return [None if d is None else d.replace(tzinfo=tz) for d in naive]
    utc = dt.timezone.utc
    return [None if d is None else d.replace(tzinfo=utc).astimezone(tz) for d in naive]


def _plain_values(values: np.ndarray[Any, Any]) -> list[Any]:
    """A key column's values as the store's: numpy scalars as Python values
    (:func:`_store_key`, for a whole column at once)."""
    if values.dtype != object or set(map(type, values)) <= _PLAIN:
        out: list[Any] = values.tolist()  # numpy's ``item()`` of each element
        return out
    return [_store_key((v,))[0] for v in values]


def _to_pandas(table: pa.Table, timezone: str) -> Any:
    """The table as one pandas DataFrame, converted as Spark's Python worker converts."""
    import pandas as pd
    from pyspark.sql.conversion import ArrowBatchTransformer

    series = ArrowBatchTransformer.to_pandas(table, timezone=timezone)
    if not series:
        return pd.DataFrame(index=pd.RangeIndex(table.num_rows))
    frame = pd.concat(series, axis=1)
    frame.columns = table.column_names
    return frame


def _merge_keys(
    data: _Slicer | None, init: _Slicer | None
) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...], int | None, int | None]]:
    """(key, store key, group in data, group in init) for every key of either, data's order
    first."""
    if init is None:
        if data is not None:
            yield from zip(data.keys, data.store_keys, range(data.n), repeat(None))
        return
    init_of = {k: j for j, k in enumerate(init.store_keys)}
    seen: set[tuple[Any, ...]] = set()
    if data is not None:
        for i, (key, sk) in enumerate(zip(data.keys, data.store_keys)):
            seen.add(sk)
            yield key, sk, i, init_of.get(sk)
    for j, (key, sk) in enumerate(zip(init.keys, init.store_keys)):
        if sk not in seen:
            yield key, sk, None, j


class _Output:
    def add(self, item: Any) -> None:
        raise NotImplementedError

    def table(self) -> pa.Table:
        raise NotImplementedError


class _RowOutput(_Output):
    """Rows yielded by a Row-flavour processor, converted as Spark's worker converts them
    (``RecordBatch.from_pylist`` of their ``asDict(True)``).

    A Row whose fields are the output's names, in order, and whose values are all of plain
    immutable types (:data:`_FLAT`: none of them a Row, list or dict, which ``asDict(True)``
    would copy) is kept as is, and the values are gathered by column: the lists
    ``from_pylist`` would build from its dict. Any other Row goes through ``asDict(True)``
    when it is yielded, as Spark's worker does; the batch is then built with ``from_pylist``.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows: list[Any] = []  # Rows with the output's fields, or dicts of other Rows
        names = list(schema.names)
        unique = len(set(names)) == len(names)
        self._fields: tuple[list[str], tuple[str, ...]] | None = (
            (names, tuple(names)) if unique else None
        )
        self._width = len(names)
        self._dicts = False

    def add(self, item: Any) -> None:
        if not isinstance(item, Row):
            raise SchemaError(
                f"transform_with_state: the processor yielded a {type(item).__name__}; the "
                "Row flavour yields pyspark.sql.Row objects"
            )
        fields = item.__dict__.get("__fields__")
        same = self._fields
        if (
            same is not None
            and fields is not None
            and len(item) == self._width
            and (fields == same[0] or fields == same[1])
            and _FLAT.issuperset(map(type, item))
        ):
            self.rows.append(item)
        else:
            self.rows.append(item.asDict(True))
            self._dicts = True

    def table(self) -> pa.Table:
        rows = self.rows
        if not self._dicts:
            columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in self.schema]
            batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        else:
            dicts = [r if isinstance(r, dict) else r.asDict(True) for r in rows]
            batch = pa.RecordBatch.from_pylist(dicts, schema=self.schema)
        return pa.Table.from_batches([batch])


_FLAT: frozenset[type] = frozenset(
    {str, int, float, bool, bytes, type(None)}
    | {dt.datetime, dt.date, dt.time, dt.timedelta, decimal.Decimal}
)
"""Value types a Row output keeps as is (``asDict(True)`` copies only Rows, lists, dicts)."""


class _PandasOutput(_Output):
    """Frames yielded by a pandas-flavour processor, gathered by column and converted once."""

    def __init__(self, output_type: StructType) -> None:
        self.output_type = output_type
        self.names = output_type.names
        self.parts: list[list[Any]] = [[] for _ in self.names]

    def add(self, item: Any) -> None:
        import pandas as pd

        if not isinstance(item, pd.DataFrame):
            raise SchemaError(
                f"transform_with_state: the processor yielded a {type(item).__name__}; the "
                "pandas flavour yields pandas DataFrames (Spark's 'Invalid return type')"
            )
        if not len(item):
            return
        cols = list(item.columns)
        if len(cols) < len(self.names):
            raise SchemaError(
                f"transform_with_state: a yielded DataFrame has columns {cols}, the output "
                f"schema {self.names}"
            )
        if all(isinstance(c, str) for c in cols):
            missing = [n for n in self.names if n not in cols]
            if missing:
                raise SchemaError(
                    f"transform_with_state: a yielded DataFrame has no column(s) {missing} of "
                    f"the output schema {self.names}"
                )
            arrays = _column_arrays(item, [cols.index(n) for n in self.names])
        else:
            arrays = _column_arrays(item, list(range(len(self.names))))
        for part, arr in zip(self.parts, arrays, strict=True):
            part.append(arr)

    def table(self) -> pa.Table:
        import pandas as pd
        from pyspark.sql.conversion import PandasToArrowConversion

        cols = {}
        for name, part in zip(self.names, self.parts, strict=True):
            cols[name] = _concat(part)
        frame = pd.DataFrame(cols)
        batch = PandasToArrowConversion.convert(
            frame,
            self.output_type,
            timezone="UTC",
            safecheck=True,
            arrow_cast=True,
            assign_cols_by_name=True,
        )
        return pa.Table.from_batches([batch])


def _column_arrays(frame: Any, positions: list[int]) -> list[Any]:
    """The frame's columns at ``positions`` as arrays (pandas' fast column iterator when
    present: one call per frame, not one ``__getitem__`` per column)."""
    it: Callable[[], Iterator[Any]] | None = getattr(frame, "_iter_column_arrays", None)
    if it is not None:
        arrays = list(it())
        return [arrays[p] for p in positions]
    return [frame.iloc[:, p].to_numpy() for p in positions]


def _concat(parts: list[Any]) -> Any:
    """One array of a column's parts (numpy or pandas extension arrays)."""
    import pandas as pd

    if not parts:
        return np.array([], dtype=object)
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, np.ndarray) for p in parts):
        dtypes = {p.dtype for p in parts}
        if len(dtypes) == 1:
            return np.concatenate(parts)
        return np.concatenate([p.astype(object) for p in parts])
    return pd.concat([pd.Series(p) for p in parts], ignore_index=True).array
