"""The memtable's seal rows cut into chunks: chunks in one global key order, keys whole."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from fsstate.format.schema import KIND_MAP, KIND_VALUE, TableSpec
from fsstate.format.segment import Segment
from fsstate.format.tombstones import ABSENT
from fsstate.tables.memtable import dirty_batches

KEY = pa.schema(
    [
        pa.field("start", pa.timestamp("ms", tz="UTC")),
        pa.field("who", pa.string(), nullable=True),
    ]
)
VAL = pa.schema([pa.field("n", pa.int64())])
UKEY = pa.schema([pa.field("item", pa.string())])
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _keys(rng: random.Random, n: int) -> list[tuple[object, ...]]:
    names = [None, "", "a", "b", "zz", "é", "ä"]
    keys = {(T0 + dt.timedelta(minutes=rng.randrange(50)), rng.choice(names)) for _ in range(n)}
    out = sorted(keys, key=repr)
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("kind", [KIND_VALUE, KIND_MAP])
def test_dirty_batches_are_chunks_of_one_sorted_run(kind: str) -> None:
    rng = random.Random(7)
    keys = _keys(rng, 300)
    views: dict[tuple[object, ...], object] = {}
    dirty: dict[tuple[object, ...], object] = {}
    seq = 0
    for k in keys:
        seq += 1
        if kind == KIND_VALUE:
            views[k] = ABSENT if rng.random() < 0.2 else (seq,)
            dirty[k] = seq
        else:
            items = {(f"i{j}",): (seq + j,) for j in range(rng.randint(0, 3))}
            views[k] = items
            dirty[k] = [seq if not items else None, {u: c[0] for u, c in items.items()}]
            seq += 3
    spec = TableSpec("t", kind, VAL, KEY, UKEY if kind == KIND_MAP else None, None)
    whole = list(dirty_batches(spec, views, dirty, len(dirty)))
    parts = list(dirty_batches(spec, views, dirty, 17))
    assert len(whole) == 1 and len(parts) > 10
    # the chunks, one after the other, are exactly the one sorted batch of everything
    assert pa.Table.from_batches(parts).equals(pa.Table.from_batches(whole))
    seen: set[tuple[object, ...]] = set()
    for p in parts:  # every key whole in one chunk
        ks = set(Segment(spec, p).distinct_keys())
        assert not ks & seen
        seen |= ks
    assert seen == {k for k in keys if kind == KIND_VALUE or views[k] or dirty[k][0]}
