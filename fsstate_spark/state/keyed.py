"""fsstate's keyed loop: Arrow batches grouped by key as a StatefulProcessor's per-key
arguments, and the rows it yields back as one Arrow table. Its two callers: the flow driver's
processor stage (:mod:`fsstate_spark.operators.processor_stage`, a partition's batch sorted by
key) and fsstate's worker for Spark's transformWithState (:mod:`fsstate_spark.tiered.fast_loop`,
the key runs of the batches Spark's operator sends).

* :class:`KeyedRows`: each key's rows of a table whose keys are contiguous runs (``bounds``),
  as Spark's Python worker hands them to ``handleInputRows`` / ``handleInitialState``: pandas
  chunks of at most ``maxRecordsPerBatch`` rows (and ``maxBytesPerBatch`` by Spark's
  estimate) with a fresh ``RangeIndex`` (converted by Spark's own Arrow-to-pandas code, once
  per batch) or ``Row`` objects; keys as Spark's (the values pandas' ``itertuples`` gives in
  the pandas flavour, Python values in the Row flavour) and as the store's (the Arrow values:
  the same in both flavours, a null as None).
* :func:`run_keys`: the loop: per key, the initial state's chunks (``handleInitialState``),
  then its rows (``handleInputRows``), the yielded items gathered; ``enter`` is called before
  any user code runs for a key (the caller binds the key there), and before each step of what
  it yields (:func:`fsstate_spark.state.keys.bound_items`). :func:`run_timers`: the same for
  the timers due (``handleExpiredTimer``), each deleted after its call.
* :class:`PandasOutput` / :class:`RowOutput`: what the processor yields, gathered column by
  column and converted once (Spark's pandas-to-Arrow conversion; Rows as Spark's worker
  converts them, by name).

Invariants: conversions are lazy (a processor that never reads its rows pays for none), and
give exactly the values, types and column assignment Spark's worker gives (tested against
it); keys group as the JVM groups them (nulls together, compared as Arrow values, not as
pandas values: Spark's own pandas loop splits a null integer key into one group per row, as
its null becomes NaN); a yielded object of the wrong kind, or a frame missing an output
column, raises :class:`fsstate.errors.SchemaError` naming what was expected.
"""

from __future__ import annotations

import abc
import datetime as dt
import decimal
import math
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import repeat
from operator import add, methodcaller
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo
from pyspark.sql.types import Row, StructType

from fsstate.errors import SchemaError
from fsstate_spark.pyspark import TWS_PANDAS_ARROW_CAST
from fsstate_spark.pyspark.arrow import (
    arrow_to_pandas,
    column_arrays,
    pandas_to_arrow,
    wrap_struct,
)
from fsstate_spark.pyspark.rows import row_class, row_fields
from fsstate_spark.state.keys import bound_items


class RowFlavour(Protocol):
    """How rows are handed over (a
    :class:`fsstate_spark.operators.processor_stage.ProcessorSpec`)."""

    @property
    def pandas(self) -> bool: ...

    @property
    def timezone(self) -> str: ...

    @property
    def max_records_per_batch(self) -> int: ...

    @property
    def max_bytes_per_batch(self) -> int: ...


class KeyedRows:
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
        flavour: RowFlavour,
        keys: tuple[str, ...] | list[pa.ChunkedArray],
    ) -> None:
        self.bounds: list[int] = bounds.tolist()
        self.flavour = flavour
        self.n = len(bounds) - 1
        names = table.column_names
        cols = [table.column(k) if isinstance(k, str) else k for k in keys]
        take = pa.array(bounds[:-1], pa.int64())
        key_values = pa.Table.from_arrays(
            [c.take(take) for c in cols], names=[f"k{i}" for i in range(len(cols))]
        )
        self.store_keys: list[tuple[Any, ...]] = list(
            zip(*(c.to_pylist() for c in key_values.columns))
        )
        if flavour.pandas:
            limits = (flavour.max_records_per_batch, flavour.max_bytes_per_batch)
            self.step = chunk_rows(table, *limits)
            int_ext = getattr(flavour, "prefer_int_ext_dtype", False)
            self.frame = to_pandas(table, flavour.timezone, int_ext)
            frame = to_pandas(key_values, flavour.timezone, int_ext)
            self.keys: list[tuple[Any, ...]] = list(
                zip(*(list(frame.iloc[:, i]) for i in range(frame.shape[1])))
            )
        else:
            self.table = table
            self.row_type = row_class(tuple(names))
            self._rows: list[Any] | None = None
            self.keys = self.store_keys

    def chunks(self, g: int) -> Iterator[Any]:
        """A lazy iterator over group ``g``'s rows (pandas chunks, or Rows)."""
        a, b = self.bounds[g], self.bounds[g + 1]
        if not self.flavour.pandas:
            return self._row_range(a, b)
        return self._frames(a, b)

    def _row_range(self, a: int, b: int) -> Iterator[Any]:
        rows = self._rows if self._rows is not None else self._make_rows()
        yield from rows[a:b]

    def _make_rows(self) -> list[Any]:
        """Every row as a ``Row`` of the table's column names, as Spark's worker makes them
        (``Row(*names)(*values)``: a Row whose ``__fields__`` is that Row of names), built
        without the per-row call chain of ``Row.__call__``, of the names' Row class
        (:func:`fsstate_spark.pyspark.rows.row_class`: fields read as attributes directly)."""
        make = partial(tuple.__new__, self.row_type)
        rows = list(map(make, zip(*(_py_values(c) for c in self.table.columns))))
        self._rows = rows
        return rows

    def _frames(self, a: int, b: int) -> Iterator[Any]:
        import pandas as pd

        step = self.step
        for s in range(a, b, step):
            e = min(b, s + step)
            chunk = self.frame.iloc[s:e]
            chunk.index = pd.RangeIndex(e - s)
            yield chunk


