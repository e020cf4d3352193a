"""tiered() and the flows from a Spark Connect client (tests/fsstate_spark/test_connect.py and
tests/fsstate_spark/operators/test_connect_flows.py run them against a local Connect server)."""

# --8<-- [start:connect]
from pyspark.sql import SparkSession

from examples.running_count import RunningCount, show
from fsstate_spark import operators as ops
from fsstate_spark import tiered

spark = SparkSession.builder.remote("sc://connect-server:15002").getOrCreate()
words = spark.readStream.text("s3a://my-bucket/words").withColumnRenamed("value", "word")

# tiered(): the processor and its settings travel to the server's Python workers in the plan
counts = words.groupBy("word").transformWithStateInPandas(
    tiered(RunningCount(), state_uri="s3://my-bucket/fsstate"),
    "word STRING, count BIGINT",
    "Update",
    "None",
)

# the flow driver: its foreachBatch function, and so the sink, runs on the Connect server
flow = ops.transform_with_state_in_pandas(
    words.groupBy("word"), RunningCount(), "word STRING, count BIGINT", "Update", "None"
)
ops.write_stream(flow, checkpoint_location="s3a://my-bucket/checkpoints/words", sink=show)
# --8<-- [end:connect]
