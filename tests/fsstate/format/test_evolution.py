"""Schema evolution: the rules (unit), and stored rows read through an allowed change on real
files (spill, compaction, reopen, catch-up), forbidden changes refused before any write."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig, ValueTable, read_table
from fsstate.errors import SchemaError, SchemaEvolutionError
from fsstate.format.evolution import evolve, project_rows, widens
from fsstate.format.schema import KIND_MAP, KIND_VALUE, TableSpec

KEY = pa.schema([pa.field("k", pa.string())])
UKEY = pa.schema([pa.field("u", pa.int64())])


def _spec(*fields: pa.Field, key: pa.Schema = KEY, kind: str = KIND_VALUE) -> TableSpec:
    ukey = UKEY if kind == KIND_MAP else None
    return TableSpec("s", kind, pa.schema(list(fields)), key, ukey)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("old", "new", "ok"),
    [
        (pa.int8(), pa.int64(), True),
        (pa.int32(), pa.int64(), True),
        (pa.int64(), pa.int32(), False),
        (pa.uint16(), pa.int32(), True),
        (pa.uint32(), pa.int32(), False),
        (pa.int32(), pa.float64(), True),
        (pa.int64(), pa.float64(), False),
        (pa.float32(), pa.float64(), True),
        (pa.float64(), pa.float32(), False),
        (pa.decimal128(10, 2), pa.decimal128(12, 3), True),
        (pa.decimal128(10, 2), pa.decimal128(10, 3), False),
        (pa.string(), pa.large_string(), True),
        (pa.int64(), pa.string(), False),
        (pa.string(), pa.binary(), False),
    ],
)
def test_widening_rules(old: pa.DataType, new: pa.DataType, ok: bool) -> None:
    assert widens(old, new) is ok


def test_allowed_changes() -> None:
    old = _spec(pa.field("count", pa.int32()), pa.field("total", pa.int32()))
    assert evolve("s", old, old) is None
    new = _spec(
        pa.field("total", pa.int64()),  # reordered and widened
        pa.field("count", pa.int64()),
        pa.field("last", pa.string()),  # added, nullable
    )
    evolved = evolve("s", old, new)
    assert evolved is not None and evolved.value_schema.equals(new.value_schema)
    assert evolved.removed_fields is None
    nested_old = _spec(pa.field("p", pa.struct([pa.field("x", pa.int32())])))
    nested_new = _spec(pa.field("p", pa.struct([pa.field("y", pa.string()), ("x", pa.int64())])))
    assert evolve("s", nested_old, nested_new) is not None


def test_a_removed_field_is_allowed_and_remembered_with_its_stored_type() -> None:
    """As Spark's Avro state encoding: a field removed from the value schema is dropped from
    stored rows when read; declaring it again later must read the rows that still hold it."""
    old = _spec(pa.field("count", pa.int32()), pa.field("total", pa.int32()))
    removed = evolve("s", old, _spec(pa.field("total", pa.int32())))
    assert removed is not None and removed.removed_fields is not None
    assert removed.removed_fields.equals(pa.schema([pa.field("count", pa.int32())]))
    # declared again (any type): its values are its own from the store's next seq on
    again = _spec(pa.field("total", pa.int32()), pa.field("count", pa.string()))
    back = evolve("s", removed, again, next_seq=41)
    assert back is not None and back.removed_fields is not None
    entry = back.removed_fields.field("count")
    assert entry.type == pa.int32() and entry.metadata == {b"since_seq": b"41"}
    nested = _spec(pa.field("p", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.int8())])))
    inner = evolve("s", nested, _spec(pa.field("p", pa.struct([pa.field("x", pa.int32())]))))
    assert inner is not None and inner.removed_fields is not None
    assert inner.removed_fields.names == ["p.y"]
    with pytest.raises(SchemaEvolutionError, match=r"nested field 'p\.y' was removed before"):
        evolve("s", inner, nested)


@pytest.mark.parametrize(
    ("new", "message"),
    [
        (
            _spec(pa.field("count", pa.int16()), pa.field("total", pa.int32())),
            "'count' changed type from int32 to int16",
        ),
        (
            _spec(pa.field("count", pa.string()), pa.field("total", pa.int32())),
            "'count' changed type from int32 to string",
        ),
        (
            _spec(
                pa.field("count", pa.int32()),
                pa.field("total", pa.int32()),
                pa.field("extra", pa.int32(), nullable=False),
            ),
            "new field 'extra' .* not nullable",
        ),
        (
            _spec(pa.field("count", pa.int32(), nullable=False), pa.field("total", pa.int32())),
            "'count' became non-nullable",
        ),
        (
            _spec(
                pa.field("count", pa.int32()),
                pa.field("total", pa.int32()),
                key=pa.schema([pa.field("k", pa.int64())]),
            ),
            "grouping key changed",
        ),
    ],
)
def test_forbidden_changes_name_state_and_field(new: TableSpec, message: str) -> None:
    old = _spec(pa.field("count", pa.int32()), pa.field("total", pa.int32()))
    with pytest.raises(SchemaEvolutionError, match=message) as info:
        evolve("s", old, new)
    assert "state 's'" in str(info.value) and "deleteIfExists" in str(info.value)
    assert isinstance(info.value, SchemaError)


def test_map_user_key_change_is_refused() -> None:
    old = _spec(pa.field("c", pa.int64()), kind=KIND_MAP)
    new = TableSpec("s", KIND_MAP, old.value_schema, KEY, pa.schema([("u", pa.string())]))
    with pytest.raises(SchemaEvolutionError, match="user key changed"):
        evolve("s", old, new)


def test_project_rows_keeps_current_layout_and_converts_old() -> None:
    old = _spec(pa.field("count", pa.int32()), pa.field("total", pa.int32()))
    new = _spec(pa.field("total", pa.int64()), pa.field("count", pa.int64()), ("last", pa.string()))
    value = pa.StructArray.from_arrays(
        [pa.array([1, None], pa.int32()), pa.array([10, 20], pa.int32())],
        fields=list(old.value_schema),
        mask=pa.array([False, True]),  # a tombstone row: null value
    )
    rows = pa.RecordBatch.from_arrays(
        [
            pa.StructArray.from_arrays([pa.array(["a", "b"])], fields=list(KEY)),
            value,
            pa.array([1, 2], pa.int64()),
            pa.array([0, 1], pa.int8()),
            pa.nulls(2, pa.int64()),
        ],
        schema=old.row_schema(),
    )
    assert project_rows(rows, old) is rows
    got = project_rows(rows, new)
    assert got is not None and got.schema.equals(new.row_schema())
    assert got.column("value").to_pylist() == [{"total": 10, "count": 1, "last": None}, None]
    narrowed = _spec(pa.field("count", pa.int8()), pa.field("total", pa.int32()))
    assert project_rows(rows, narrowed) is None


V1 = pa.schema([pa.field("count", pa.int32()), pa.field("total", pa.int32())])
V2 = pa.schema(
    [pa.field("total", pa.int64()), pa.field("count", pa.int64()), pa.field("last", pa.string())]
)
L1 = pa.schema([pa.field("e", pa.int32())])
L2 = pa.schema([pa.field("tag", pa.string()), pa.field("e", pa.float64())])
M1 = pa.schema([pa.field("amount", pa.decimal128(8, 2))])
M2 = pa.schema([pa.field("amount", pa.decimal128(12, 3)), pa.field("note", pa.string())])
CFG = StoreConfig(retain_versions=20)


def _declare(s: PartitionStore, v: pa.Schema, lst: pa.Schema, m: pa.Schema) -> tuple:  # type: ignore[type-arg]
    return (
        s.value_table("v", v, KEY),
        s.list_table("l", lst, KEY, ttl_ms=10_000_000),
        s.map_table("m", UKEY, m, KEY),
    )


def test_old_rows_read_through_an_allowed_change(tmp_path: Path) -> None:
    root = str(tmp_path)
    s = PartitionStore.open(root, "op", 0, config=CFG)
    s.set_time(1000)
    v, lst, m = _declare(s, V1, L1, M1)
    for i in range(50):
        k = (f"k{i}",)
        v.update(k, (i, 10 * i))
        lst.append(k, (i,))
        m.update(k, (i,), (Decimal(f"{i}.25"),))
    s.commit(0)
    s.spill()  # old rows in Parquet runs only
    for i in range(0, 50, 2):
        v.update((f"k{i}",), (i + 1, 10 * i + 1))
        lst.append((f"k{i}",), (100 + i,))
    s.commit(1)
    s.close()

    s = PartitionStore.open(root, "op", 0, 1, config=CFG)
    s.set_time(2000)
    v, lst, m = _declare(s, V2, L2, M2)
    assert v.get(("k1",)) == (10, 1, None)  # fields by name, widened, added null
    assert v.get(("k2",)) == (21, 3, None)
    assert lst.get(("k2",)) == [(None, 2.0), (None, 102.0)]
    assert m.get(("k3",), (3,)) == (Decimal("3.250"), None)
    many = v.get_many(pa.table({"k": ["k5", "k6", "zz"]}))
    assert many.column("total").to_pylist() == [50, 61, None]
    assert v.scan().num_rows == 50
    v.update(("k7",), (7_000_000_000, 8, "new"))  # the widened range
    lst.append(("k7",), ("t", 0.5))
    m.update(("k7",), (8,), (Decimal("1.125"), "n"))
    s.commit(2)
    s.compact(force=True)  # merged files hold old and new rows in the new layout
    s.commit(3)
    s.close()

    s = PartitionStore.open(root, "op", 0, 3, config=CFG)
    s.set_time(3000)
    v, lst, m = _declare(s, V2, L2, M2)
    assert v.get(("k7",)) == (7_000_000_000, 8, "new")
    assert v.get(("k9",)) == (90, 9, None)
    assert lst.get(("k7",)) == [(None, 7.0), ("t", 0.5)]
    assert m.get(("k7",), (8,)) == (Decimal("1.125"), "n")
    assert m.get(("k7",), (7,)) == (Decimal("7.250"), None)
    s.close()
    # version 1 still reads in its own layout; the newest in the new one
    assert read_table(root, "op", 0, "v", 1).schema.names == ["k", "count", "total"]
    assert read_table(root, "op", 0, "v", 3).schema.names == ["k", "total", "count", "last"]


def test_redeclaring_a_loaded_table_reloads_it(tmp_path: Path) -> None:
    s = PartitionStore.open(str(tmp_path), "op", 0, config=CFG)
    v = s.value_table("v", V1, KEY)
    v.update(("a",), (1, 2))
    with pytest.raises(SchemaEvolutionError, match="uncommitted changes"):
        s.value_table("v", V2, KEY)
    s.commit(0)
    assert v.get(("a",)) == (1, 2)  # cached and hot
    v2 = s.value_table("v", V2, KEY)
    assert v2.get(("a",)) == (2, 1, None)
    s.commit(1)
    s.close()


@pytest.mark.parametrize(
    "value",
    [
        pa.schema([pa.field("count", pa.int16()), pa.field("total", pa.int32())]),  # narrowed
        pa.schema([pa.field("count", pa.string()), pa.field("total", pa.int32())]),  # changed
        pa.schema([pa.field("count", pa.int32(), nullable=False), pa.field("total", pa.int32())]),
    ],
)
def test_forbidden_change_writes_nothing(tmp_path: Path, value: pa.Schema) -> None:
    root = str(tmp_path)
    s = PartitionStore.open(root, "op", 0, config=CFG)
    s.value_table("v", V1, KEY).update(("a",), (1, 2))
    s.commit(0)
    s.close()
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    s = PartitionStore.open(root, "op", 0, 0, config=CFG)
    with pytest.raises(SchemaEvolutionError, match="state 'v'"):
        s.value_table("v", value, KEY)
    with pytest.raises(SchemaEvolutionError, match="grouping key"):
        s.value_table("v", V1, pa.schema([pa.field("k", pa.int64())]))
    s.close()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == files
    assert PartitionStore.committed_versions(root, "op", 0) == [0]


def test_a_removed_field_never_comes_back(tmp_path: Path) -> None:
    """Removing ``count`` keeps every key's other fields across a restart; declaring ``count``
    again (of any type) reads null in every row written before that, whether or not a
    compaction rewrote the rows meanwhile: the removed values never come back."""
    only_total = pa.schema([pa.field("total", pa.int32())])
    back = pa.schema([pa.field("total", pa.int32()), pa.field("count", pa.int64())])
    as_text = pa.schema([pa.field("total", pa.int32()), pa.field("count", pa.string())])
    for compact, again in ((False, back), (True, back), (False, as_text)):
        root = str(tmp_path / f"{compact}-{again.field('count').type}")
        s = PartitionStore.open(root, "op", 0, config=CFG)
        s.value_table("v", V1, KEY).update(("a",), (1, 2))
        s.commit(0)
        s.close()
        s = PartitionStore.open(root, "op", 0, 0, config=CFG)
        t = s.value_table("v", only_total, KEY)
        assert t.get(("a",)) == (2,)
        t.update(("b",), (7,))
        if compact:
            s.compact(force=True)
        s.commit(1)
        s.close()
        s = PartitionStore.open(root, "op", 0, 1, config=CFG)
        t = s.value_table("v", again, KEY)
        assert t.get(("a",)) == (2, None) and t.get(("b",)) == (7, None)
        t.update(("c",), (3, 9 if again is back else "9"))
        s.compact(force=True)
        s.commit(2)
        s.close()
        s = PartitionStore.open(root, "op", 0, 2, config=CFG)
        t = s.value_table("v", again, KEY)
        assert t.get(("a",)) == (2, None)
        assert t.get(("c",)) == (3, 9 if again is back else "9")
        s.close()


def _reopen(root: str, version: int, value: pa.Schema) -> tuple[PartitionStore, ValueTable]:
    s = PartitionStore.open(root, "op", 0, version, config=CFG)
    return s, s.value_table("v", value, KEY)


def test_a_renamed_field_is_a_removal_and_an_addition(tmp_path: Path) -> None:
    """``count`` declared as ``n``: accepted (Avro's rule, fields match by name), the old
    values are gone and ``n`` reads null in every stored row; ``count`` declared again later
    reads null too. A non-nullable new name is refused, as any added non-nullable field."""
    root = str(tmp_path)
    s, t = _reopen(root, None, V1)  # type: ignore[arg-type]
    t.update(("a",), (1, 10))
    s.commit(0)
    s.close()
    renamed = pa.schema([pa.field("n", pa.int32()), pa.field("total", pa.int32())])
    s, t = _reopen(root, 0, renamed)
    assert t.get(("a",)) == (None, 10)  # the renamed field's values are gone
    assert [f.name for f in t.spec.removed_fields or []] == ["count"]
    s.commit(1)
    s.close()
    s, t = _reopen(root, 1, V1)
    assert t.get(("a",)) == (None, 10)  # and never come back under the old name
    s.close()
    strict = pa.schema([pa.field("n", pa.int32(), nullable=False), pa.field("total", pa.int32())])
    with pytest.raises(SchemaEvolutionError, match="new field 'n'"):
        _reopen(root, 0, strict)


def test_a_rename_keeps_values_copied_while_both_fields_are_declared(tmp_path: Path) -> None:
    """The way to keep values across a rename (docs/evolution.md): a version declaring both
    fields copies ``count`` into ``n`` for each key it writes; the next version drops
    ``count``. Keys written meanwhile keep their value; a key never written meanwhile still
    loses it, so the old field goes only once every key was written (or expired)."""
    root = str(tmp_path)
    s, t = _reopen(root, None, V1)  # type: ignore[arg-type]
    for k, count in (("a", 1), ("b", 2)):
        t.update((k,), (count, 10 * count))
    s.commit(0)
    s.close()
    both = pa.schema([*V1, pa.field("n", pa.int32())])
    s, t = _reopen(root, 0, both)
    count, total, n = t.get(("a",))  # type: ignore[misc]
    assert n is None
    t.update(("a",), (count, total + 1, n if n is not None else count))  # copied when written
    s.commit(1)
    s.close()
    only_new = pa.schema([pa.field("total", pa.int32()), pa.field("n", pa.int32())])
    s, t = _reopen(root, 1, only_new)
    assert t.get(("a",)) == (11, 1)  # written by the version that copied: kept
    assert t.get(("b",)) == (20, None)  # never written meanwhile: its count is gone
    s.compact(force=True)
    s.commit(2)
    s.close()
    assert read_table(root, "op", 0, "v", 2).to_pylist() == [
        {"k": "a", "total": 11, "n": 1},
        {"k": "b", "total": 20, "n": None},
    ]
