"""Spark schemas (``StructType`` or DDL strings) to Arrow schemas, parsed once per process.

Spark's handles accept a state schema as a :class:`pyspark.sql.types.StructType` or a DDL
string such as ``"count BIGINT, last STRING"``. The engine wants a :class:`pyarrow.Schema`.
DDL strings are parsed by a small local parser (no JVM round trip); anything it does not
understand is handed to a fallback parser (the JVM, through Spark's handle) when one is given.

Invariants:

* Conversion results are cached per process by the schema's text (DDL string or the
  StructType's JSON), so declaring the same state variable in every micro-batch costs a dict
  lookup, and state calls never convert schemas.
* A schema that cannot be parsed raises :class:`fsstate.errors.SchemaError` naming the state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    Row,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from fsstate.errors import SchemaError
from fsstate_spark.pyspark.arrow import to_arrow_schema

SparkSchema = StructType | str
DdlParser = Callable[[str], StructType]

_SIMPLE: dict[str, DataType] = {
    "boolean": BooleanType(),
    "bool": BooleanType(),
    "tinyint": ByteType(),
    "byte": ByteType(),
    "smallint": ShortType(),
    "short": ShortType(),
    "int": IntegerType(),
    "integer": IntegerType(),
    "bigint": LongType(),
    "long": LongType(),
    "float": FloatType(),
    "real": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamp_ltz": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
}

_cache: dict[str, pa.Schema] = {}
_lock = threading.Lock()


class _DdlError(ValueError):
    """The local DDL parser does not understand the text."""


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` on ``sep`` outside of <>, () and backquotes."""
    parts: list[str] = []
    depth = 0
    quoted = False
    start = 0
    for i, ch in enumerate(text):
        if ch == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
            if depth < 0:
                raise _DdlError(f"unbalanced {ch!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0 or quoted:
        raise _DdlError("unbalanced brackets or backquotes")
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _name_and_rest(text: str, struct_field: bool) -> tuple[str, str]:
    """Split ``name type...`` (or ``name: type`` inside struct<>) into name and the rest."""
    text = text.strip()
    if text.startswith("`"):
        end = text.index("`", 1)
        name, rest = text[1:end], text[end + 1 :]
    else:
        stop = len(text)
        for i, ch in enumerate(text):
            if ch.isspace() or (ch == ":" and struct_field):
                stop = i
                break
        name, rest = text[:stop], text[stop:]
    rest = rest.strip()
    if rest.startswith(":"):
        rest = rest[1:].strip()
    if not name or not rest:
        raise _DdlError(f"expected 'name type', got {text!r}")
    return name, rest


def _parse_type(text: str) -> DataType:
    t = text.strip()
    low = t.lower()
    if low in _SIMPLE:
        return _SIMPLE[low]
    head, _, tail = low.partition("(")
    if head.strip() in ("varchar", "char") and tail.endswith(")"):
        return StringType()
    if head.strip() in ("decimal", "dec", "numeric"):
        if not tail:
            return DecimalType(10, 0)
        args = [a.strip() for a in tail.rstrip(")").split(",")]
        if len(args) == 1:
            return DecimalType(int(args[0]), 0)
        if len(args) == 2:
            return DecimalType(int(args[0]), int(args[1]))
        raise _DdlError(f"bad decimal type {t!r}")
    head, _, tail = t.partition("<")
    kind = head.strip().lower()
    if not tail.endswith(">"):
        raise _DdlError(f"unknown type {t!r}")
    inner = tail[:-1]
    if kind == "array":
        return ArrayType(_parse_type(inner), True)
    if kind == "map":
        parts = _split_top(inner)
        if len(parts) != 2:
            raise _DdlError(f"bad map type {t!r}")
        return MapType(_parse_type(parts[0]), _parse_type(parts[1]), True)
    if kind == "struct":
        return _parse_fields(inner, struct_field=True) if inner.strip() else StructType([])
    raise _DdlError(f"unknown type {t!r}")


def _parse_fields(text: str, struct_field: bool = False) -> StructType:
    fields = []
    for part in _split_top(text):
        if not part:
            raise _DdlError("empty field")
        name, rest = _name_and_rest(part, struct_field)
        nullable = True
        low = rest.lower()
        if " comment " in f" {low} ":
            raise _DdlError("COMMENT clauses are left to Spark's parser")
        if low.endswith("not null"):
            nullable = False
            rest = rest[: -len("not null")].strip()
        fields.append(StructField(name, _parse_type(rest), nullable))
    return StructType(fields)


def parse_ddl(ddl: str) -> StructType:
    """Parse a DDL schema string (``"a INT, b STRING NOT NULL"``) without the JVM.

    Supports Spark's atomic types, decimal(p, s), array<>, map<,>, struct<> and NOT NULL.

    Raises:
        ValueError: the text uses syntax this parser does not support.
    """
    try:
        return _parse_fields(ddl)
    except _DdlError:
        raise
    except (ValueError, IndexError) as exc:
        raise _DdlError(str(exc)) from exc


def to_arrow(state: str, schema: SparkSchema, fallback: DdlParser | None = None) -> pa.Schema:
    """The Arrow schema of a Spark state schema, cached per process.

    Args:
        state: state variable name (for error messages).
        schema: a StructType or a DDL string.
        fallback: parser for DDL the local parser rejects (e.g. Spark's JVM parser).

    Raises:
        SchemaError: the schema is neither a StructType nor a parsable DDL string.
    """
    if isinstance(schema, str):
        text = "ddl:" + schema
    elif isinstance(schema, StructType):
        text = "json:" + schema.json()
    else:
        raise SchemaError(
            f"state {state!r}: schema must be a pyspark StructType or a DDL string such as "
            f"'value BIGINT', got {type(schema).__name__}"
        )
    cached = _cache.get(text)
    if cached is not None:
        return cached
    struct = schema if isinstance(schema, StructType) else _parse_with(state, schema, fallback)
    if not struct.fields:
        raise SchemaError(f"state {state!r}: the schema {schema!r} has no fields")
    try:
        arrow = to_arrow_schema(struct)
    except Exception as exc:  # pyspark raises several error types here
        raise SchemaError(f"state {state!r}: schema {schema!r} has no Arrow form: {exc}") from exc
    with _lock:
        _cache[text] = arrow
    return arrow


def _parse_with(state: str, ddl: str, fallback: DdlParser | None) -> StructType:
    try:
        return parse_ddl(ddl)
    except ValueError as local_error:
        if fallback is None:
            raise SchemaError(
                f"state {state!r}: cannot parse the schema {ddl!r} ({local_error}); pass a "
                "StructType or a DDL string like 'count BIGINT, name STRING'"
            ) from None
        try:
            return fallback(ddl)
        except Exception as exc:  # whatever Spark raises, report it typed
            raise SchemaError(f"state {state!r}: cannot parse the schema {ddl!r}: {exc}") from exc


Converter = Callable[[Any], Any]


def spark_values(schema: pa.Schema) -> Converter | None:
    """How a value of ``schema`` read from state becomes what Spark's handle returns: nested
    structs as ``Row`` objects (of the struct's field names, whatever was written: a dict, a
    tuple, a namedtuple or a Row), maps as dicts (whatever was written: a dict or key-value
    pairs), through arrays and maps; the top level stays a tuple. None: nothing to convert (no
    struct or map in the schema), the value is returned as stored."""
    convs = [_converter(f.type) for f in schema]
    if all(c is None for c in convs):
        return None

    def value(v: Any) -> Any:
        if v is None:
            return None
        return tuple(x if c is None or x is None else c(x) for c, x in zip(convs, v))

    return value


def _converter(t: pa.DataType) -> Converter | None:
    """The conversion of one stored value of type ``t`` (None: none needed)."""
    if pa.types.is_struct(t):
        names = [f.name for f in t]
        subs = [_converter(f.type) for f in t]
        make = Row(*names)

        def struct(v: Any) -> Any:
            vals = [v.get(n) for n in names] if isinstance(v, dict) else list(v)
            return make(*(x if c is None or x is None else c(x) for c, x in zip(subs, vals)))

        return struct
    if pa.types.is_map(t):
        conv_key, conv_item = _converter(t.key_type), _converter(t.item_type)

        def mapping(v: Any) -> Any:
            pairs = v.items() if isinstance(v, dict) else v
            return {
                (a if conv_key is None or a is None else conv_key(a)): (
                    b if conv_item is None or b is None else conv_item(b)
                )
                for a, b in pairs
            }

        return mapping
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        sub = _converter(t.value_type)
        if sub is None:
            return None
        return lambda v: [None if x is None else sub(x) for x in v]
    return None
