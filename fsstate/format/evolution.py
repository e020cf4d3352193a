"""Schema evolution: which changes of a state variable's declaration keep its stored rows.

A store records each table's spec in its manifests; run files keep the row layout they were
written with (:mod:`fsstate.format.schema`). When a table is declared again (after a restart,
or by a new version of a processor) with another **value** schema, :func:`check_evolution`
decides:

* allowed: a field removed (stored rows drop it when read; as Spark's Avro state encoding
  reads a removed field), recorded in the spec's ``removed_fields`` with its stored type; a
  removed top-level field declared again, of any type: it reads null in every row written
  before it was declared again (the ``since_seq`` of its ``removed_fields`` entry), so values
  of the removed field never come back, whether or not a compaction rewrote them; a
  field added as nullable (stored rows read it as null); a numeric type widened
  (``int8 -> int16 -> int32 -> int64``, the unsigned ints likewise and into a wider signed
  int, ``int8/16/32 -> float64``, ``float16 -> float32 -> float64``, ``decimal(p, s) ->
  decimal(p', s')`` with ``s' >= s`` and ``p' - s' >= p - s``), ``string -> large_string``,
  ``binary -> large_binary``; fields reordered (matched by name); a nested struct evolving by
  the same rules; a non-nullable field becoming nullable;
* refused with :class:`fsstate.errors.SchemaEvolutionError` (naming the state, the field, the
  old and new types and what to do), before anything is written: a narrowed or otherwise
  changed type (as Avro refuses a long read as an int), a removed nested field declared again,
  an added non-nullable field, a nullable
  field becoming non-nullable, any change of the grouping-key schema or of a map's user-key
  schema.

After an allowed change the table's spec is the new one (:func:`evolve`): new rows are written
with it, and rows of older files are projected to it where files are decoded
(:func:`project_rows`, called by :mod:`fsstate.storage.runfile`): fields by name, widened by a
cast, added ones null, removed ones dropped. A compaction rewrites them in the new layout.

Invariants:

* :func:`evolve` has no side effect: a refused change writes nothing.
* ``removed_fields`` only grows (a field declared again keeps its entry, with the sequence
  number from which its values are its own); so every stored layout of the table projects to
  the current spec.
* :func:`project_rows` returns rows in exactly the spec's row schema, or None when the rows'
  layout is not one the spec evolved from (the caller reports a damaged file); rows already in
  the spec's layout are returned as they are (no copy), except that a removed field declared
  again reads null in rows older than its declaration: callers project whenever
  :func:`projects` says so, not only when the layout differs.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import SchemaEvolutionError
from fsstate.format.schema import SEQ, TableSpec, schema_to_text

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


def _check_fields(
    state: str,
    path: str,
    old: list[pa.Field],
    new: list[pa.Field],
    removed: dict[str, pa.DataType] | None = None,
) -> list[pa.Field]:
    """Check that rows of the ``old`` fields read as the ``new`` ones; returns the fields
    removed (their paths as names). ``removed`` maps the paths removed before to their stored
    types: a new field under such a path must read them."""
    by_name = {f.name: f for f in new}
    gone: list[pa.Field] = []
    for f in old:
        name = f"{path}{f.name}"
        g = by_name.get(f.name)
        if g is None:
            gone.append(pa.field(name, f.type))
            continue
        if f.nullable and not g.nullable:
            raise _refuse(state, f"field {name!r} became non-nullable (stored rows may be null)")
        if pa.types.is_struct(f.type) and pa.types.is_struct(g.type):
            gone += _check_fields(state, f"{name}.", list(f.type), list(g.type), removed)
        elif not widens(f.type, g.type):
            raise _refuse(
                state,
                f"field {name!r} changed type from {f.type} to {g.type}, which is not a widening",
            )
    known = {f.name for f in old}
    for g in new:
        name = f"{path}{g.name}"
        if g.name in known:
            continue
        if not g.nullable:
            raise _refuse(
                state,
                f"new field {name!r} ({g.type}) is not nullable: stored rows have no value for it",
            )
        if path and name in (removed or {}):
            raise _refuse(
                state,
                f"nested field {name!r} was removed before and is declared again; use another "
                "field name",
            )
    return gone


def _removed(spec: TableSpec) -> dict[str, pa.DataType]:
    """Removed fields not declared again: path -> stored type."""
    fields = spec.removed_fields or []
    return {f.name: f.type for f in fields if _since_seq(f) is None}


def evolve(state: str, old: TableSpec, new: TableSpec, next_seq: int = 0) -> TableSpec | None:
    """The spec of a table stored as ``old`` and declared again as ``new``.

    Args:
        state: the state's name (for messages).
        old: the stored spec.
        new: the declaration.
        next_seq: the store's next sequence number: a removed field declared again holds its
            values only in rows from this one on.

    Returns:
        None if the two store the same rows (nothing to do), else the evolved spec: ``new``
        with ``old``'s grouping key if ``new`` has none, and the removed fields recorded.

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
        return None
    before = {f.name: f for f in (old.removed_fields or [])}
    gone = _check_fields(state, "", list(old.value_schema), list(new.value_schema), _removed(old))
    entries = dict(before)
    for f in gone:
        entries[f.name] = pa.field(f.name, f.type)  # removed now: no since_seq
    for g in new.value_schema:
        was = before.get(g.name)
        if was is not None and _since_seq(was) is None and g.name not in old.value_schema.names:
            entries[g.name] = was.with_metadata({SINCE_SEQ: str(next_seq)})  # declared again
    fields = [entries[n] for n in sorted(entries)]
    return dataclasses.replace(
        new,
        key_schema=new.key_schema or old.key_schema,
        removed_fields=pa.schema(fields) if fields else None,
    )


