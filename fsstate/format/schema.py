"""State table specs, value checking and the row layout shared by segments and Parquet runs.

Row layout (format version 1), the same in memory (Arrow segments) and on disk (Parquet runs):

========================  ===================================================================
column                    meaning
========================  ===================================================================
``key``                   struct of the grouping-key fields (typed, named as declared)
``ukey``                  struct of the user-key fields: map state only; list state uses
                          ``{elem_seq: int64}`` (the sequence number that appended the element)
``value``                 struct of the value fields; null on tombstone rows
``_seq``                  int64 write sequence number; newer shadows older
``_op``                   int8: 0 put, 1 point delete (key + ukey), 2 clear (whole key)
``_expires_at_ms``        int64 expiry (processing time + ttl), null without TTL
========================  ===================================================================

Rows are sorted by key, then ukey, then ``_seq``, so all rows of a grouping key are contiguous.
Value tables have no ``ukey`` column.

Invariants:

* ``check_*`` functions either return a normalized plain tuple (Python scalars only) or raise a
  typed error naming the state and what to do; they never write anything.
* A spec is immutable once the grouping-key schema is known (declared or inferred from the
  first key written).
* Every float NaN a checker returns, and every NaN :func:`py_list` reads from Arrow, is the one
  object :data:`NAN`. Keys live in dicts, where ``nan != nan`` and ``hash(nan)`` follows the
  object; with one NaN object, a key holding NaN finds its state, as Spark groups every NaN
  together.
* A key's (grouping or user key) float ``-0.0`` is stored as ``0.0``: Spark groups them as one
  key, Python's dicts too, but Arrow's joins and hashes do not (a batched read would miss a
  key a point read finds). Checkers of keys return ``0.0`` and :func:`normalize_key_column`
  rewrites batched keys; values keep their ``-0.0``.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fsstate.codegen import compile_source
from fsstate.errors import InvalidTtlError, KeyArityError, SchemaError
from fsstate.interfaces import StateKind

FORMAT_VERSION = 1

KIND_VALUE = StateKind.VALUE
KIND_LIST = StateKind.LIST
KIND_MAP = StateKind.MAP

OP_PUT = 0
OP_DELETE = 1
OP_CLEAR = 2

SEQ = "_seq"
OP = "_op"
EXPIRES = "_expires_at_ms"

LIST_UKEY_SCHEMA = pa.schema([pa.field("elem_seq", pa.int64())])

Checker = Callable[[Any], tuple[Any, ...]]


@dataclass(frozen=True)
class TableSpec:
    """The declaration of one state variable.

    Attributes:
        name: state name, unique within a store.
        kind: ``value``, ``list`` or ``map``.
        value_schema: Arrow schema of the value tuple.
        key_schema: Arrow schema of the grouping-key tuple (None until inferred).
        user_key_schema: Arrow schema of the map user key (map state only).
        ttl_ms: time to live in milliseconds, or None.
        removed_fields: value fields removed by earlier evolutions, with the type stored rows
            hold them in (names are paths, ``outer.inner`` for a nested field; None: none);
            a field declared again under such a name must read those rows
            (:mod:`fsstate.format.evolution`).
    """

    name: str
    kind: StateKind
    value_schema: pa.Schema
    key_schema: pa.Schema | None = None
    user_key_schema: pa.Schema | None = None
    ttl_ms: int | None = None
    removed_fields: pa.Schema | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SchemaError(f"state name {self.name!r} must be a non-empty string")
        try:
            object.__setattr__(self, "kind", StateKind(self.kind))
        except ValueError:
            raise SchemaError(
                f"state {self.name!r}: kind {self.kind!r} is not one of "
                f"{[k.value for k in StateKind]}"
            ) from None
        check_ttl(self.name, self.ttl_ms)
        for label, schema in (("value", self.value_schema), ("user key", self.user_key_schema)):
            if schema is not None and len(schema) == 0:
                raise SchemaError(f"state {self.name!r}: the {label} schema has no fields")
        if self.kind == KIND_MAP and self.user_key_schema is None:
            raise SchemaError(f"map state {self.name!r} needs a user key schema")

    @property
    def ukey_schema(self) -> pa.Schema | None:
        """Schema of the ``ukey`` column (map: user key; list: element sequence; value: None)."""
        if self.kind == KIND_MAP:
            return self.user_key_schema
        if self.kind == KIND_LIST:
            return LIST_UKEY_SCHEMA
        return None

    def row_schema(self) -> pa.Schema:
        """Arrow schema of the rows of this table (see the module docstring)."""
        if self.key_schema is None:
            raise SchemaError(f"state {self.name!r} has no grouping key schema yet")
        fields = [pa.field("key", pa.struct(list(self.key_schema)), nullable=False)]
        ukey = self.ukey_schema
        if ukey is not None:
            fields.append(pa.field("ukey", pa.struct(list(ukey))))
        fields += [
            pa.field("value", pa.struct(list(self.value_schema))),
            pa.field(SEQ, pa.int64(), nullable=False),
            pa.field(OP, pa.int8(), nullable=False),
            pa.field(EXPIRES, pa.int64()),
        ]
        return pa.schema(fields)

    def same_shape(self, other: TableSpec) -> bool:
        """Whether two declarations store compatible rows (TTL may differ)."""
        return bool(
            self.kind == other.kind
            and self.value_schema.equals(other.value_schema)
            and _schemas_equal(self.user_key_schema, other.user_key_schema)
            and (
                self.key_schema is None
                or other.key_schema is None
                or self.key_schema.equals(other.key_schema)
            )
        )


def _schemas_equal(a: pa.Schema | None, b: pa.Schema | None) -> bool:
    if a is None or b is None:
        return a is b
    return bool(a.equals(b))


def check_ttl(name: str, ttl_ms: Any) -> None:
    """Raise InvalidTtlError unless ``ttl_ms`` is None or a positive integer."""
    if ttl_ms is None:
        return
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, numbers.Integral) or ttl_ms <= 0:
        raise InvalidTtlError(
            f"state {name!r}: ttlDurationMs={ttl_ms!r} must be a positive integer number of "
            "milliseconds (or None for no TTL)"
        )


# -- value checking -----------------------------------------------------------------------

NAN = float("nan")  # the NaN of every checked tuple and of py_list (see the module docstring)


def canonical(v: Any) -> Any:
    """``v``, or :data:`NAN` if ``v`` is a NaN."""
    return NAN if v != v else v


def py_list(arr: pa.Array | pa.ChunkedArray) -> list[Any]:
    """``arr.to_pylist()``, with every NaN of a float column the object :data:`NAN`."""
    values: list[Any] = arr.to_pylist()
    if pa.types.is_floating(arr.type) and len(arr) and pc.any(pc.is_nan(arr)).as_py():
        values = list(map(canonical, values))
    return values


_INT_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}


def normalize_key_column(arr: pa.Array) -> pa.Array:
    """A key column with every float ``-0.0`` as ``0.0`` (see the module docstring)."""
    if not pa.types.is_floating(arr.type) or not len(arr):
        return arr
    zero = pc.equal(arr, pa.scalar(0.0, arr.type))
    if not pc.any(zero).as_py():
        return arr
    return pc.if_else(zero, pa.scalar(0.0, arr.type), arr)


Normalizer = Callable[[Any], Any]  # a field's value -> its normalized Python value


def _null_guard(fn: Normalizer, nullable: bool) -> Normalizer:
    """``fn`` for non-null values; None passes if the field is nullable, else ValueError."""

    def norm(v: Any) -> Any:
        if v is None:
            if nullable:
                return None
            raise ValueError("null in a non-nullable field")
        return fn(v)

    return norm


def _int_normalizer(t: pa.DataType) -> Normalizer:
    """Integers (and integral floats) within the range of integer type ``t``."""
    lo, hi = _INT_RANGES[t]

    def to_int(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                raise ValueError(f"expected an integer, got {type(v).__name__}")
        iv = int(v)
        if not lo <= iv <= hi:
            raise ValueError(f"{iv} is out of range for {t}")
        return iv

    return to_int


def _float_normalizer(key: bool) -> Normalizer:
    """Real numbers as floats, NaN as :data:`NAN`, a key's ``-0.0`` as ``0.0``."""

    def to_float(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ValueError(f"expected a number, got {type(v).__name__}")
        f = float(v)
        if f != f:
            return NAN
        return f + 0.0 if key else f  # -0.0 + 0.0 is 0.0

    return to_float


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        return bool(v)
    raise ValueError(f"expected a bool, got {type(v).__name__}")


def _to_str(v: Any) -> str:
    if isinstance(v, str):
        return str(v)
    raise ValueError(f"expected a string, got {type(v).__name__}")


def _to_bytes(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise ValueError(f"expected bytes, got {type(v).__name__}")


def _timestamp_normalizer(tz: str | None) -> Normalizer:
    """Datetimes (pandas ones too): aware for a zoned type (naive ones taken as UTC), naive
    UTC for a type without a zone."""

    def to_ts(v: Any) -> _dt.datetime:
        if hasattr(v, "to_pydatetime"):
            v = v.to_pydatetime()
        if not isinstance(v, _dt.datetime):
            raise ValueError(f"expected a datetime, got {type(v).__name__}")
        if tz is not None and v.tzinfo is None:
            return v.replace(tzinfo=_dt.UTC)
        if tz is None and v.tzinfo is not None:
            return v.astimezone(_dt.UTC).replace(tzinfo=None)
        return v

    return to_ts


def _to_date(v: Any) -> _dt.date:
    if isinstance(v, _dt.datetime):
        return v.date()
    if isinstance(v, _dt.date):
        return v
    raise ValueError(f"expected a date, got {type(v).__name__}")


def _to_decimal(v: Any) -> decimal.Decimal:
    if isinstance(v, bool) or not isinstance(v, (decimal.Decimal, int)):
        raise ValueError(f"expected a Decimal, got {type(v).__name__}")
    return decimal.Decimal(v)


def _generic_normalizer(t: pa.DataType) -> Normalizer:
    """Whatever Arrow converts to type ``t`` (nested and other types), as Arrow reads it back;
    a struct may also be given as a tuple of its fields in order (a namedtuple, a Spark
    ``Row``), as Spark's state API takes it."""

    def generic(v: Any) -> Any:
        try:
            return pa.scalar(v, type=t).as_py()
        except (pa.ArrowException, TypeError, ValueError) as exc:
            try:
                return pa.scalar(_structs_as_dicts(v, t), type=t).as_py()
            except (pa.ArrowException, TypeError, ValueError):
                raise ValueError(str(exc)) from exc

    return generic


def _structs_as_dicts(v: Any, t: pa.DataType) -> Any:
    """``v`` of type ``t`` with every struct given as a tuple turned into a dict by field."""
    if v is None:
        return None
    if pa.types.is_struct(t):
        fields = list(t)
        if isinstance(v, dict):
            return {f.name: _structs_as_dicts(v.get(f.name), f.type) for f in fields}
        if isinstance(v, (tuple, list)) and len(v) == len(fields):
            return {f.name: _structs_as_dicts(x, f.type) for f, x in zip(fields, v)}
        return v
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_structs_as_dicts(x, t.value_type) for x in v] if isinstance(v, list) else v
    if pa.types.is_map(t) and isinstance(v, dict):
        return {k: _structs_as_dicts(x, t.item_type) for k, x in v.items()}
    return v


def _typed_normalizer(t: pa.DataType, key: bool) -> tuple[type | None, Normalizer]:
    """(fast exact Python type or None, normalizer of non-null values) of Arrow type ``t``."""
    if pa.types.is_integer(t):
        return int, _int_normalizer(t)
    if pa.types.is_floating(t):
        return float, _float_normalizer(key)
    if pa.types.is_boolean(t):
        return bool, _to_bool
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str, _to_str
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes, _to_bytes
    if pa.types.is_timestamp(t):
        return None, _timestamp_normalizer(t.tz)
    if pa.types.is_date(t):
        return _dt.date, _to_date
    if pa.types.is_decimal(t):
        return None, _to_decimal
    return None, _generic_normalizer(t)


def _field_normalizer(field: pa.Field, key: bool = False) -> tuple[type | None, Normalizer]:
    """(fast exact Python type or None, slow normalizer raising ValueError on mismatch); a key
    field's float ``-0.0`` becomes ``0.0``."""
    fast_type, norm = _typed_normalizer(field.type, key)
    return fast_type, _null_guard(norm, field.nullable)


_CHECKERS: dict[tuple[str, str, pa.Schema], Checker] = {}
CHECKERS_MAX = 512  # compiled checkers kept (a store's tables are rebuilt per epoch)


def make_checker(state: str, what: str, schema: pa.Schema) -> Checker:
    """A validator for tuples of ``schema``, compiled once per (state, what, schema).

    Checkers are pure functions of their arguments, so one compiled checker serves every
    table (and every epoch's rebuilt table) of the same state, role and schema; at most
    ``CHECKERS_MAX`` are kept (the cache is emptied when full).

    Args:
        state: state name for messages.
        what: ``"value"``, ``"grouping key"`` or ``"user key"``.
        schema: the Arrow schema the tuple must match.
    """
    key = (state, what, schema)
    check = _CHECKERS.get(key)
    if check is None:
        if len(_CHECKERS) >= CHECKERS_MAX:
            _CHECKERS.clear()
        check = _CHECKERS[key] = _compile_checker(state, what, schema)
    return check


def _compile_checker(state: str, what: str, schema: pa.Schema) -> Checker:
    """Compile the validator :func:`make_checker` returns."""
    n = len(schema)
    fields = list(schema)
    key = what != "value"
    norms = [_field_normalizer(f, key) for f in fields]
    arity_error = KeyArityError if what != "value" else SchemaError
    expected = ", ".join(f"{f.name} {f.type}" for f in fields)

    def slow(value: Any) -> tuple[Any, ...]:
        if isinstance(value, (tuple, list)):
            items = tuple(value)
        else:
            raise SchemaError(
                f"state {state!r}: the {what} must be a tuple ({expected}), got "
                f"{type(value).__name__} {value!r}; wrap a single field as (x,)"
            )
        if len(items) != n:
            raise arity_error(
                f"state {state!r}: the {what} {value!r} has {len(items)} field(s), the schema "
                f"has {n} ({expected})"
            )
        out = []
        for item, field, (_, norm) in zip(items, fields, norms):
            try:
                out.append(norm(item))
            except ValueError as exc:
                raise SchemaError(
                    f"state {state!r}: field {field.name!r} ({field.type}) of the {what} "
                    f"{value!r} does not fit: {exc}"
                ) from None
        return tuple(out)

    fast = fast_check_source(schema, "v", key=key)
    if fast is None:
        return slow
    # exact-type fast path, generated so a hit costs one type test (and range test) per field
    cond, env = fast
    env["slow"] = slow
    source = f"def check(v):\n    if {cond}:\n        return v\n    return slow(v)\n"
    check: Checker = compile_source(source, "checker", env)["check"]
    return check


def fast_check_source(
    schema: pa.Schema, var: str, prefix: str = "_t", key: bool = False
) -> tuple[str, dict[str, Any]] | None:
    """A Python expression true when ``var`` already is a valid plain tuple of ``schema``.

    The test is exact: the tuple type, the arity, each field's exact Python type and, for
    integer fields, the type's range; a float field must not be NaN (the checker makes every
    NaN :data:`NAN`) nor, in a key, zero (the checker makes ``-0.0`` ``0.0``). A value passing
    it is returned unchanged by the checker of :func:`make_checker`; anything else must go
    through the checker.

    Args:
        schema: the Arrow schema of the tuple.
        var: the variable name the expression tests.
        prefix: the prefix of the names of the globals (several tests can share one scope).
        key: the tuple is a grouping or user key.

    Returns:
        ``(source, env)``: the expression and the globals it needs (names ``<prefix><i>``), or None
        when some field has no exact-type test (the checker must always run).
    """
    fields = list(schema)
    conds = [f"type({var}) is tuple", f"len({var}) == {len(fields)}"]
    env: dict[str, Any] = {}
    for i, field in enumerate(fields):
        fast_type, _ = _field_normalizer(field, key)
        if fast_type is None:
            return None
        if pa.types.is_integer(field.type):
            lo, hi = _INT_RANGES[field.type]
            conds.append(f"type({var}[{i}]) is int and {lo} <= {var}[{i}] <= {hi}")
        elif fast_type is float:
            env[f"{prefix}{i}"] = fast_type
            x = f"{var}[{i}]"
            zero = f" and {x} != 0.0" if key else ""
            conds.append(f"type({x}) is {prefix}{i} and {x} == {x}{zero}")
        else:
            env[f"{prefix}{i}"] = fast_type
            conds.append(f"type({var}[{i}]) is {prefix}{i}")
    return " and ".join(conds), env


def infer_key_schema(state: str, key: Any) -> pa.Schema:
    """Infer a grouping-key schema from the first key written (used when none was declared).

    Raises:
        SchemaError: if the key is not a tuple or holds a value whose type cannot be inferred
            (None, nested objects): declare ``key_schema`` explicitly then.
    """
    if not isinstance(key, (tuple, list)) or len(key) == 0:
        raise KeyArityError(
            f"state {state!r}: the grouping key must be a non-empty tuple, got {key!r}"
        )
    fields = []
    for i, v in enumerate(key):
        if isinstance(v, bool) or type(v).__name__ == "bool_":
            t = pa.bool_()
        elif isinstance(v, numbers.Integral):
            t = pa.int64()
        elif isinstance(v, numbers.Real) and not isinstance(v, decimal.Decimal):
            t = pa.float64()
        elif isinstance(v, str):
            t = pa.string()
        elif isinstance(v, (bytes, bytearray)):
            t = pa.binary()
        elif isinstance(v, _dt.datetime) or hasattr(v, "to_pydatetime"):
            tz = getattr(v, "tzinfo", None)
            t = pa.timestamp("us", tz="UTC" if tz is not None else None)
        elif isinstance(v, _dt.date):
            t = pa.date32()
        elif isinstance(v, decimal.Decimal):
            t = pa.decimal128(38, 18)
        else:
            raise SchemaError(
                f"state {state!r}: cannot infer the type of grouping key field {i} from "
                f"{v!r}; declare key_schema explicitly"
            )
        fields.append(pa.field(f"k{i}", t))
    return pa.schema(fields)


def schema_to_text(schema: pa.Schema | None) -> str | None:
    """A short human-readable form of a schema for messages."""
    if schema is None:
        return None
    return ", ".join(f"{f.name} {f.type}" for f in schema)


UserKeyOrder = Callable[[tuple[Any, ...]], Any]
"""A sort key for map user keys (e.g. Spark's MapState order,
:mod:`fsstate_spark.state.map_order`)."""


def _nulls_last(key: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((True, 0) if v is None else (False, v) for v in key)


def sort_entries(
    items: list[tuple[tuple[Any, ...], Any]], order: UserKeyOrder | None
) -> list[tuple[tuple[Any, ...], Any]]:
    """Sort (user key, value) pairs in place by ``order`` of the user key, or, without one, in
    natural user-key order: field by field ascending, nulls last (the order of the ``ukey``
    columns in every segment and run file); returns ``items``."""
    if len(items) < 2:
        return items
    if order is not None:
        items.sort(key=lambda kv: order(kv[0]))
        return items
    try:
        items.sort(key=_first)
    except TypeError:  # a null among the fields compared
        items.sort(key=lambda kv: _nulls_last(kv[0]))
    return items


def _first(kv: tuple[Any, Any]) -> Any:
    return kv[0]
