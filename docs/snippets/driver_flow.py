"""The Quickstart's processor, unchanged, on fsstate's flow driver."""

import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from examples.running_count import RunningCount

spark = SparkSession.builder.getOrCreate()
work = Path(tempfile.mkdtemp(prefix="driver-flow-"))
(work / "input").mkdir()
(work / "input" / "0.txt").write_text("spark\nstate\nspark")
words = spark.readStream.text(str(work / "input")).withColumnRenamed("value", "word")
checkpoint = str(work / "checkpoint")
seen = []


def sink(batch, batch_id):
    seen.extend(tuple(row) for row in batch.collect())


# --8<-- [start:driver]
from fsstate_spark import operators as ops

# was: words.groupBy("word").transformWithStateInPandas(RunningCount(), schema, "Update", "None")
flow = ops.transform_with_state_in_pandas(
    words.groupBy("word"), RunningCount(), "word STRING, count BIGINT", "Update", "None"
)  # or ops.transform_with_state(...) for a Row processor
query = (
    ops.write_stream(flow, checkpoint_location=checkpoint, sink=sink, partitions=4)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
# --8<-- [end:driver]
assert sorted(seen) == [("spark", 2), ("state", 1)], seen
