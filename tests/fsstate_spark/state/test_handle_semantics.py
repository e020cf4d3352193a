"""Spark's handle semantics that processors rely on, on every store a handle can have (the
engine's partition store, under ``tiered()`` and the flow driver, and the in-memory one).

* A variable dropped with ``deleteIfExists`` raises on its old state objects what Spark's client
  raises (a ``PySparkRuntimeError`` whose message starts as Spark's), until it is declared again;
  then the old objects act as the new one.
* A map's one-field user key may be given as a bare value (Spark's client accepts it); a user
  key of the wrong arity is a clear :class:`fsstate.errors.SchemaError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkRuntimeError

from fsstate import PartitionStore
from fsstate.errors import SchemaError
from fsstate.interfaces import KeyedStore
from fsstate_spark.state.handles import DeletedStateError, TieredHandle
from fsstate_spark.state.keys import KeyBinding
from fsstate_spark.tiered.transient import TransientStore

KEY = pa.schema([("k", pa.string())])


@pytest.fixture(params=["engine", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyedStore]:
    s: KeyedStore = (
        PartitionStore.open(str(tmp_path), "op", 0)
        if request.param == "engine"
        else TransientStore(per_key=False)
    )
    yield s
    s.close()


def _handle(store: KeyedStore) -> TieredHandle:
    handle = TieredHandle(None, store, KeyBinding(), key_schema=KEY, timers_allowed=False)
    handle.binding.key = ("a",)
    return handle


def test_a_deleted_variable_raises_sparks_error_until_declared_again(store: KeyedStore) -> None:
    handle = _handle(store)
    value = handle.getValueState("tempState", "value INT")
    listed = handle.getListState("tempList", "value INT")
    mapped = handle.getMapState("tempMap", "k STRING", "value INT")
    value.update((1,))
    listed.appendValue((2,))
    mapped.updateValue(("x",), (3,))
    for name in ("tempState", "tempList", "tempMap"):
        handle.deleteIfExists(name)

    with pytest.raises(PySparkRuntimeError, match=r"^Error checking value state exists"):
        value.exists()
    with pytest.raises(DeletedStateError, match="Error getting value state"):
        value.get()
    with pytest.raises(PySparkRuntimeError, match="Error updating value state"):
        value.update((5,))
    with pytest.raises(PySparkRuntimeError, match="Error updating value state"):
        listed.appendValue((5,))
    with pytest.raises(PySparkRuntimeError, match="Error checking map state exists"):
        mapped.exists()
    with pytest.raises(PySparkRuntimeError, match="Error getting value"):
        mapped.getValue(("x",))
    # other variables are untouched
    other = handle.getValueState("other", "value INT")
    other.update((7,))
    assert other.get() == (7,)

    again = handle.getValueState("tempState", "value INT")
    assert not again.exists() and not value.exists()  # the data went with the variable
    value.update((9,))  # the old object acts as the new declaration
    assert again.get() == (9,)
    with pytest.raises(PySparkRuntimeError):
        listed.exists()  # not declared again


def test_a_bare_value_is_a_one_field_user_key(store: KeyedStore) -> None:
    handle = _handle(store)
    mapped = handle.getMapState("m", "k STRING", "value INT")
    mapped.updateValue("x", (1,))
    assert mapped.containsKey("x") and mapped.containsKey(("x",))
    assert mapped.getValue("x") == (1,) == mapped.getValue(("x",))
    assert list(mapped.keys()) == [("x",)]
    mapped.updateValue(["y"], (2,))
    mapped.removeKey("x")
    assert list(mapped.iterator()) == [(("y",), (2,))]

    pair = handle.getMapState("pair", "a STRING, b INT", "value INT")
    with pytest.raises(SchemaError, match=r"2 fields \['a', 'b'\]"):
        pair.updateValue("x", (1,))


def test_nested_values_read_as_sparks_handles_return_them(
    store: KeyedStore, tmp_path: Path
) -> None:
    """Structs nested in a value come back as Rows and maps as dicts, whatever was written (a
    dict, a tuple, a Row; a dict or pairs), before and after the store committed: what Spark's
    client gives a processor."""
    from pyspark.sql import Row

    schema = (
        "tags ARRAY<STRING>, meta ARRAY<STRUCT<key: STRING, value: STRING>>, "
        "addr STRUCT<num: INT, city: STRING>, attrs MAP<STRING, ARRAY<INT>>"
    )
    written = (
        ["a"],
        [{"key": "env", "value": "prod"}, ("region", "us")],
        Row(num=1, city="SF"),
        {"k1": [1, 2]},
    )
    want = (
        ["a"],
        [Row(key="env", value="prod"), Row(key="region", value="us")],
        Row(num=1, city="SF"),
        {"k1": [1, 2]},
    )
    handle = _handle(store)
    value = handle.getValueState("v", schema)
    listed = handle.getListState("l", schema)
    mapped = handle.getMapState("m", "name STRING", schema)
    value.update(written)
    listed.appendValue(written)
    mapped.updateValue(("x",), written)

    def reads(h: TieredHandle) -> list[Any]:
        v = h.getValueState("v", schema)
        lst = h.getListState("l", schema)
        m = h.getMapState("m", "name STRING", schema)
        return [v.get(), *lst.get(), m.getValue(("x",)), *m.values(), *(x for _, x in m.iterator())]

    for got in reads(handle):
        assert got == want and type(got[1][0]) is Row and type(got[2]) is Row, got
    if isinstance(store, PartitionStore):  # read back from the committed files
        store.commit(0)
        again = PartitionStore.open(str(tmp_path), "op", 0, 0)
        try:
            for got in reads(_handle(again)):
                assert got == want and type(got[1][0]) is Row and type(got[2]) is Row, got
        finally:
            again.close()