def chunk_rows(table: pa.Table, max_records: int, max_bytes: int) -> int:
    """Rows per pandas chunk of a key, as Spark's worker cuts them: a chunk ends when it holds
    ``max_records`` rows or its rows times the average Arrow row size reach ``max_bytes``
    (the average over the rows' buffers; Spark's over the batches it read so far)."""
    if max_bytes >= 2**31 - 1 or not table.num_rows:
        return max(1, max_records)
    size = sum(
        buf.size
        for col in table.columns
        for chunk in col.chunks
        for buf in chunk.buffers()
        if buf is not None
    )
    average = size / table.num_rows
    by_bytes = math.ceil(max_bytes / average) if average > 0 else max_records
    return max(1, min(max_records, by_bytes))


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
    offsets such as ``+05:30``) go through ``to_pylist``. Without nulls, an aware column is
    made as ``datetime(1970, 1, 1, tzinfo=utc) + timedelta(microseconds=v)`` (then
    ``.astimezone(tz)`` unless UTC): the same values, in C calls only.
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
    if t.tz is None:
        naive: list[Any] = col.to_numpy().tolist()
        return naive
    first = col.drop_null()[0]
    tz = first.as_py().tzinfo  # pyarrow's tzinfo of the column's zone
    if first.as_py().tzinfo is not tz:  # a new tzinfo per value (fixed offsets): keep that
        plain = col.to_pylist()
        return plain
    is_utc = tz is dt.UTC or getattr(tz, "key", None) == "UTC"
    if col.null_count:
        naive = col.to_numpy().tolist()
        if is_utc:
            return [None if d is None else d.replace(tzinfo=tz) for d in naive]
        utc = dt.UTC
        return [None if d is None else d.replace(tzinfo=utc).astimezone(tz) for d in naive]
    # no nulls: the same datetimes as an aware epoch plus each value's timedelta (C calls
    # only; ``replace`` with a keyword costs ten times as much per value)
    deltas = col.cast(pa.int64()).to_numpy().astype("timedelta64[us]").tolist()
    if is_utc:
        return list(map(add, repeat(dt.datetime(1970, 1, 1, tzinfo=tz)), deltas))
    aware = map(add, repeat(dt.datetime(1970, 1, 1, tzinfo=dt.UTC)), deltas)
    return list(map(methodcaller("astimezone", tz), aware))


def to_pandas(table: pa.Table, timezone: str, prefer_int_ext_dtype: bool = False) -> Any:
    """The table as one pandas DataFrame, converted as Spark's Python worker converts."""
    import pandas as pd

    series = arrow_to_pandas(table, timezone, prefer_int_ext_dtype)
    if not series:
        return pd.DataFrame(index=pd.RangeIndex(table.num_rows))
    frame = pd.concat(series, axis=1)
    frame.columns = table.column_names
    return frame


