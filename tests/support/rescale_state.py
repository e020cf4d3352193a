"""State to rescale in tests: three versions of one operator's stores in N partitions.

:func:`write_state` writes value state with and without TTL, list state whose elements expire
at different times, map state with TTL, deletes and a purge point (an open-below range
tombstone, as deadline indexes and window panes have), each key in the partition
:func:`by_k` gives; :func:`rows_of` reads every table's live rows (with expiry) across the
partitions of one layout generation.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from fsstate.inspect import Snapshot
from fsstate.operators.local import partition_ids
from fsstate.storage.fileio import FileIO
from fsstate.store import PartitionStore
from fsstate.store.layout import Layout, publish_layout

__all__ = ["OP", "by_k", "rows_of", "write_state"]

OP = "op"
KEY = pa.schema([pa.field("k", pa.string()), pa.field("n", pa.int64())])
VAL = pa.schema([pa.field("v", pa.int64())])
UKEY = pa.schema([pa.field("u", pa.string())])


def by_k(partitions: int) -> Callable[[pa.Table], Any]:
    """New partition of a key row: the local driver's stable hash of ``k``."""
    return lambda keys: partition_ids(keys, ["k"], partitions)


def write_state(fileio: FileIO, partitions: int, seed: int) -> int:
    """Three versions of ``OP`` in ``partitions`` partitions (keys placed by ``by_k``): value
    state with and without TTL, list state whose elements expire at different times, map
    state with TTL, deletes, a purge point; returns the last version."""
    rng = random.Random(seed)
    publish_layout(fileio, OP, Layout(0, partitions))
    keys = [(f"k{i}", i % 3) for i in range(40)]
    place = partition_ids(
        pa.table({"k": [k for k, _ in keys], "n": [n for _, n in keys]}), ["k"], partitions
    )
    for q in range(partitions):
        mine = [k for k, p in zip(keys, place) if p == q]
        store = PartitionStore.open(fileio, OP, q, None)
        for v in range(3):
            if v:
                store = PartitionStore.open(fileio, OP, q, v - 1)
            store.set_time(1_000_000 + 1000 * v)
            plain = store.value_table("plain", VAL, KEY)
            ttl = store.value_table("ttl", VAL, KEY, ttl_ms=rng.choice([500, 1500, 5000]))
            lst = store.list_table("lst", VAL, KEY, ttl_ms=rng.choice([700, 2500]))
            mp = store.map_table("mp", UKEY, VAL, KEY, ttl_ms=4000)
            due = store.value_table("due", VAL, pa.schema([("t", pa.int64()), *KEY]))
            for k in mine:
                x = rng.randrange(100)
                if rng.random() < 0.7:
                    plain.update(k, (x,))
                if rng.random() < 0.5:
                    ttl.update(k, (x,))
                for _ in range(rng.randrange(3)):
                    lst.append(k, (x,))
                if rng.random() < 0.5:
                    mp.update(k, (f"u{x % 4}",), (x,))
                if rng.random() < 0.1:
                    plain.clear(k)
                due.update((v * 10 + x % 10, *k), (x,))
            due.delete_range(None, (v * 10 + 3,))
            store.meta["watermark_ms"] = 10 * v + q
            store.meta["event_time_max_ms"] = {"input": 100 * v + q}
            store.commit(v)
            store.close()
    return 2


def rows_of(fileio: FileIO, partitions: int, version: int, layout: str) -> dict[str, set[Any]]:
    """Every table's live rows (with expiry) across the partitions of one generation."""
    out: dict[str, set[Any]] = {}
    for p in range(partitions):
        with Snapshot(fileio, OP, p, version, layout) as snap:
            for name in snap.specs:
                table = snap.read(name, with_expiry=True, now_ms=snap.clock_ms)
                out.setdefault(name, set()).update(tuple(r.values()) for r in table.to_pylist())
    return out
