"""A windowed count with fsstate's whole-batch operators."""

import json
import os
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
work = Path(tempfile.mkdtemp(prefix="operators-window-"))
(work / "input").mkdir()
batches = [  # micro-batch 0 moves event time to 00:05:00; batch 1's watermark closes 00:00-00:01
    [("home", "00:00:10", 100), ("home", "00:00:40", 300), ("cart", "00:05:00", 50)],
    [("home", "00:05:10", 70)],
]
for i, rows in enumerate(batches):
    path = work / "input" / f"{i}.json"
    path.write_text(
        "".join(
            json.dumps({"page": p, "t": f"2026-01-01 {t}", "ms": ms}) + "\n" for p, t, ms in rows
        )
    )
    os.utime(path, (1_600_000_000 + i, 1_600_000_000 + i))
events = (
    spark.readStream.schema("page STRING, t TIMESTAMP, ms BIGINT")
    .option("maxFilesPerTrigger", 1)
    .json(str(work / "input"))
)
checkpoint = str(work / "checkpoint")
closed = []


def sink(batch, batch_id):
    closed.extend(batch.collect())


# --8<-- [start:window]
from fsstate_spark import operators as ops

clicks = ops.source(events, watermark=("t", "10 seconds"))
counts = clicks.window_aggregate(
    keys=["page"],
    time="t",
    window=ops.Window(size_ms=60_000),
    aggs=[ops.Agg("count"), ops.Agg("max", "ms")],
)  # append mode: a window's row once the watermark closes it
query = (
    ops.write_stream(counts, checkpoint_location=checkpoint, sink=sink, partitions=8)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
# --8<-- [end:window]
assert [(r["page"], r[2], r[3]) for r in closed] == [("home", 2, 300)], closed
