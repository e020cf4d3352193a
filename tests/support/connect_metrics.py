"""fsstate's figures read on a Spark Connect client: a ``tiered()`` query and a flow.

Run as a Spark Connect client by ``tests/fsstate_spark/metrics/test_connect_progress.py`` (a
Python process is either a classic or a Connect client)::

    SPARK_REMOTE=sc://localhost:PORT/;token=... python -m tests.support.connect_metrics --work DIR

It runs :class:`tests.support.metrics_runs.Ledger` under ``tiered()`` (fsstate's keyed loop)
and in a flow with :func:`tests.support.metrics_runs.run_query` (a ``foreachBatch`` sink, which
``tiered()`` refuses on Connect: the query's error is pickled instead), each with :func:`listen`
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

from pyspark.sql import SparkSession

from fsstate_spark import tiered
from tests.support.metrics_runs import SPILL_BUDGET, Ledger, run_query


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
