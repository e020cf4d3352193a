"""Schema evolution: which changes of a state variable's declaration keep its stored rows.

A store records each table's spec in its manifests; run files keep the row layout they were
written with (:mod:`fsstate.format.schema`). When a table is declared again (after a restart,
or by a new version of a processor) with another **value** schema, :func:`check_evolution`
decides:

* allowed: a field added as nullable (stored rows read it as null); a numeric type widened
  (``int8 -> int16 -> int32 -> int64``, the unsigned ints likewise and into a wider signed
  int, ``int8/16/32 -> float64``, ``float16 -> float32 -> float64``, ``decimal(p, s) ->
  decimal(p', s')`` with ``s' >= s`` and ``p' - s' >= p - s``), ``string -> large_string``,
  ``binary -> large_binary``; fields reordered (matched by name); a nested struct evolving by
  the same rules; a non-nullable field becoming nullable;
* refused with :class:`fsstate.errors.SchemaEvolutionError` (naming the state, the field, the
  old and new types and what to do): a stored field missing from the new schema (removed or
  renamed), a narrowed or otherwise changed type, an added non-nullable field, a nullable
  field becoming non-nullable, any change of the grouping-key schema or of a map's user-key
  schema.

After an allowed change the table's spec is the new one: new rows are written with it, and
rows of older files are projected to it where files are decoded
(:func:`project_rows`, called by :mod:`fsstate.storage.runs`): fields by name, widened by a
cast, added ones null. A compaction rewrites them in the new layout.

Invariants:

* :func:`check_evolution` has no side effect: a refused change writes nothing.
* :func:`project_rows` returns rows in exactly the spec's row schema, or None when the rows'
  layout is not one the spec evolved from (the caller reports a damaged file); rows already in
  the spec's layout are returned as they are (no copy).
"""

from __future__ import annotations

import pyarrow as pa

from fsstate.errors import SchemaEvolutionError
from fsstate.format.schema import TableSpec, schema_to_text

_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINTS = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOATS = [pa.float16(), pa.float32(), pa.float64()]
WHAT_TO_DO = (
    "declare the state with a compatible schema (add nullable fields, widen numbers), use a "
    "new state name, or drop the old state first (deleteIfExists)"
)


def _rank(t: pa.DataType, ladder: list[pa.DataType]) -> int:
    return ladder.index(t) if t in ladder else -1


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly a value of ``new`` (see the module docstring)."""
    if old.equals(new):
        return True
    for ladder in (_INTS, _UINTS, _FLOATS):
        a, b = _rank(old, ladder), _rank(new, ladder)
        if a >= 0 and b >= 0:
            return b > a
    u = _rank(old, _UINTS)
    if u >= 0 and _rank(new, _INTS) > u:  # uint_n fits int_2n and wider
        return True
    if _rank(old, _INTS) in (0, 1, 2) and new.equals(pa.float64()):
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return bool(
            new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
        )
    if old.equals(pa.string()) and new.equals(pa.large_string()):
        return True
    return bool(old.equals(pa.binary()) and new.equals(pa.large_binary()))


def _refuse(state: str, what: str) -> SchemaEvolutionError:
    return SchemaEvolutionError(f"state {state!r}: {what}; {WHAT_TO_DO}")


def _check_fields(state: str, path: str, old: list[pa.Field], new: list[pa.Field]) -> None:
    by_name = {f.name: f for f in new}
    for f in old:
        name = f"{path}{f.name}"
        g = by_name.get(f.name)
        if g is None:
            raise _refuse(
                state,
                f"stored field {name!r} ({f.type}) is missing from the new schema (removed or "
                "renamed; stored rows hold it)",
            )
        if f.nullable and not g.nullable:
            raise _refuse(state, f"field {name!r} became non-nullable (stored rows may be null)")
        if pa.types.is_struct(f.type) and pa.types.is_struct(g.type):
            _check_fields(state, f"{name}.", list(f.type), list(g.type))
        elif not widens(f.type, g.type):
            raise _refuse(
                state,
                f"field {name!r} changed type from {f.type} to {g.type}, which is not a widening",
            )
    known = {f.name for f in old}
    for g in new:
        if g.name not in known and not g.nullable:
            raise _refuse(
                state,
                f"new field {path}{g.name!r} ({g.type}) is not nullable: stored rows have no "
                "value for it",
            )


def check_evolution(state: str, old: TableSpec, new: TableSpec) -> bool:
    """Whether ``new`` redeclares ``old`` with another value schema that keeps its rows.

    Returns:
        False if the two store the same rows (nothing to do), True if the value schema
        evolved compatibly (rows are projected on read).

    Raises:
        SchemaEvolutionError: the change is not allowed (see the module docstring).
    """
    old_key, new_key = old.key_schema, new.key_schema
    if old_key is not None and new_key is not None and not old_key.equals(new_key):
        raise _refuse(
            state,
            f"the grouping key changed from ({schema_to_text(old_key)}) to "
            f"({schema_to_text(new_key)}); keys are never converted",
        )
    if (old.user_key_schema is None) != (new.user_key_schema is None) or (
        old.user_key_schema is not None
        and new.user_key_schema is not None
        and not old.user_key_schema.equals(new.user_key_schema)
    ):
        raise _refuse(
            state,
            f"the map's user key changed from ({schema_to_text(old.user_key_schema)}) to "
            f"({schema_to_text(new.user_key_schema)}); user keys are never converted",
        )
    if old.value_schema.equals(new.value_schema):
        return False
    _check_fields(state, "", list(old.value_schema), list(new.value_schema))
    return True


def _project(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """``arr`` (a type ``target`` evolved from) as ``target``."""
    if arr.type.equals(target):
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        assert isinstance(arr, pa.StructArray)
        names = [f.name for f in arr.type]
        children = []
        for f in target:
            if f.name in names:
                children.append(_project(arr.field(names.index(f.name)), f.type))
            else:
                children.append(pa.nulls(len(arr), f.type))
        return pa.StructArray.from_arrays(
            children, fields=list(target), mask=arr.is_null() if arr.null_count else None
        )
    return arr.cast(target)


def project_rows(rows: pa.RecordBatch, spec: TableSpec) -> pa.RecordBatch | None:
    """Rows of an older layout of ``spec``'s table in the spec's row schema (see the module
    docstring); None if ``rows`` do not have such a layout."""
    schema = spec.row_schema()
    if rows.schema.equals(schema):
        return rows
    if rows.schema.names != schema.names:
        return None
    cols = []
    for i, f in enumerate(schema):
        col = rows.column(i)
        if col.type.equals(f.type):
            cols.append(col)
            continue
        if f.name != "value" or not pa.types.is_struct(col.type):
            return None
        try:
            _check_fields(spec.name, "", list(col.type), list(spec.value_schema))
        except SchemaEvolutionError:
            return None
        cols.append(_project(col, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)