SINCE_SEQ = "since_seq"  # metadata of a removed field declared again: its first own row's seq


def _since_seq(f: pa.Field) -> int | None:
    meta = f.metadata or {}
    raw = meta.get(SINCE_SEQ.encode())
    return None if raw is None else int(raw)


def _readded(spec: TableSpec) -> dict[str, int]:
    """Top-level removed fields declared again: name -> the seq their own values start at."""
    out = {}
    for f in spec.removed_fields or []:
        since = _since_seq(f)
        if since is not None and f.name in spec.value_schema.names:
            out[f.name] = since
    return out


def projects(schema: pa.Schema, spec: TableSpec) -> bool:
    """Whether rows stored as ``schema`` read differently under ``spec``: another layout, or a
    removed field declared again (its older values read null, even in the same layout)."""
    return not schema.equals(spec.row_schema()) or bool(
        spec.removed_fields is not None and _readded(spec)
    )


def same_rows(a: TableSpec, b: TableSpec) -> bool:
    """Whether rows projected to ``a`` are exactly the rows projected to ``b``."""
    return a.value_schema.equals(b.value_schema) and _readded(a) == _readded(b)


def _paths(path: str, fields: list[pa.Field]) -> list[str]:
    """The paths of ``fields`` and of their nested fields."""
    out = []
    for f in fields:
        out.append(f"{path}{f.name}")
        if pa.types.is_struct(f.type):
            out += _paths(f"{path}{f.name}.", list(f.type))
    return out


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
    readded = _readded(spec) if spec.removed_fields is not None else {}
    if readded:
        rows = _without_old_values(rows, spec, readded)
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
            _check_fields(spec.name, "", list(col.type), list(spec.value_schema), _removed(spec))
        except SchemaEvolutionError:
            return None
        cols.append(_project(col, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _without_old_values(
    rows: pa.RecordBatch, spec: TableSpec, readded: dict[str, int]
) -> pa.RecordBatch:
    """``rows`` with every field declared again null in the rows written before that (their
    values are the removed field's), in the field's current type."""
    names = rows.schema.names
    if "value" not in names or SEQ not in names:
        return rows
    value = rows.column(names.index("value"))
    if not pa.types.is_struct(value.type):
        return rows
    assert isinstance(value, pa.StructArray)
    if all(f.name not in readded for f in value.type):
        return rows
    seq = rows.column(names.index(SEQ))
    target = {f.name: f.type for f in spec.value_schema}
    children = []
    for f, child in zip(value.type, value.flatten(), strict=True):
        since = readded.get(f.name)
        if since is not None:
            own = pc.greater_equal(seq, since)
            typed = child.cast(target[f.name]) if widens(f.type, target[f.name]) else None
            nulls = pa.nulls(len(child), target[f.name])
            child = nulls if typed is None else pc.if_else(own, typed, nulls)
            f = pa.field(f.name, target[f.name])
        children.append((f, child))
    struct = pa.StructArray.from_arrays(
        [c for _, c in children],
        fields=[f for f, _ in children],
        mask=value.is_null() if value.null_count else None,
    )
    cols = list(rows.columns)
    cols[names.index("value")] = struct
    fields = list(rows.schema)
    fields[names.index("value")] = pa.field(
        "value", struct.type, rows.schema.field("value").nullable
    )
    return pa.RecordBatch.from_arrays(cols, schema=pa.schema(fields))
