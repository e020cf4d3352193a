"""A tiered query over Spark Connect or a classic session; prints its output as one JSON line.

Run by ``test_connect.py`` as a separate process (a Spark Connect session needs its own JVM)::

    python -m tests.support.connect_job --mode connect --input DIR --work DIR

``--mode connect`` builds the session with ``SparkSession.builder.remote("local[2]")``, which
starts a local Spark Connect server and talks to it over gRPC; ``--mode classic`` a plain
``local[2]`` session. Everything else is the same: the ``KitchenSink`` processor wrapped in
``tiered()`` (called on the client), one input file per micro-batch, an ``availableNow``
trigger and a memory sink read back with SQL; then the state is read back with
``spark.read.format("fsstate")`` (registered from the client).
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

CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.ui.enabled": "false",
}


def session(mode: str) -> Any:
    """A Spark Connect session to a local server, or a classic local session."""
    builder = SparkSession.builder.appName(f"fsstate-{mode}")
    builder = builder.remote("local[2]") if mode == "connect" else builder.master("local[2]")
    for key, value in CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def main(argv: list[str] | None = None) -> int:
    """Run the query and print ``{"mode", "session", "rows"}``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["connect", "classic"], required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    spark = session(args.mode)
    processor = tiered(KitchenSink(), state_uri=os.path.join(args.work, "state"))
    stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    out = stream.groupBy("k").transformWithStateInPandas(processor, SINK_SCHEMA, "Update", "None")
    query = (
        out.writeStream.format("memory")
        .queryName("tiered_out")
        .outputMode("update")
        .option("checkpointLocation", os.path.join(args.work, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = sorted(
        json.dumps(list(r), sort_keys=True) for r in spark.sql("select * from tiered_out").collect()
    )
    register_sources(spark)  # the state read back through the fsstate data source
    counts = (
        spark.read.format("fsstate")
        .option("path", os.path.join(args.work, "state"))
        .option("stateVarName", "count")
        .load()
    )
    state = sorted([r.key.k, r.value["count"], r.partition_id] for r in counts.collect())
    result = {"mode": args.mode, "session": type(spark).__module__, "rows": rows, "state": state}
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
