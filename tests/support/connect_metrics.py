"""fsstate's figures read on a Spark Connect client: a ``tiered()`` query and a flow.

Run as a Spark Connect client by ``tests/fsstate_spark/metrics/test_connect_progress.py`` (a
Python process is either a classic or a Connect client)::

    SPARK_REMOTE=sc://localhost:PORT/;token=... python -m tests.support.connect_metrics --work DIR

It runs :class:`tests.support.metrics_runs.Ledger` under ``tiered()`` (fsstate's keyed loop)
and in a flow with :func:`tests.support.metrics_runs.run_query` (a ``foreachBatch`` sink, which
``tiered()`` refuses on Connect: the query's error is pickled instead), and the ``tiered()``
query again with Spark's memory sink (``tiered-memory``), each with :func:`listen`
writing ``<work>/<product>.jsonl`` in this process, and pickles what the client reported
(``progress_history``, ``progress``, the files each batch wrote, where the state is) to
``<work>/<product>.pickle`` for the test to compare with the truth it reads itself. Prints
``RESULT {"session"}`` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from fsstate.storage.location import Location
from fsstate_spark import tiered
from tests.support.metrics_runs import LEDGER_BATCHES, OUTPUT, SPILL_BUDGET, Ledger, run_query


def run_to_memory(spark: SparkSession, work: Path) -> dict[str, Any]:
    """The ``tiered()`` query with Spark's memory sink (not ``foreachBatch``), its figures read
    by this client: ``{"query", "history", "last", "root"}`` (the files it wrote are not
    listed: the memory sink runs no code of ours)."""
    from devkit.spark_local import session_conf, write_batches
    from fsstate_spark.metrics import progress, progress_history

    write_batches(work / "input", LEDGER_BATCHES)
    proc = tiered(Ledger(), state_uri=str(work / "state"))
    frame = spark.readStream.schema("k STRING, v BIGINT").option("maxFilesPerTrigger", 1)
    out = (
        frame.json(str(work / "input"))
        .groupBy("k")
        .transformWithStateInPandas(proc, OUTPUT, "Update", "ProcessingTime")
    )
    writer = (
        out.writeStream.format("memory")
        .queryName("ledger_on_connect")
        .outputMode("update")
        .option("checkpointLocation", str(work / "checkpoint"))
    )
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        query = writer.trigger(availableNow=True).start()
    query.awaitTermination(240)
    query.stop()
    return {
        "query": str(query.id),
        "history": progress_history(query, limit=50),
        "last": progress(query),
        "root": Location.parse(str(work / "state")).child(str(query.id)),
    }


def main(argv: list[str] | None = None) -> int:
    """Run both queries from the client of ``$SPARK_REMOTE``; pickle their figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    work = Path(args.work)
    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    runs = {
        "tiered": lambda: run_query(
            spark,
            work / "tiered",
            tiered(Ledger(), state_uri=str(work / "tiered-state"), **SPILL_BUDGET),
            listen_path=work / "tiered.jsonl",
        ),
        "tiered-memory": lambda: run_to_memory(spark, work / "tiered-memory"),
        "flow": lambda: run_query(
            spark,
            work / "flow",
            Ledger(),
            flow=True,
            state_uri=str(work / "flow-state"),
            listen_path=work / "flow.jsonl",
        ),
    }
    for product, run in runs.items():
        try:
            result = run()
        except AssertionError as exc:  # the query failed: its error, for the test
            result = {"error": str(exc)}
        result.pop("fileio", None)  # the test makes its own
        (work / f"{product}.pickle").write_bytes(pickle.dumps(result))
    print("RESULT " + json.dumps({"session": type(spark).__module__}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
