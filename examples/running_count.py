"""A running count per word, its state in fsstate: the README's and the Quickstart's example.

Run it from a checkout after ``make demo``: ``.venv/bin/python examples/running_count.py``.
Input, checkpoint and state go to ``./running_count/``. The processor is plain PySpark;
``tiered(...)`` is the one fsstate line. tests/docs/test_readme.py runs this file as a script.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from fsstate_spark import tiered


class RunningCount(StatefulProcessor):
    """Counts each word's rows across micro-batches, in one ValueState."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "count BIGINT")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        total = (self.count.get() or (0,))[0] + sum(len(pdf) for pdf in rows)
        self.count.update((total,))
        yield pd.DataFrame({"word": [key[0]], "count": [total]})

    def close(self) -> None:
        pass


def show(batch: Any, batch_id: int) -> None:
    """Print a micro-batch's output rows."""
    print(batch_id, sorted(map(tuple, batch.collect())))


def run_batch(spark: SparkSession, work: Path, words: list[str]) -> None:
    """Add a file of words to the input and run the query over it: one micro-batch."""
    inputs = work / "input"
    inputs.mkdir(exist_ok=True)
    (inputs / f"{len(list(inputs.iterdir()))}.txt").write_text("\n".join(words))
    counts = (
        spark.readStream.text(str(inputs))
        .withColumnRenamed("value", "word")
        .groupBy("word")
        .transformWithStateInPandas(
            tiered(RunningCount(), state_uri=str(work / "state")),  # the one fsstate line
            outputStructType="word STRING, count BIGINT",
            outputMode="Update",
            timeMode="None",
        )
    )
    query = (
        counts.writeStream.foreachBatch(show)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python runs this one
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config(  # Spark's own operator state (its timers) in RocksDB, as transformWithState needs
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.python.worker.module", "pyspark_fsstate.worker")  # fsstate's keyed loop
        .getOrCreate()
    )
    work = Path("running_count")  # input, checkpoint and state, made anew on every run
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    run_batch(spark, work, ["spark", "state", "spark"])  # prints: 0 [('spark', 2), ('state', 1)]
    run_batch(spark, work, ["state", "arrow"])  # prints: 1 [('arrow', 1), ('state', 2)]
    print("state in fsstate under", work / "state")  # python -m fsstate list running_count/state
