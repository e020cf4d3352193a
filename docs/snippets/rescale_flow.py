"""A flow restarted with another partition count rescales its state at its first batch."""

import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from examples.running_count import RunningCount
from fsstate_spark import operators as ops

spark = SparkSession.builder.getOrCreate()
work = Path(tempfile.mkdtemp(prefix="rescale-flow-"))
(work / "input").mkdir()
checkpoint = str(work / "checkpoint")
seen = []


def sink(batch, batch_id):
    seen.extend(sorted(tuple(row) for row in batch.collect()))


def flow_over(words):
    """Add a file of words to the input; the running count's flow over the input."""
    (work / "input" / f"{len(seen)}.txt").write_text("\n".join(words))
    stream = spark.readStream.text(str(work / "input")).withColumnRenamed("value", "word")
    return ops.transform_with_state_in_pandas(
        stream.groupBy("word"), RunningCount(), "word STRING, count BIGINT", "Update", "None"
    )


flow = flow_over(["spark", "state", "spark"])
writer = ops.write_stream(flow, checkpoint_location=checkpoint, sink=sink, partitions=4)
writer.trigger(availableNow=True).start().awaitTermination()
flow = flow_over(["state", "arrow"])  # the query stopped; new input; started again:
# --8<-- [start:rescale]
writer = ops.write_stream(flow, checkpoint_location=checkpoint, sink=sink, partitions=16)  # was 4
# --8<-- [end:rescale]
writer.trigger(availableNow=True).start().awaitTermination()
assert seen == [("spark", 2), ("state", 1), ("arrow", 1), ("state", 2)], seen
