"""The streaming application ``make crash-test`` kills: a tiered() running aggregate per key.

Run by :mod:`devkit.crash_test` as ``python -m devkit.crash_job --input ... --checkpoint ...
--state-uri ... --sink ...`` in a session of its own, killed with SIGKILL at random points and
started again with the same command until it ends by itself.

The query reads JSON-lines files (``{"b": batch, "k": key, "v": value}``) one per micro-batch
(``maxFilesPerTrigger=1``, ``availableNow``), keeps per key in fsstate through ``tiered()`` a
count and sum (ValueState), the last :data:`RECENT` values (ListState) and a count per value
modulo :data:`BUCKETS` (MapState), and emits one row per key of each micro-batch to a Parquet
file sink (append mode): Spark's file sink is exactly-once across restarts, a batch's files
count only once its entry is in the sink's ``_spark_metadata`` log.

:func:`expected_rows` and :func:`expected_state` are the same aggregate in plain Python, the
model the crash test checks the sink and the stored state against.

Invariants:

* The output is a function of the input files alone: within a micro-batch a key's values are
  folded in sorted order (Spark's grouping does not promise any row order), and each row
  carries its micro-batch's input file number ``b`` (one file per micro-batch).
* The processor's state names and the operator name (:data:`OPERATOR`) are what the crash test
  reads back with :mod:`fsstate.inspect`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from devkit.jobs import job_arguments

INPUT_SCHEMA = "b BIGINT, k STRING, v BIGINT"
OUTPUT_SCHEMA = "b BIGINT, k STRING, count BIGINT, total BIGINT, recent STRING, buckets STRING"
OPERATOR = "crash_counts"  # tiered(..., name=OPERATOR): the fsstate operator (store) name
RECENT = 3
BUCKETS = 4

Row = tuple[int, str, int, int, str, str]
"""An output row: ``(b, k, count, total, recent, buckets)``."""


class CrashCounts(StatefulProcessor):
    """Per key: count and sum (``stats``), the last values (``recent``), values per bucket
    (``buckets``); one output row per key and micro-batch."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state."""
        self.stats = handle.getValueState("stats", "count BIGINT, total BIGINT")
        self.recent = handle.getListState("recent", "v BIGINT")
        self.buckets = handle.getMapState("buckets", "bucket BIGINT", "n BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Fold this micro-batch's values of the key into its state and emit its new summary."""
        frames = list(rows)
        values = sorted(int(v) for pdf in frames for v in pdf["v"])
        batch = max(int(b) for pdf in frames for b in pdf["b"])
        old = self.stats.get()
        count = (old[0] if old else 0) + len(values)
        total = (old[1] if old else 0) + sum(values)
        self.stats.update((count, total))
        self.recent.appendList([(v,) for v in values])
        recent = [t[0] for t in self.recent.get()][-RECENT:]
        self.recent.put([(v,) for v in recent])
        for v in values:
            cur = self.buckets.getValue((v % BUCKETS,))
            self.buckets.updateValue((v % BUCKETS,), ((cur[0] if cur else 0) + 1,))
        buckets = ";".join(f"{k[0]}:{n[0]}" for k, n in sorted(self.buckets.iterator()))
        yield pd.DataFrame(
            {
                "b": [batch],
                "k": [key[0]],
                "count": [count],
                "total": [total],
                "recent": [",".join(map(str, recent))],
                "buckets": [buckets],
            }
        )

    def close(self) -> None:
        """Nothing to release."""


class _KeyModel:
    """One key's state in the model."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.recent: list[int] = []
        self.buckets: dict[int, int] = {}

    def fold(self, values: list[int]) -> None:
        """What :meth:`CrashCounts.handleInputRows` does with a micro-batch's values."""
        self.count += len(values)
        self.total += sum(values)
        self.recent = (self.recent + values)[-RECENT:]
        for v in values:
            self.buckets[v % BUCKETS] = self.buckets.get(v % BUCKETS, 0) + 1

    def row(self, batch: int, key: str) -> Row:
        """The output row after a fold."""
        buckets = ";".join(f"{b}:{n}" for b, n in sorted(self.buckets.items()))
        recent = ",".join(map(str, self.recent))
        return (batch, key, self.count, self.total, recent, buckets)


def _run_model(batches: Sequence[Sequence[dict[str, Any]]]) -> tuple[list[Row], dict[str, Any]]:
    keys: dict[str, _KeyModel] = {}
    out: list[Row] = []
    for b, rows in enumerate(batches):
        grouped: dict[str, list[int]] = {}
        for r in rows:
            grouped.setdefault(r["k"], []).append(int(r["v"]))
        for k, values in grouped.items():
            model = keys.setdefault(k, _KeyModel())
            model.fold(sorted(values))
            out.append(model.row(b, k))
    return sorted(out), {k: keys[k] for k in sorted(keys)}


def expected_rows(batches: Sequence[Sequence[dict[str, Any]]]) -> list[Row]:
    """Every row the query emits over ``batches`` (one list per input file), sorted."""
    return _run_model(batches)[0]


def expected_state(batches: Sequence[Sequence[dict[str, Any]]]) -> dict[str, list[Any]]:
    """The state after ``batches``: table name -> sorted rows, as :mod:`devkit.crash_test`
    reads them back (``stats``: ``(k, count, total)``, ``recent``: ``(k, [values])``,
    ``buckets``: ``(k, bucket, n)``)."""
    keys = _run_model(batches)[1]
    return {
        "stats": sorted((k, m.count, m.total) for k, m in keys.items()),
        "recent": sorted((k, m.recent) for k, m in keys.items()),
        "buckets": sorted((k, b, n) for k, m in keys.items() for b, n in m.buckets.items()),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the job."""
    parser = job_arguments((__doc__ or "").splitlines()[0], "Parquet file sink directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the query until every input file present at start is processed."""
    args = parse_args(argv)
    from devkit.spark_local import local_session
    from fsstate_spark import tiered

    spark = local_session("fsstate-crash-test")
    print("session started", flush=True)
    counts = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        .groupBy("k")
        .transformWithStateInPandas(
            tiered(CrashCounts(), state_uri=args.state_uri, name=OPERATOR),
            OUTPUT_SCHEMA,
            "Append",
            "None",
        )
    )
    query = (
        counts.writeStream.format("parquet")
        .option("path", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = query.lastProgress
    print(f"done: last batch {progress['batchId'] if progress else None}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
