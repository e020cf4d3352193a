"""Arrow and pandas as PySpark converts them, on every supported minor.

* Spark schemas to Arrow (:func:`to_arrow_schema`): ``to_arrow_schema(..., timezone=)`` from
  4.2, ``timestamp_utc=`` before.
* Arrow to pandas and back as Spark's Python worker converts for ``transformWithStateInPandas``
  (:func:`arrow_to_pandas`, :func:`pandas_to_arrow`, :func:`wrap_struct`):
  ``pyspark.sql.conversion.ArrowBatchTransformer`` / ``PandasToArrowConversion`` from 4.2,
  the serializers of ``pyspark.sql.pandas.serializers`` before (the same code the worker of
  that release runs, so values, dtypes and column assignment are that release's).

Invariant: on 4.2 and later each function delegates to PySpark's own; on 4.0 and 4.1 to that
release's serializer code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyspark
from pyspark.sql.types import StructType

from fsstate_spark.pyspark import PYSPARK_MINOR

if TYPE_CHECKING:
    import pandas as pd


_CONVERSION = PYSPARK_MINOR >= (4, 2)  # pyspark.sql.conversion's Arrow <-> pandas helpers


def from_arrow_schema(schema: pa.Schema, prefer_timestamp_ntz: bool | None = None) -> StructType:
    """An Arrow schema as Spark's (``pyspark.sql.pandas.types.from_arrow_schema``).

    Args:
        schema: the Arrow schema.
        prefer_timestamp_ntz: zone-less Arrow timestamps as ``TimestampNTZType`` (None: PySpark's
            default).

    Returns:
        The Spark schema PySpark makes of it.
    """
    from pyspark.sql.pandas.types import from_arrow_schema as convert

    if prefer_timestamp_ntz is None:
        struct: StructType = convert(schema)
    else:
        struct = convert(schema, prefer_timestamp_ntz=prefer_timestamp_ntz)
    return struct


def to_arrow_schema(struct: StructType) -> pa.Schema:
    """A Spark schema as Arrow, timestamps as ``timestamp[us, tz=UTC]``.

    Args:
        struct: the Spark schema.

    Returns:
        The Arrow schema PySpark makes of it.
    """
    from pyspark.sql.pandas import types

    convert: Any = types.to_arrow_schema  # its keywords differ by minor
    if _CONVERSION:
        schema: pa.Schema = convert(struct, timezone="UTC")
    else:
        schema = convert(struct, timestamp_utc=True)
    return schema


def wrap_struct(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch's columns as one struct column ``_0``, as Spark's worker hands output back.

    Args:
        batch: the batch to wrap.

    Returns:
        A one-column batch of as many rows.
    """
    if _CONVERSION:
        from pyspark.sql.conversion import ArrowBatchTransformer

        wrapped: pa.RecordBatch = ArrowBatchTransformer.wrap_struct(batch)
        return wrapped
    # 4.0 / 4.1: the code of ArrowStreamUDFSerializer.dump_stream
    if batch.num_columns == 0:
        struct = pa.array([{}] * batch.num_rows)
    else:
        struct = pa.StructArray.from_arrays(batch.columns, fields=pa.struct(list(batch.schema)))
    return pa.RecordBatch.from_arrays([struct], ["_0"])


def _serializers_module() -> Any:
    """``pyspark.sql.pandas.serializers`` of 4.0 / 4.1 (its classes differ by minor)."""
    import importlib

    return importlib.import_module("pyspark.sql.pandas.serializers")


_serializers: dict[tuple[Any, ...], Any] = {}
_serializers_lock = threading.Lock()


def _serializer(
    timezone: str | None,
    safecheck: bool,
    assign_cols_by_name: bool,
    arrow_cast: bool,
    int_to_decimal: bool,
) -> Any:
    """A (cached) ``ArrowStreamPandasUDFSerializer`` of PySpark 4.0 / 4.1 with these settings
    (``transformWithStateInPandas``'s: structs as dicts, no DataFrame for structs)."""
    key = (timezone, safecheck, assign_cols_by_name, arrow_cast, int_to_decimal)
    ser = _serializers.get(key)
    if ser is not None:
        return ser
    kwargs: dict[str, Any] = {"arrow_cast": arrow_cast}
    if PYSPARK_MINOR >= (4, 1):
        kwargs["int_to_decimal_coercion_enabled"] = int_to_decimal
    ser = _serializers_module().ArrowStreamPandasUDFSerializer(
        timezone, safecheck, assign_cols_by_name, **kwargs
    )
    with _serializers_lock:
        _serializers[key] = ser
    return ser


def _to_pandas_serializer(timezone: str) -> Any:
    """A (cached) ``ArrowStreamPandasSerializer`` of PySpark 4.0 / 4.1: the Arrow-to-pandas
    conversion of its ``transformWithStateInPandas`` serializer (structs as dicts, arrays as
    numpy arrays; safecheck and decimal coercion apply only the other way)."""
    key = ("to_pandas", timezone)
    ser = _serializers.get(key)
    if ser is not None:
        return ser
    args: tuple[Any, ...] = (
        (timezone, False, False) if PYSPARK_MINOR >= (4, 1) else (timezone, False)
    )
    ser = _serializers_module().ArrowStreamPandasSerializer(*args)
    with _serializers_lock:
        _serializers[key] = ser
    return ser


