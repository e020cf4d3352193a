"""Running count per key: the smallest stateful processor, kept in fsstate with one line.

Run it (``python -m examples.running_count``, from the repository root) to stream three small
micro-batches through it and print the counts. The processor itself is plain PySpark: the only
fsstate line is ``tiered(RunningCount())``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

INPUT_SCHEMA = "word STRING"
OUTPUT_SCHEMA = "word STRING, count BIGINT"


class RunningCount(StatefulProcessor):
    """Counts the rows of each key across micro-batches (one ValueState)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state."""
        self.count = handle.getValueState("count", "count BIGINT")

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Add this batch's rows to the key's count and emit the new total."""
        seen = sum(len(pdf) for pdf in rows)
        old = self.count.get()
        total = (old[0] if old else 0) + seen
        self.count.update((total,))
        yield pd.DataFrame({"word": [key[0]], "count": [total]})

    def close(self) -> None:
        """Nothing to release."""


def main() -> None:
    """Stream three micro-batches of words through the tiered processor."""
    from devkit.spark_local import local_session, write_batches
    from fsstate_spark import tiered

    spark = local_session("running-count")
    work = Path(tempfile.mkdtemp(prefix="running-count-"))
    words = [["spark", "state", "spark"], ["state", "arrow"], ["spark", "parquet", "arrow"]]
    write_batches(work / "input", [[{"word": w} for w in batch] for batch in words])
    stream = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(work / "input"))
    )
    counts = stream.groupBy("word").transformWithStateInPandas(
        tiered(RunningCount(), state_uri=str(work / "state")), OUTPUT_SCHEMA, "Update", "None"
    )

    def show(batch: Any, batch_id: int) -> None:
        rows = sorted(tuple(r) for r in batch.collect())
        print(f"batch {batch_id}: {rows}")

    query = (
        counts.writeStream.foreachBatch(show)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"state and checkpoint under {work}")
    spark.stop()


if __name__ == "__main__":
    main()
