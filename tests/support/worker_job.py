"""A job that runs one tiered() query under each given Python worker module, for the tests of
fsstate's keyed loop that need a SparkContext of their own (the worker module is a static
setting): ``python -m tests.support.worker_job --module M [--module N ...] --input DIR --work
DIR``.

Each module gets a SparkContext of its own, one after the other in the job's JVM (started once),
and its query's state and checkpoint under ``<work>/<module>``; before a module's context starts,
the job writes ``==== worker module <module> ====`` (:data:`MARKER`) to standard error, so what
the module's workers say (they say it at their first task, while its query runs) sits between
its marker and the next (:func:`module_logs`). It prints ``RESULT {"rows": {module: [...]}}``:
each query's output rows, ``[batch, key, count, total]`` sorted. The worker modules the tests
give are written by the tests into a directory on ``PYTHONPATH``; their names start with
``pyspark`` (Spark's daemon imports no other).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

OUTPUT = "k STRING, count BIGINT, total BIGINT"
MARKER = "==== worker module {} ===="


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


def module_logs(stderr: str, modules: list[str]) -> dict[str, str]:
    """The job's standard error split by :data:`MARKER`: each module's part."""
    out: dict[str, str] = {}
    for module, nxt in zip(modules, [*modules[1:], None]):
        start = stderr.index(MARKER.format(module))
        end = stderr.index(MARKER.format(nxt)) if nxt is not None else len(stderr)
        out[module] = stderr[start:end]
    return out


def run(module: str, input_dir: str, work: str) -> list[list[Any]]:
    """The query's rows under worker module ``module``, in a SparkContext of its own (stopped
    after it)."""
    from devkit.spark_local import local_session
    from fsstate_spark import tiered

    print(MARKER.format(module), file=sys.stderr, flush=True)
    spark = local_session(
        "fsstate-worker-job",
        **{"spark.python.worker.module": module, "spark.ui.enabled": "false"},
    )
    df = (
        spark.readStream.schema("k BIGINT, v BIGINT")
        .option("maxFilesPerTrigger", 1)
        .json(input_dir)
    )
    out = df.groupBy("k").transformWithStateInPandas(
        tiered(Totals(), state_uri=f"{work}/state"), OUTPUT, "Update", "None"
    )
    rows: list[list[Any]] = []
    query = (
        out.writeStream.foreachBatch(
            lambda d, b: rows.extend([b, r.k, r["count"], r.total] for r in d.collect())
        )
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    spark.stop()
    return sorted(rows, key=repr)


def main() -> None:
    """Run the query under each module (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", action="append", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    rows = {m: run(m, args.input, f"{args.work}/{m}") for m in args.module}
    print("RESULT " + json.dumps({"rows": rows}), flush=True)


if __name__ == "__main__":
    main()
