"""A job that runs one tiered() query under a given Python worker module, for the tests of
fsstate's keyed loop that need a SparkContext of their own (the worker module is a static
setting): ``python -m tests.support.worker_job --module M --input DIR --work DIR``.

It prints ``RESULT {"rows": [...]}``: the query's output rows, ``[batch, key, count, total]``
sorted. The worker modules the tests give are written by the tests into a directory on
``PYTHONPATH``; their names start with ``pyspark`` (Spark's daemon imports no other).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

OUTPUT = "k STRING, count BIGINT, total BIGINT"


class Totals(StatefulProcessor):
    """Counts and sums ``v`` per key (pandas flavour), the key written as text."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("totals", "count BIGINT, total BIGINT")

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = [int(v) for frame in rows for v in frame["v"]]
        old = self.state.get()
        count, total = (old[0], old[1]) if old else (0, 0)
        count, total = count + len(vals), total + sum(vals)
        self.state.update((count, total))
        yield pd.DataFrame({"k": [key_text(key[0])], "count": [count], "total": [total]})

    def close(self) -> None:
        pass


def key_text(value: Any) -> str:
    """A key as text (``null`` for a null, which pandas hands over as NaN)."""
    return "null" if value is None or value != value else str(int(value))


def main() -> None:
    """Run the query (see the module docstring)."""
    from devkit.spark_local import local_session
    from fsstate_spark import tiered

    parser = argparse.ArgumentParser()
    parser.add_argument("--module", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    spark = local_session(
        "fsstate-worker-job",
        **{"spark.python.worker.module": args.module, "spark.ui.enabled": "false"},
    )
    df = (
        spark.readStream.schema("k BIGINT, v BIGINT")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
    )
    out = df.groupBy("k").transformWithStateInPandas(
        tiered(Totals(), state_uri=f"{args.work}/state"), OUTPUT, "Update", "None"
    )
    rows: list[list[Any]] = []
    query = (
        out.writeStream.foreachBatch(
            lambda d, b: rows.extend([b, r.k, r["count"], r.total] for r in d.collect())
        )
        .option("checkpointLocation", f"{args.work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    spark.stop()
    print("RESULT " + json.dumps({"rows": sorted(rows, key=repr)}), flush=True)


if __name__ == "__main__":
    main()
