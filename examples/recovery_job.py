"""A standalone streaming job with tiered state, meant for ``spark-submit --py-files``.

Reads JSON-lines files (``{"k": ..., "v": ...}``) from ``--input`` one file per micro-batch,
keeps per key a running count and sum (ValueState), the last three values (ListState) and a
count per parity (MapState) in fsstate through ``tiered()``, and writes every micro-batch's
output with ``foreachBatch`` to ``--sink`` as ``batch-<id>.json``.

Run it (from the repository root)::

    python -m fsstate_spark.pyfiles dist/fsstate-pyfiles.zip
    spark-submit --master local[2] --py-files dist/fsstate-pyfiles.zip \\
        examples/recovery_job.py --input in/ --checkpoint ckpt/ --state-uri state/ --sink out/

Kill it at any moment (even ``kill -9``) and run the same command again: the query resumes
from its checkpoint and the sink ends up exactly as after an uninterrupted run.

Invariants:

* The processor, the sink and the session set-up live in this file only; ``fsstate`` and
  ``fsstate_spark`` come from ``--py-files`` (the zip is first on the workers' and the driver's
  ``sys.path``). The job prints where the driver and the workers imported ``fsstate`` from.
* The sink is idempotent per batch id: a batch's file is written under a temporary name and
  renamed to ``batch-<id>.json``, replacing the file of an earlier attempt of the same batch.
  Readers see either no file or a complete one.
* Input files are read in modification-time order, one per micro-batch
  (``maxFilesPerTrigger=1``), with an ``availableNow`` trigger: the job ends once every file
  present at start is processed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

INPUT_SCHEMA = "k STRING, v BIGINT"
OUTPUT_SCHEMA = "k STRING, count BIGINT, total BIGINT, recent STRING, parity STRING"
RECENT = 3

# Settings the job needs; anything given with ``spark-submit --conf`` wins.
SQL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    # transformWithState needs RocksDB for Spark's own operator state (timers, metadata).
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
}


class RecentValues(StatefulProcessor):
    """Per key: count and sum (value state), last values (list state), parities (map state).

    Args:
        slow_ms: every task but partition 0's sleeps this long in ``close``, i.e. after
            partition 0 committed the batch's fsstate version and before it commits its own.
        trace_dir: if set, every task appends ``batch partition worker-pid executor-pid`` to a
            file there (which executor JVM served which partition).
    """

    def __init__(self, slow_ms: int = 0, trace_dir: str | None = None) -> None:
        self.slow_ms = slow_ms
        self.trace_dir = trace_dir

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state."""
        self.stats = handle.getValueState("stats", "count BIGINT, total BIGINT")
        self.recent = handle.getListState("recent", "v BIGINT")
        self.parity = handle.getMapState("parity", "parity STRING", "n BIGINT")

    def handleInputRows(
        self, key: Any, rows: Any, timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        """Fold this batch's values into the key's state and emit the key's new summary."""
        values = [int(v) for pdf in rows for v in pdf["v"]]
        old = self.stats.get()
        count = (old[0] if old else 0) + len(values)
        total = (old[1] if old else 0) + sum(values)
        self.stats.update((count, total))
        self.recent.appendList([(v,) for v in values])
        recent = [t[0] for t in self.recent.get()][-RECENT:]
        self.recent.put([(v,) for v in recent])
        for v in values:
            name = ("even",) if v % 2 == 0 else ("odd",)
            cur = self.parity.getValue(name)
            self.parity.updateValue(name, ((cur[0] if cur else 0) + 1,))
        parity = ";".join(f"{k[0]}:{n[0]}" for k, n in sorted(self.parity.iterator()))
        yield pd.DataFrame(
            {
                "k": [key[0]],
                "count": [count],
                "total": [total],
                "recent": [",".join(map(str, recent))],
                "parity": [parity],
            }
        )

    def close(self) -> None:
        """Nothing to release; optionally hold back the commit of all but partition 0."""
        tc = TaskContext.get()  # None on the driver (schema collection)
        if self.slow_ms > 0 and tc is not None and tc.partitionId() > 0:
            time.sleep(self.slow_ms / 1000)
        if self.trace_dir and tc is not None:
            batch = tc.getLocalProperty("streaming.sql.batchId")
            line = f"{batch} {tc.partitionId()} {os.getpid()} {_executor_pid()}\n"
            with open(os.path.join(self.trace_dir, f"{os.getpid()}.trace"), "a") as f:
                f.write(line)


def _executor_pid() -> int:
    """The executor JVM of this Python worker: the parent of the pyspark daemon that forked it
    (Linux /proc; 0 where it cannot be read)."""
    try:
        stat = Path(f"/proc/{os.getppid()}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def write_batch_file(sink: Path, batch_id: int, rows: list[list[Any]]) -> Path:
    """Write one batch's rows to ``sink/batch-<id>.json`` atomically (temp file + rename).

    A re-run of the same batch id replaces the file, so the sink is idempotent per batch.
    """
    target = sink / f"batch-{batch_id:05d}.json"
    tmp = sink / f".{target.name}.{os.getpid()}.tmp"
    payload = json.dumps({"batch_id": batch_id, "rows": rows}, sort_keys=True)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(payload + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return target


def module_origins(spark: SparkSession) -> dict[str, Any]:
    """Where the driver and the Python workers import ``fsstate`` and ``fsstate_spark`` from."""
    import fsstate
    import fsstate_spark

    def origin(_: Any) -> str:
        import fsstate as worker_fsstate

        return str(worker_fsstate.__file__)

    workers = spark.sparkContext.parallelize(range(2), 2).map(origin).collect()
    return {
        "driver": [str(fsstate.__file__), str(fsstate_spark.__file__)],
        "workers": sorted(set(workers)),
    }


def build_session(app_name: str) -> SparkSession:
    """A SparkSession from spark-submit's settings, with the job's SQL defaults filled in."""
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for key, value in SQL_DEFAULTS.items():
        if spark.conf.get(key, None) in (None, ""):
            spark.conf.set(key, value)
    return spark


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the job."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of JSON-lines input files")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--state-uri", required=True, help="fsstate state directory or URI")
    parser.add_argument("--sink", required=True, help="directory of batch-<id>.json outputs")
    parser.add_argument("--trace-dir", default=None, help="where tasks record their executor")
    parser.add_argument(
        "--slow-ms",
        type=int,
        default=0,
        help=(
            "slow every batch down: partitions other than 0 sleep this long before their state "
            "commit, the sink as long after all commits and before writing the batch's file"
        ),
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the query until every input file present at start is processed."""
    args = parse_args(argv)
    from fsstate_spark import tiered

    sink = Path(args.sink)
    sink.mkdir(parents=True, exist_ok=True)
    for stale in sink.glob(".batch-*.tmp"):  # left behind by a killed run
        stale.unlink(missing_ok=True)

    spark = build_session("fsstate-recovery-job")
    print(f"fsstate modules: {json.dumps(module_origins(spark))}", flush=True)

    stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    out = stream.groupBy("k").transformWithStateInPandas(
        tiered(RecentValues(args.slow_ms, args.trace_dir), state_uri=args.state_uri),
        OUTPUT_SCHEMA,
        "Update",
        "None",
    )

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = sorted([list(r) for r in batch.collect()], key=lambda r: r[0])
        if args.slow_ms > 0:
            time.sleep(args.slow_ms / 1000)
        path = write_batch_file(sink, batch_id, rows)
        print(f"batch {batch_id}: {len(rows)} rows -> {path.name}", flush=True)

    query = (
        out.writeStream.foreachBatch(write)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"done: {len(list(sink.glob('batch-*.json')))} batch files in {sink}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