def merge_keys(
    data: KeyedRows | None, init: KeyedRows | None
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


def run_keys(
    processor: Any,
    data: KeyedRows | None,
    init: KeyedRows | None,
    values: Any,
    out: Output,
    enter: Callable[[tuple[Any, ...], tuple[Any, ...]], None],
) -> None:
    """Run ``processor`` over every key of ``data`` and ``init`` (see the module docstring):
    ``enter(key, store key)`` before each call into the processor and each step of the
    iterator it returns (a lazy generator may interleave), the yielded items into ``out``."""
    for key, k, i, j in merge_keys(data, init):
        if j is not None:
            assert init is not None
            for chunk in init.chunks(j):
                enter(key, k)
                processor.handleInitialState(key, chunk, values)
        if i is not None:
            assert data is not None
            enter(key, k)
            result = processor.handleInputRows(key, data.chunks(i), values)
            for item in bound_items(result, partial(enter, key, k)):
                out.add(item)


def run_timers(
    processor: Any,
    due: Iterable[tuple[tuple[Any, ...], tuple[Any, ...], int]],
    values: Any,
    out: Output,
    enter: Callable[[tuple[Any, ...], tuple[Any, ...]], None],
    delete: Callable[[tuple[Any, ...], int], None],
) -> None:
    """Run ``processor``'s ``handleExpiredTimer`` for every (key, store key, expiry ms) of
    ``due``, in order: ``enter(key, store key)`` before the call and each step of what it
    yields (into ``out``), then ``delete(store key, expiry)`` with the key entered."""
    for key, k, expiry in due:
        enter(key, k)
        result = processor.handleExpiredTimer(key, values, ExpiredTimerInfo(expiry))
        for item in bound_items(result, partial(enter, key, k)):
            out.add(item)
        enter(key, k)
        delete(k, expiry)


class Output(abc.ABC):
    """What a processor's handler yields, gathered into one Arrow table of the output schema."""

    @abc.abstractmethod
    def add(self, item: Any) -> None:
        """Take one yielded item (a pandas DataFrame or a Row)."""

    @abc.abstractmethod
    def table(self) -> pa.Table:
        """Everything added so far, as one table."""


class RowOutput(Output):
    """Rows yielded by a Row-flavour processor, converted as Spark's worker converts them
    (``RecordBatch.from_pylist`` of their ``asDict(True)``).

    A Row whose fields are the output's names, in order, and whose values are all of plain
    immutable types (:data:`_FLAT`: none of them a Row, list or dict, which ``asDict(True)``
    would copy) is kept as is, and the values are gathered by column: the lists
    ``from_pylist`` would build from its dict. Any other Row goes through ``asDict(True)``
    when it is yielded, as Spark's worker does; the batch is then built with ``from_pylist``.
    """

    def __init__(self, schema: pa.Schema, *, wrapped: bool = False) -> None:
        self.schema = schema
        self.wrapped = wrapped  # the table as Spark's worker hands it back: one struct ``_0``
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
        fields = row_fields(item)
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
            # one pass per column reading the tuple's item directly: itemgetter would call
            # Row.__getitem__ (Python) per value, zip(*rows) makes an iterator per row
            item, n = tuple.__getitem__, len(rows)
            columns = [list(map(item, rows, repeat(i, n))) for i in range(self._width)]
            batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        else:
            dicts = [r if isinstance(r, dict) else r.asDict(True) for r in rows]
            batch = pa.RecordBatch.from_pylist(dicts, schema=self.schema)
        if self.wrapped:
            batch = wrap_struct(batch)
        return pa.Table.from_batches([batch])


_FLAT: frozenset[type] = frozenset(
    {str, int, float, bool, bytes, type(None)}
    | {dt.datetime, dt.date, dt.time, dt.timedelta, decimal.Decimal}
)
"""Value types a Row output keeps as is (``asDict(True)`` copies only Rows, lists, dicts)."""


class PandasOutput(Output):
    """Frames yielded by a pandas-flavour processor, gathered by column and converted once."""

    def __init__(
        self,
        output_type: StructType,
        *,
        safecheck: bool = False,
        int_to_decimal: bool = False,
        timezone: str = "UTC",
        by_name: bool = True,
        wrapped: bool = False,
    ) -> None:
        self.output_type = output_type
        self.safecheck = safecheck  # spark.sql.execution.pandas.convertToArrowArraySafely
        self.int_to_decimal = int_to_decimal  # ...pythonUDF.pandas.intToDecimalCoercionEnabled
        self.timezone = timezone  # of pandas timestamps (the session's)
        self.by_name = by_name  # ...legacy.execution.pandas.groupedMap.assignColumnsByName
        self.wrapped = wrapped  # the table as Spark's worker hands it back: one struct ``_0``
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
        if self.by_name and all(isinstance(c, str) for c in cols):
            missing = [n for n in self.names if n not in cols]
            if missing:
                raise SchemaError(
                    f"transform_with_state: a yielded DataFrame has no column(s) {missing} of "
                    f"the output schema {self.names}"
                )
            arrays = column_arrays(item, [cols.index(n) for n in self.names])
        else:
            arrays = column_arrays(item, list(range(len(self.names))))
        for part, arr in zip(self.parts, arrays, strict=True):
            part.append(arr)

    def table(self) -> pa.Table:
        import pandas as pd

        cols = {}
        for name, part in zip(self.names, self.parts, strict=True):
            cols[name] = _concat(part)
        frame = pd.DataFrame(cols)
        if self.wrapped:  # as Spark's worker converts a key's frame, all keys' at once
            from pyspark.sql.types import StructField

            schema = StructType([StructField("_0", self.output_type)])
            data: Any = [frame]
        else:
            schema, data = self.output_type, frame
        batch = pandas_to_arrow(
            data,
            schema,
            timezone=self.timezone,
            safecheck=self.safecheck,
            arrow_cast=TWS_PANDAS_ARROW_CAST,
            assign_cols_by_name=True,
            int_to_decimal_coercion_enabled=self.int_to_decimal,
        )
        return pa.Table.from_batches([batch])


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
