"""The engine without Spark: a partition store, a value table with TTL, commits and a restore."""

import time

import pyarrow as pa

from fsstate import PartitionStore

# --8<-- [start:store]
store = PartitionStore.open("state", operator="sessions", partition=0)  # an empty store
counts = store.value_table("count", pa.schema([("n", pa.int64())]), ttl_ms=60_000)
store.set_time(int(time.time() * 1000))  # processing time, for TTL
counts.update(("alice",), (1,))
counts.update(("bob",), (5,))
store.commit(0)  # version 0: a manifest and only the changed files
counts.update(("alice",), (2,))
store.commit(1)
store.close()

old = PartitionStore.open("state", "sessions", 0, version=0)  # restored lazily
old_counts = old.value_table("count", pa.schema([("n", pa.int64())]), ttl_ms=60_000)
assert old_counts.get(("alice",)) == (1,)
old.close()
# --8<-- [end:store]
