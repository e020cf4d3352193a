"""Reading tiered state from Spark with the fsstate data sources."""

import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from examples.running_count import run_batch

spark = SparkSession.builder.getOrCreate()
work = Path(tempfile.mkdtemp(prefix="inspect-spark-"))
run_batch(spark, work, ["spark", "state", "spark"])  # batch 0 of the Quickstart's query
state_uri = str(work / "state")

# --8<-- [start:read]
from fsstate_spark import register_sources

register_sources(spark)  # once per session
counts = (
    spark.read.format("fsstate")
    .option("path", state_uri)  # the state URI, or the query's checkpoint location
    .option("stateVarName", "count")
    .option("batchId", 0)  # default: the newest batch
    .load()
)  # columns key, value, partition_id
counts.show()
changes = (
    spark.read.format("fsstate")
    .option("path", state_uri)
    .option("stateVarName", "count")
    .option("readChangeFeed", "true")
    .option("changeStartBatchId", 0)
    .load()
)  # batch_id, change_type, key, value, partition_id
changes.show()
spark.read.format("fsstate-metadata").option("path", state_uri).load().show()
# --8<-- [end:read]
assert sorted((r.key.word, r.value["count"]) for r in counts.collect()) == [
    ("spark", 2),
    ("state", 1),
]
assert sorted(r.key.word for r in changes.collect()) == ["spark", "state"]
