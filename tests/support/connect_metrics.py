"""fsstate's figures read on a Spark Connect client: a ``tiered()`` query and a flow.

Run as a Spark Connect client by ``tests/fsstate_spark/metrics/test_progress.py`` (a
Python process is either a classic or a Connect client)::

    SPARK_REMOTE=sc://localhost:PORT/;token=... python -m tests.support.connect_metrics --work DIR

It runs :class:`tests.support.metrics_runs.Ledger` under ``tiered()`` (fsstate's keyed loop)
and in a flow with :func:`tests.support.metrics_runs.run_query` (a ``foreachBatch`` sink, which
``tiered()`` refuses on Connect: the query's error is pickled instead), and the ``tiered()``
query again with Spark's memory sink (``tiered-memory``), each in
``<work>/<product>-<attempt>/`` (the foreachBatch queries with :func:`listen` writing
``lines.jsonl`` there, in this process), and pickles what the client reported
(``progress_history``, ``progress``, the files each batch wrote, where the state is, the
attempt's directory) to ``<work>/<product>.pickle`` for the test to compare with the truth it
reads itself. Prints
``RESULT {"session"}`` at the end.

A product's queries take some 20 s; one not done after :data:`STUCK_S` is stuck (Spark's
Connect ``foreachBatch`` runner can wedge: a CI run's client waited out its whole timeout in
this file): the client says so (:func:`tests.support.connect_flows.mark_stuck`, the test saves
the JVM's threads), stops it and runs that product once more in a fresh directory; the pickle
records the stuck attempts, and the test reports them with the threads.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from fsstate.storage.location import Location
from fsstate_spark import tiered
from tests.support.connect_flows import mark_stuck
from tests.support.metrics_runs import (
    LEDGER_BATCHES,
    OUTPUT,
    SPILL_BUDGET,
    Ledger,
    QueryStuck,
    run_query,
)

STUCK_S = 90
STOP_TIMEOUT = "60s"  # a wedged query's stop: an error after this, not a wait without end


def run_to_memory(
    spark: SparkSession, work: Path, on_stuck: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The ``tiered()`` query with Spark's memory sink (not ``foreachBatch``), its figures read
    by this client: ``{"query", "history", "last", "root"}`` (the files it wrote are not
    listed: the memory sink runs no code of ours). Not ended after :data:`STUCK_S`:
    ``on_stuck``, then :class:`QueryStuck`."""
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
        .queryName(f"ledger_on_connect_{work.name.replace('-', '_')}")
        .outputMode("update")
        .option("checkpointLocation", str(work / "checkpoint"))
    )
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        query = writer.trigger(availableNow=True).start()
    if not query.awaitTermination(STUCK_S):
        if on_stuck is not None:
            on_stuck()
        query.stop()
        raise QueryStuck(f"query {query.id}: still running after {STUCK_S:.0f} s")
    query.stop()
    return {
        "query": str(query.id),
        "history": progress_history(query, limit=50),
        "last": progress(query),
        "root": Location.parse(str(work / "state")).child(str(query.id)),
    }


Run = Callable[[Path, Callable[[], None]], dict[str, Any]]


def _attempts(product: str, run: Run, work: Path) -> dict[str, Any]:
    """``run`` in ``<work>/<product>-<attempt>``, once more if it was stuck. The query's error
    (the refused ``tiered()`` query's) is the result; ``"stuck"`` lists the stuck attempts."""
    stuck: list[str] = []
    for attempt in (1, 2):
        name = f"{product}-{attempt}"
        fired: list[bool] = []

        def on_stuck(name: str = name, fired: list[bool] = fired) -> None:
            fired.append(True)
            mark_stuck(work, name)

        t0 = time.monotonic()
        try:
            result = run(work / name, on_stuck)
        except AssertionError as exc:  # the query failed: its error, for the test
            result = {"error": str(exc)}
        except Exception as exc:  # QueryStuck, or the stop of a stuck query timing out
            if not fired:
                raise
            stuck.append(f"{name}: {type(exc).__name__}: {str(exc)[:500]}")
            print(f"{name} stuck, {time.monotonic() - t0:.0f} s: {stuck[-1]}", flush=True)
            continue
        print(f"{name}: {time.monotonic() - t0:.1f} s", flush=True)
        result.pop("fileio", None)  # the test makes its own
        return {**result, "stuck": stuck, "dir": str(work / name)}
    return {"error": "stuck twice", "stuck": stuck}


def main(argv: list[str] | None = None) -> int:
    """Run the queries from the client of ``$SPARK_REMOTE``; pickle their figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    faulthandler.dump_traceback_later(600, exit=True)  # the client's stack, then its end
    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    spark.conf.set("spark.sql.streaming.stopTimeout", STOP_TIMEOUT)
    runs: dict[str, Run] = {
        "tiered": lambda at, on_stuck: run_query(
            spark,
            at,
            tiered(Ledger(), state_uri=str(at / "state"), **SPILL_BUDGET),
            listen_path=at / "lines.jsonl",
            deadline_s=STUCK_S,
            on_stuck=on_stuck,
        ),
        "tiered-memory": lambda at, on_stuck: run_to_memory(spark, at, on_stuck),
        "flow": lambda at, on_stuck: run_query(
            spark,
            at,
            Ledger(),
            flow=True,
            state_uri=str(at / "state"),
            listen_path=at / "lines.jsonl",
            deadline_s=STUCK_S,
            on_stuck=on_stuck,
        ),
    }
    for product, run in runs.items():
        result = _attempts(product, run, work)
        (work / f"{product}.pickle").write_bytes(pickle.dumps(result))
    print("RESULT " + json.dumps({"session": type(spark).__module__}), flush=True)
    faulthandler.cancel_dump_traceback_later()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
