"""The job whose driver JVM dumps the class-data archive of :mod:`devkit.jvm_archive`.

Run as ``python -m devkit.jvm_archive_job <work dir>`` with ``FSSTATE_DUMP_JAVA_OPTIONS`` set
to the dumping JVM's options: a session from ``conf/spark-defaults.conf`` (as the test suite
builds its sessions), a streaming aggregation to a memory sink, a ``transformWithStateInPandas``
query with a running count, a DataFrame from pandas; the classes they load are the archive.

Invariants: only the driver JVM gets the dump option (``spark.driver.extraJavaOptions``), never
``spark-submit``'s launcher JVM; the processor is defined in ``__main__`` and so shipped to
the workers by value (they need not import this module).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from devkit.jvm_archive import DUMP_ENV
from devkit.spark_local import local_session, write_batches


class RunningCount(StatefulProcessor):
    """Rows seen per key so far, in a value state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        seen = self.n.get()
        total = (0 if seen is None else int(seen[0])) + sum(len(r) for r in rows)
        self.n.update((total,))
        yield pd.DataFrame({"k": [key[0]], "n": [total]})

    def close(self) -> None:
        pass


def main(work: str) -> None:
    """Run the job's queries in one session, then stop it (the JVM dumps at its exit)."""
    options = {"spark.driver.extraJavaOptions": os.environ[DUMP_ENV]}
    spark = local_session("class-archive", **options)
    try:
        root = Path(work)
        write_batches(root / "in", [[{"k": i % 5, "v": i} for i in range(20)]] * 2)
        reader = spark.readStream.schema("k BIGINT, v BIGINT").option("maxFilesPerTrigger", 1)
        stream = reader.json(str(root / "in"))
        counts = stream.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        runs = stream.groupBy("k").transformWithStateInPandas(
            RunningCount(), "k long, n long", "Update", "None"
        )
        for name, frame, mode in (("agg", counts, "complete"), ("tws", runs, "update")):
            query = (
                frame.writeStream.format("memory").queryName(name).outputMode(mode)
                .option("checkpointLocation", str(root / f"cp-{name}"))
                .trigger(availableNow=True).start()
            )  # fmt: skip
            query.awaitTermination()
            spark.table(name).collect()
        spark.createDataFrame(pd.DataFrame({"k": [1, 2], "v": [3, 4]})).collect()
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
