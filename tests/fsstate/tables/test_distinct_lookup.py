"""The live-row count's lookup of distinct single-column keys (``index_in`` per segment,
:func:`fsstate.tables.batched._index_hits`) finds what the join and point reads find: keys of
several types with nulls, rows repeated within and across runs, deletes, expired rows and
range deletes, runs in memory and on disk."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig

VAL = pa.schema([pa.field("n", pa.int64())])
TYPES: list[tuple[pa.DataType, Any]] = [
    (pa.int64(), lambda i: i),
    (pa.string(), lambda i: f"k{i}"),
    (pa.date32(), lambda i: __import__("datetime").date(2020, 1, 1 + i % 28)),
]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("typ", range(len(TYPES)))
def test_distinct_lookup_equals_join_and_point_reads(tmp_path: Path, seed: int, typ: int) -> None:
    rng = random.Random(seed)
    dtype, make = TYPES[typ]
    key_schema = pa.schema([pa.field("k", dtype)])
    store = PartitionStore.open(str(tmp_path), "op", 0, None, StoreConfig(fsync=False))
    t = store.value_table("v", VAL, key_schema, ttl_ms=1000)
    universe = [None, *sorted({make(i) for i in range(40)})]
    t.now_ms = 0
    for step in range(8):
        keys = [rng.choice(universe) for _ in range(30)]  # repeats within a batch
        kt = pa.table({"k": pa.array(keys, dtype)})
        if rng.random() < 0.3:
            t.delete_many(kt)
        else:
            t.put_many(kt, pa.table({"n": list(range(len(keys)))}))
        for k in rng.sample(universe, 5):  # views that expire (ttl) or are cleared
            if rng.random() < 0.5:
                t.update((k,), (step,))
            else:
                t.clear((k,))
        if step == 4 and typ == 0:
            t.delete_range((3,), (9,))
        if rng.random() < 0.5:
            store.commit(step)
        t.seal()
        t.now_ms += 400  # the ttl views expire after a few steps
    want = pa.array(universe, dtype)
    struct = pa.StructArray.from_arrays([want], fields=list(key_schema))
    fast = t._get_many_arrow(struct, distinct=True)
    join = t._get_many_arrow(struct)
    assert fast.equals(join)
    point = [t.get((k,)) is not None for k in universe]
    assert fast.column("_found").to_pylist() == point
    assert t._found_rows(struct) == sum(point)
    store.close()
