"""Bad input gets a typed error from one root, naming the object, with nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fsstate import FsStateError, PartitionStore
from fsstate.config import parse_bytes
from fsstate.errors import (
    ConfigError,
    InvalidTtlError,
    KeyArityError,
    SchemaError,
    SchemaEvolutionError,
    StateKindError,
    UnknownStateError,
    VersionNotFoundError,
)
from tests.support.engine import KEY, UKEY, VAL

Factory = Callable[..., PartitionStore]


def _unchanged(store: PartitionStore, seq: int) -> None:
    assert store.next_seq == seq, "a rejected call consumed a sequence number"
    assert not store.dirty, "a rejected call left changes behind"


@pytest.mark.parametrize(
    "bad",
    [("x",), (1,), (1, 2), (1, "a", 3), [1], "1a", None, (1.5, "a"), (2**63, "a")],
)
def test_value_not_matching_schema(make_store: Factory, bad: object) -> None:
    s = make_store()
    t = s.value_table("counts", VAL, KEY)
    seq = s.next_seq
    with pytest.raises(SchemaError, match="counts") as info:
        t.update(("a",), bad)  # type: ignore[arg-type]
    assert isinstance(info.value, FsStateError)
    _unchanged(s, seq)
    assert t.get(("a",)) is None


def test_lenient_but_exact_normalization(make_store: Factory) -> None:
    s = make_store()
    t = s.value_table("counts", VAL, KEY)
    t.update(("a",), (np.int64(3), "x"))
    t.update(("b",), [4, "y"])  # type: ignore[arg-type]
    got = t.get(("a",))
    assert got == (3, "x") and type(got[0]) is int
    assert t.get(("b",)) == (4, "y")


def test_wrong_key_arity(make_store: Factory) -> None:
    s = make_store()
    t = s.value_table("counts", VAL, KEY)
    m = s.map_table("m", UKEY, VAL, KEY)
    seq = s.next_seq
    with pytest.raises(KeyArityError, match="grouping key"):
        t.update(("a", "b"), (1, "x"))
    with pytest.raises(KeyArityError, match="user key"):
        m.update(("a",), ("i", "j"), (1, "x"))
    with pytest.raises(KeyArityError):
        t.get(("a", "b"))
    with pytest.raises(SchemaError, match="grouping key"):
        t.update((5,), (1, "x"))
    _unchanged(s, seq)


@pytest.mark.parametrize("ttl", [-1, 0, 1.5, "10", True])
def test_negative_or_bad_ttl(make_store: Factory, ttl: object) -> None:
    s = make_store()
    with pytest.raises(InvalidTtlError, match="ttl"):
        s.value_table("v", VAL, KEY, ttl_ms=ttl)  # type: ignore[arg-type]
    assert s.table_names() == []


def test_unknown_state(make_store: Factory) -> None:
    s = make_store()
    s.value_table("known", VAL, KEY)
    with pytest.raises(UnknownStateError, match=r"'missing'.*known"):
        s.table("missing")
    with pytest.raises(KeyError):
        s.table("missing")


def test_redeclare_with_other_schema_or_kind(make_store: Factory) -> None:
    s = make_store()
    s.value_table("v", VAL, KEY)
    with pytest.raises(
        SchemaEvolutionError, match="'v': field 'count' changed type from int64 to int32"
    ):
        s.value_table("v", pa.schema([pa.field("count", pa.int32()), ("label", pa.string())]), KEY)
    with pytest.raises(StateKindError, match="value state"):
        s.list_table("v", VAL, KEY)


def test_missing_version(make_store: Factory, tmp_path: Path) -> None:
    s = make_store()
    s.value_table("v", VAL, KEY).update(("a",), (1, "x"))
    s.commit(0)
    with pytest.raises(VersionNotFoundError, match=r"version 5 .*retained versions: 0"):
        PartitionStore.open(str(tmp_path / "state"), "op", 0, 5)


def test_batched_schema_mismatch(make_store: Factory) -> None:
    s = make_store()
    t = s.value_table("v", VAL, KEY)
    seq = s.next_seq
    with pytest.raises(SchemaError, match="column"):
        t.put_many(pa.table({"user": ["a"]}), pa.table({"count": ["nope"], "label": ["x"]}))
    with pytest.raises(SchemaError, match="2 column"):
        t.put_many(pa.table({"user": ["a"], "x": [1]}), pa.table({"count": [1], "label": ["x"]}))
    _unchanged(s, seq)


@pytest.mark.parametrize("value", ["lots", "-5MiB", 0, "12XB", 3.5, True])
def test_bad_memory_limit(value: object) -> None:
    with pytest.raises(ConfigError, match="memory_limit"):
        parse_bytes(value)  # type: ignore[arg-type]


def test_sizes_parse() -> None:
    assert parse_bytes("256MiB") == 256 * 1024**2
    assert parse_bytes("1.5GB") == 1_500_000_000
    assert parse_bytes(4096) == 4096