def arrow_to_pandas(
    table: pa.Table | pa.RecordBatch, timezone: str, prefer_int_ext_dtype: bool = False
) -> list[pd.Series[Any]]:
    """A table's columns as pandas Series, converted as Spark's Python worker converts
    ``transformWithStateInPandas`` input (``ArrowBatchTransformer.to_pandas``).

    Args:
        table: the Arrow data.
        timezone: the session time zone (of timestamps).
        prefer_int_ext_dtype: integers as pandas' nullable extension dtypes (4.2+; the
            setting does not exist before).

    Returns:
        One Series per column; a table without columns gives one Series of PySpark's
        ``_NoValue`` per row, as Spark's.
    """
    if _CONVERSION:
        from pyspark.sql.conversion import ArrowBatchTransformer

        series: list[pd.Series[Any]] = ArrowBatchTransformer.to_pandas(
            table, timezone=timezone, prefer_int_ext_dtype=prefer_int_ext_dtype
        )
        return series
    import pandas as pd

    if table.num_columns == 0:
        no_value = pyspark._NoValue  # type: ignore[attr-defined]
        return [pd.Series([no_value] * table.num_rows)]
    ser = _to_pandas_serializer(timezone)
    if PYSPARK_MINOR >= (4, 1):
        return [ser.arrow_to_pandas(c, i) for i, c in enumerate(table.columns)]
    return [ser.arrow_to_pandas(c) for c in table.columns]


def pandas_to_arrow(
    data: pd.DataFrame | Sequence[pd.Series[Any] | pd.DataFrame],
    schema: StructType,
    *,
    timezone: str | None,
    safecheck: bool,
    arrow_cast: bool,
    assign_cols_by_name: bool,
    int_to_decimal_coercion_enabled: bool,
) -> pa.RecordBatch:
    """pandas data as one Arrow batch of ``schema``, converted as Spark's Python worker
    converts ``transformWithStateInPandas`` output (``PandasToArrowConversion.convert``).

    Args:
        data: a DataFrame (its columns are the schema's fields), or one Series / DataFrame
            per field (a DataFrame for a struct field).
        schema: the Spark schema of the batch.
        timezone: the session time zone (of pandas timestamps).
        safecheck: ``spark.sql.execution.pandas.convertToArrowArraySafely``.
        arrow_cast: cast with Arrow when a column does not convert directly.
        assign_cols_by_name: take a DataFrame's columns by name when they are strings.
        int_to_decimal_coercion_enabled: integers to decimals through ``Decimal`` (4.1+).

    Returns:
        The batch, its columns named as the schema's fields.
    """
    if _CONVERSION:
        from pyspark.sql.conversion import PandasToArrowConversion

        batch: pa.RecordBatch = PandasToArrowConversion.convert(
            data,
            schema,
            timezone=timezone,
            safecheck=safecheck,
            arrow_cast=arrow_cast,
            assign_cols_by_name=assign_cols_by_name,
            int_to_decimal_coercion_enabled=int_to_decimal_coercion_enabled,
        )
        return batch
    return _pandas_to_arrow_serializer(
        data,
        schema,
        _serializer(
            timezone, safecheck, assign_cols_by_name, arrow_cast, int_to_decimal_coercion_enabled
        ),
    )


def _pandas_to_arrow_serializer(
    data: pd.DataFrame | Sequence[pd.Series[Any] | pd.DataFrame], schema: StructType, ser: Any
) -> pa.RecordBatch:
    """:func:`pandas_to_arrow` on 4.0 / 4.1: the serializer's ``_create_batch`` (a list) or
    ``_create_struct_array`` (a DataFrame), as that release's worker."""
    import pandas as pd
    from pyspark.sql.pandas.types import to_arrow_type

    names = schema.names
    if not schema.fields:
        rows = len(data[0]) if isinstance(data, list) and data else len(data)
        return pa.RecordBatch.from_pydict({"_": [None] * rows}).select([])
    if isinstance(data, pd.DataFrame):
        struct = ser._create_struct_array(data, to_arrow_type(schema))
        return pa.RecordBatch.from_arrays(struct.flatten(), names)
    # as the worker hands its results over: (data, Arrow type), no Spark type
    items = [
        (column, to_arrow_type(field.dataType))
        for column, field in zip(data, schema.fields, strict=True)
    ]
    created = ser._create_batch(items)
    return pa.RecordBatch.from_arrays(created.columns, names)


def column_arrays(frame: Any, positions: list[int]) -> list[Any]:
    """The frame's columns at ``positions`` as arrays (pandas' fast column iterator when
    present: one call per frame, not one ``__getitem__`` per column)."""
    it: Callable[[], Iterator[Any]] | None = getattr(frame, "_iter_column_arrays", None)
    if it is not None:
        arrays = list(it())
        return [arrays[p] for p in positions]
    return [frame.iloc[:, p].to_numpy() for p in positions]
