"""Reading a stored version without Spark: Arrow tables, DuckDB over them, a change feed."""

import pyarrow as pa

from fsstate import PartitionStore

store = PartitionStore.open("state", operator="sessions", partition=0)
table = store.value_table("count", pa.schema([("n", pa.int64())]))
for version, (who, n) in enumerate([("alice", 1), ("bob", 5), ("alice", 2)]):
    table.update((who,), (n,))
    store.commit(version)
store.close()

# --8<-- [start:read]
import duckdb

from fsstate import read_changes, read_table

counts = read_table("state", "sessions", 0, "count", version=2)  # a pyarrow.Table
print(duckdb.sql("select * from counts order by n desc limit 5"))
changes = read_changes("state", "sessions", 0, "count", start_version=1)  # versions 1 .. newest
print(changes.to_pandas())  # batch_id, change_type (update / delete), key, value
# --8<-- [end:read]
assert counts.num_rows == 2
