"""What changed in a state table between versions: a diff of two snapshots and a change feed.

The unit of change is what a read distinguishes: a grouping key (value state), a (key, user
key) entry (map state), a list element (key and the sequence number that appended it, so an
element removed and appended again is a delete and an update). Between two snapshots ``a``
and ``b`` of one table:

* ``update``: the unit is live in ``b`` and absent from ``a``, or its value differs;
* ``delete``: the unit is live in ``a`` and not in ``b`` (deleted, cleared, or expired by
  TTL at ``b``'s clock); its value columns are null, except for a list element, whose value
  says which element went (with ``_seq`` when asked for).

The change feed from ``start`` to ``end`` is, for each version ``v`` in that range, the diff
of ``v - 1`` and ``v`` tagged ``batch_id = v`` (as Spark's ``readChangeFeed``): so the feed
between two versions replays one snapshot into the other. A version whose predecessor was
never committed (the first one) diffs against the empty table.

Columns: ``batch_id`` (change feed only), ``change_type`` (``update`` / ``delete``), then the
snapshot's columns (:mod:`fsstate.inspect.snapshot`); rows sorted by batch id, then unit.

Invariants:

* Applying a diff's rows to ``a`` (put updates, remove deletes) gives ``b`` exactly.
* A diff compares values, not writes: re-putting an equal value is no change.
* Read-only; each version in the range is read once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError, VersionNotFoundError
from fsstate.format.schema import KIND_LIST, KIND_MAP, SEQ, TableSpec
from fsstate.inspect.catalog import as_fileio, current_branch
from fsstate.inspect.snapshot import Snapshot, read_schema
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import list_versions
from fsstate.store import store_dir_for
from fsstate.tables.resolve import null_safe

CHANGE_TYPE = "change_type"
BATCH_ID = "batch_id"
UPDATE = "update"
DELETE = "delete"


def unit_width(spec: TableSpec) -> int:
    """How many leading columns of a snapshot identify a unit (list state: plus ``_seq``)."""
    assert spec.key_schema is not None
    width = len(spec.key_schema)
    if spec.kind == KIND_MAP and spec.user_key_schema is not None:
        width += len(spec.user_key_schema)
    return width


def _unit_cols(spec: TableSpec, table: pa.Table) -> list[pa.Array]:
    cols = [table.column(i).combine_chunks() for i in range(unit_width(spec))]
    if spec.kind == KIND_LIST:
        cols.append(table.column(SEQ).combine_chunks())
    return cols


def _value_names(spec: TableSpec, schema: pa.Schema) -> list[str]:
    skip = unit_width(spec)
    return [n for n in schema.names[skip:] if n != SEQ]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _equal_values(a: pa.Table, b: pa.Table, names: list[str]) -> np.ndarray[Any, Any]:
    """Row-wise: every column in ``names`` equal in ``a`` and ``b`` (null equals null)."""
    eq = np.ones(a.num_rows, dtype=bool)
    for n in names:
        x, y = a.column(n).combine_chunks(), b.column(n).combine_chunks()
        t = x.type
        if pa.types.is_nested(t) or pa.types.is_dictionary(t):
            same = np.array([_same(p, q) for p, q in zip(x.to_pylist(), y.to_pylist())], bool)
        else:
            both_null = pc.and_(pc.is_null(x), pc.is_null(y))
            same_arr = pc.or_kleene(pc.fill_null(pc.equal(x, y), False), both_null)
            if pa.types.is_floating(t):
                nan = pc.and_(pc.fill_null(pc.is_nan(x), False), pc.fill_null(pc.is_nan(y), False))
                same_arr = pc.or_(same_arr, nan)
            same = same_arr.to_numpy(zero_copy_only=False)
        eq &= same
    return eq


def diff_tables(spec: TableSpec, before: pa.Table, after: pa.Table) -> pa.Table:
    """The changes that turn snapshot ``before`` into ``after`` (see the module docstring).

    Both tables are snapshots of a table of ``spec`` with the same columns; list state needs
    the ``_seq`` column. Returns ``change_type`` then ``after``'s columns.
    """
    schema = after.schema
    if spec.key_schema is None or (before.num_rows == 0 and after.num_rows == 0):
        return _with_type(schema.empty_table(), [])
    before = before.cast(schema)
    ucols_a, ucols_b = _unit_cols(spec, before), _unit_cols(spec, after)
    left, right = null_safe([ucols_a, ucols_b])
    names = [f"j{i}" for i in range(len(left))]
    ta = pa.Table.from_arrays([*left, pa.array(np.arange(before.num_rows))], [*names, "_a"])
    tb = pa.Table.from_arrays([*right, pa.array(np.arange(after.num_rows))], [*names, "_b"])
    joined = ta.join(tb, keys=names, join_type="full outer")
    ia = joined.column("_a").combine_chunks()
    ib = joined.column("_b").combine_chunks()
    only_a = pc.is_null(ib).to_numpy(zero_copy_only=False)
    only_b = pc.is_null(ia).to_numpy(zero_copy_only=False)
    both = ~(only_a | only_b)
    pos_a = pc.fill_null(ia, -1).to_numpy(zero_copy_only=False)
    pos_b = pc.fill_null(ib, -1).to_numpy(zero_copy_only=False)
    ba, bb = pos_a[both], pos_b[both]
    rows_a, rows_b = before.take(pa.array(ba)), after.take(pa.array(bb))
    changed = ~_equal_values(rows_a, rows_b, _value_names(spec, schema))
    updates = np.concatenate([pos_b[only_b], bb[changed]]).astype(np.int64)
    deletes = pos_a[only_a].astype(np.int64)
    up = after.take(pa.array(updates))
    gone = before.take(pa.array(deletes))
    if gone.num_rows and spec.kind != KIND_LIST:  # a delete carries its unit, not its value
        cols = []
        values = set(_value_names(spec, schema))
        for f in schema:
            col = gone.column(f.name)
            cols.append(pa.nulls(gone.num_rows, f.type) if f.name in values else col)
        gone = pa.Table.from_arrays(cols, schema=schema)
    out = _with_type(
        pa.concat_tables([up, gone]), [UPDATE] * up.num_rows + [DELETE] * gone.num_rows
    )
    if not out.num_rows:
        return out
    sort_names = [schema.names[i] for i in range(unit_width(spec))]
    if spec.kind == KIND_LIST:
        sort_names.append(SEQ)
    order = pc.sort_indices(out, sort_keys=[(n, "ascending") for n in sort_names])
    return out.take(order)


def _with_type(table: pa.Table, types: list[str]) -> pa.Table:
    return table.add_column(0, pa.field(CHANGE_TYPE, pa.string()), pa.array(types, pa.string()))


def _span(versions: list[int]) -> str:
    return f"{versions[0]}..{versions[-1]}" if versions else "none"


def _read(
    fileio: FileIO,
    operator: str,
    partition: int,
    name: str,
    version: int,
    with_expiry: bool,
    layout: str = "",
    branch: str = "",
) -> tuple[TableSpec | None, pa.Table | None]:
    """Spec and rows (with ``_seq``) of a table at a version; (None, None) if it has none."""
    with Snapshot(fileio, operator, partition, version, layout, branch) as snap:
        if name not in snap.manifest.tables:
            return None, None
        return snap.spec(name), snap.read(name, with_expiry=with_expiry, with_seq=True)


def change_schema(
    spec: TableSpec, *, with_expiry: bool = False, with_seq: bool = False
) -> pa.Schema:
    """Columns of :func:`read_changes` for a table of ``spec``."""
    base = read_schema(spec, with_expiry=with_expiry, with_seq=with_seq)
    head = [pa.field(BATCH_ID, pa.int64()), pa.field(CHANGE_TYPE, pa.string())]
    return pa.schema([*head, *base])


def read_changes(
    uri: str | Location | FileIO,
    operator: str,
    partition: int,
    name: str,
    start_version: int,
    end_version: int | None = None,
    *,
    with_expiry: bool = False,
    with_seq: bool = False,
    layout: str = "",
    branch: str | None = None,
) -> pa.Table:
    """The change feed of table ``name`` for versions ``start_version .. end_version``.

    A feed reads one layout generation (``layout``, ``""`` for generation 0): the first version
    of a rescaled generation has no parent, so its rows read as inserts.

    Args:
        uri: the store's root (as for :func:`fsstate.inspect.snapshot.read_table`).
        operator: operator (store) name.
        partition: partition id.
        name: state (table) name.
        start_version: first version whose changes are returned (its predecessor must be
            retained, unless it is the store's first version).
        end_version: last version (inclusive; default the newest).
        with_expiry: add ``_expires_at_ms``.
        with_seq: add ``_seq``.
        layout: the layout generation directory of the store.
        branch: the lineage read (``""``: the trunk; None: the store's lineage committed
            last). A branch's first version has no parent there: a feed starting at it reads
            its rows as inserts.

    Raises:
        ConfigError: the range is empty or reversed.
        VersionNotFoundError: a version of the range (or the one before it) is not retained.
    """
    fileio = as_fileio(uri)
    if branch is None:
        branch = current_branch(fileio, operator, partition, layout)
    versions = list_versions(fileio, store_dir_for(operator, partition, layout), branch)
    end = end_version if end_version is not None else (versions[-1] if versions else -1)
    if start_version < 0 or end < start_version:
        raise ConfigError(
            f"change feed of state {name!r}: versions {start_version}..{end} are not a range; "
            "give start <= end, both committed"
        )
    keep_seq = with_seq
    where = fileio.describe(store_dir_for(operator, partition, layout))
    missing = [v for v in range(start_version, end + 1) if v not in versions]
    if missing:
        raise VersionNotFoundError(
            f"change feed of state {name!r}: version {missing[0]} of store {where} is not "
            f"committed or no longer retained (retained: {_span(versions)}); pick a range "
            "inside it"
        )
    prev: pa.Table | None = None
    prev_spec: TableSpec | None = None
    first = start_version - 1
    if first in versions:
        prev_spec, prev = _read(
            fileio, operator, partition, name, first, with_expiry, layout, branch
        )
    else:
        with Snapshot(fileio, operator, partition, start_version, layout, branch) as snap:
            if snap.manifest.parent_version is not None:  # not the first version: lost
                raise VersionNotFoundError(
                    f"change feed of state {name!r} from version {start_version} needs "
                    f"version {first} of store {where}, which is no longer retained "
                    f"(retained: {_span(versions)}); start at {versions[0] + 1} or later"
                )
    parts: list[pa.Table] = []
    for v in range(start_version, end + 1):
        spec, cur = _read(fileio, operator, partition, name, v, with_expiry, layout, branch)
        d: pa.Table | None = None
        if spec is not None and cur is not None:
            same = prev is not None and prev_spec is not None and prev_spec.same_shape(spec)
            d = diff_tables(spec, prev if same else cur.schema.empty_table(), cur)
        elif prev_spec is not None and prev is not None:  # the table was dropped
            d = diff_tables(prev_spec, prev, prev.schema.empty_table())
        if d is not None:
            if not keep_seq and SEQ in d.column_names:
                d = d.drop_columns([SEQ])
            parts.append(d.add_column(0, BATCH_ID, pa.array([v] * d.num_rows, pa.int64())))
        prev, prev_spec = cur, spec
    if not parts:
        if prev_spec is None:
            return pa.schema([(BATCH_ID, pa.int64()), (CHANGE_TYPE, pa.string())]).empty_table()
        return change_schema(prev_spec, with_expiry=with_expiry, with_seq=with_seq).empty_table()
    return pa.concat_tables(parts, promote_options="permissive")
