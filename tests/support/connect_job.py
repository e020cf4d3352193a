"""A tiered query over Spark Connect or a classic session, its output and state read back.

:func:`run_query` runs it on a given session: the ``KitchenSink`` processor wrapped in
``tiered()`` (called where the session is: on a Connect client, the processor travels to the
server's Python workers pickled in the plan) on PySpark's own per-key loop, one input file per
micro-batch, an ``availableNow`` trigger and a memory sink read back with SQL; then the state
is read back with ``spark.read.format("fsstate")`` (registered from the caller).
``test_connect.py`` runs it on the suite's classic session, and as a Spark Connect client in a
process of its own (a Python process is either a classic or a Connect client), served from the
suite's JVM (:func:`tests.support.connect_flows.connect_server`)::

    SPARK_REMOTE=sc://localhost:PORT/;token=... python -m tests.support.connect_job \\
        --input DIR --work DIR

which prints ``RESULT {"session", "rows", "state"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from fsstate_spark import register_sources, tiered
from tests.support.processors import INPUT_SCHEMA, SINK_SCHEMA, KitchenSink


def run_query(spark: SparkSession, input_dir: str, work: str) -> dict[str, Any]:
    """Run the query on ``spark`` (state and checkpoint under ``work``): ``{"session", "rows",
    "state"}``, the rows as sorted JSON text, the state as ``[key, count, partition]``."""
    processor = tiered(KitchenSink(), state_uri=os.path.join(work, "state"), fast_loop=False)
    stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(input_dir)
    out = stream.groupBy("k").transformWithStateInPandas(processor, SINK_SCHEMA, "Update", "None")
    name = f"tiered_out_{type(spark).__module__.replace('.', '_')}"
    query = (
        out.writeStream.format("memory")
        .queryName(name)
        .outputMode("update")
        .option("checkpointLocation", os.path.join(work, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = sorted(
        json.dumps(list(r), sort_keys=True) for r in spark.sql(f"select * from {name}").collect()
    )
    spark.catalog.dropTempView(name)
    register_sources(spark)  # the state read back through the fsstate data source
    counts = (
        spark.read.format("fsstate")
        .option("path", os.path.join(work, "state"))
        .option("stateVarName", "count")
        .load()
    )
    state = sorted([r.key.k, r.value["count"], r.partition_id] for r in counts.collect())
    return {"session": type(spark).__module__, "rows": rows, "state": state}


def main(argv: list[str] | None = None) -> int:
    """Run the query from the Spark Connect client of ``$SPARK_REMOTE``; print ``RESULT``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    result = run_query(spark, args.input, args.work)
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
