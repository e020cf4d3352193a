"""The demo's query (examples/demo.py; tests/fsstate_spark/tiered/test_streaming.py runs it)."""

from pyspark.sql import SparkSession

from examples.session_tracker import INPUT_SCHEMA, OUTPUT_SCHEMA, SessionTracker

spark = SparkSession.builder.getOrCreate()
clicks = spark.readStream.schema(INPUT_SCHEMA).json("/data/clicks")

# --8<-- [start:query]
from fsstate_spark import tiered

spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")  # so availableNow ends
sessions = clicks.groupBy("user").transformWithStateInPandas(
    tiered(SessionTracker(ttl_ms=30 * 60 * 1000), state_uri="/data/fsstate", name="sessions"),
    OUTPUT_SCHEMA,
    "Update",
    "ProcessingTime",  # TTL needs processing time
)
# --8<-- [end:query]
