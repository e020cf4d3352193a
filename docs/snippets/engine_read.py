"""Reading a stored version without Spark: Arrow tables, DuckDB over them, a change feed.

It reads ``./state``, which the engine page's example writes (docs/snippets/engine_store.py,
run first here as the page says to)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("engine_store.py")))  # versions 0 and 1

# --8<-- [start:read]
import duckdb

from fsstate import read_changes, read_table

counts = read_table("state", "sessions", 0, "count", version=1)  # a pyarrow.Table
print(duckdb.sql("select * from counts order by n desc limit 5"))
changes = read_changes("state", "sessions", 0, "count", start_version=1)  # versions 1 .. newest
print(changes.to_pandas())  # batch_id, change_type (update / delete), key, value
# --8<-- [end:read]
assert sorted(counts.to_pylist(), key=lambda r: r["k0"]) == [
    {"k0": "alice", "n": 2},
    {"k0": "bob", "n": 5},
]
assert changes.select(["change_type", "k0", "n"]).to_pylist() == [
    {"change_type": "update", "k0": "alice", "n": 2}
]
