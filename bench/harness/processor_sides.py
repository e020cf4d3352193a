"""Starting the running aggregate on one side of a comparison, and checking which keyed loop the
``tiered()`` queries ran (``spark_jvm``, ``spark_scale``).

A *side* is how the processor runs (:data:`SIDES`): ``tiered()`` on fsstate's keyed loop
(``fast``) or on PySpark's own per-key loop (``stock``), Spark's handles alone (``handles``),
fsstate's flow driver (``driver``) or the Java processor on Spark's ``transformWithState``
(``java``, :mod:`bench.harness.java_processor`). :func:`start_side` starts one over a
streaming DataFrame with the sink every side shares
(:class:`~bench.harness.processor_queries.ChecksumSink`; the Java query's is Java);
:func:`stock_loop_notes` reads the JVM log for worker notes that a fast-loop query ran
PySpark's loop instead.

Invariants: every side gets the same input DataFrame, output schema
(:data:`~bench.harness.processor_queries.OUTPUT_DDL`), output mode (update), time mode (None)
and trigger; only how the processor runs differs. The processor is the running aggregate of
the flavour (:class:`~bench.harness.operator_queries.RunningAgg`, ``RunningAggRow``) unless
the caller gives another one with the same state (a loader, a dict-state reference).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.harness.java_processor import start_java
from bench.harness.operator_queries import RunningAgg, RunningAggRow
from bench.harness.processor_queries import OUTPUT_DDL, ChecksumSink

SIDES = ("fast", "stock", "handles", "driver", "java")
JVM_LOG = "spark-jvm.log"  # under the run's tmp_dir (bench.harness.spark.session)
# the worker notes (stderr, in the JVM log) that a tiered() query ran PySpark's loop
STOCK_QUERY = re.compile(r"^fsstate: tiered\((?P<name>[^)]*)\) runs on PySpark's per-key loop")
STOCK_NOTES = (
    "keyed loop is off",
    "runs on PySpark's own loop",
    "PySpark's loop runs",
    "the stock worker runs",
)


def start_side(
    spark: Any,
    df: Any,
    *,
    flavour: str,
    side: str,
    name: str,
    root: Path,
    sink: ChecksumSink,
    trigger: str,
    partitions: int,
    max_cached_stores: int,
    processor: Any = None,
    state_uri: str | None = None,
    state_name: str | None = None,
    options: Mapping[str, Any] | None = None,
    changelog: bool = False,
) -> Any:
    """Start the running aggregate on ``side`` over the streaming DataFrame ``df``.

    Args:
        spark: the session (its ``spark.jars`` holds the Java processor for ``java``).
        df: the input (columns ``k``, ``v``, ``t``).
        flavour: ``pandas`` or ``row`` (ignored for ``java``).
        side: one of :data:`SIDES`.
        name: the query's name.
        root: the query's directory: its checkpoint is ``root/checkpoint``, ``tiered()``'s
            default state ``root/state`` (the flow driver's state is in its checkpoint).
        sink: the query's ``foreachBatch`` function (its ``checked`` ids for ``java``).
        trigger: the processing-time trigger's interval.
        partitions: the flow driver's state partitions (Spark's shuffle partitions are the
            session's when the query starts).
        max_cached_stores: the stores each worker keeps open (``tiered()``, the driver).
        processor: the processor (default: the flavour's running aggregate).
        state_uri: ``tiered()``'s state location (default ``root/state``).
        state_name: ``tiered()``'s operator name (default ``name``), the driver stage's (default:
            the processor's class name).
        options: more ``tiered()`` settings (``storage_options``, ...).
        changelog: the Java query with RocksDB's changelog checkpointing on
            (:func:`bench.harness.java_processor.start_java`).

    Returns:
        The started query (PySpark's ``StreamingQuery``).
    """
    checkpoint = root / "checkpoint"
    if side == "java":
        return start_java(spark, df, checkpoint, name, trigger, sink.checked, changelog)
    pandas = flavour == "pandas"
    proc: Any = processor if processor is not None else RunningAgg() if pandas else RunningAggRow()
    grouped = df.groupBy("k")
    if side == "driver":
        from fsstate_spark import operators as ops

        call = ops.transform_with_state_in_pandas if pandas else ops.transform_with_state
        writer = ops.write_stream(
            call(grouped, proc, OUTPUT_DDL, "Update", "None", name=state_name),
            checkpoint_location=str(checkpoint),
            sink=sink,
            partitions=partitions,
            max_cached_stores=max_cached_stores,
        )
        return writer.queryName(name).trigger(processingTime=trigger).start()
    if side in ("fast", "stock"):
        from fsstate_spark import tiered

        proc = tiered(
            proc,
            state_uri=state_uri or str(root / "state"),
            name=state_name or name,
            fast_loop=side == "fast",
            max_cached_stores=max_cached_stores,
            **dict(options or {}),
        )
    tws = grouped.transformWithStateInPandas if pandas else grouped.transformWithState
    return (
        tws(proc, OUTPUT_DDL, "Update", "None")
        .writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .queryName(name)
        .trigger(processingTime=trigger)
        .start()
    )


def stock_loop_notes(log: Path, start: int, fast: set[str]) -> list[str]:
    """The worker notes since byte ``start`` of the JVM log ``log`` that one of the ``fast``
    queries (their ``tiered()`` operator names) ran PySpark's loop, or that fsstate's loop is
    off in a worker (:mod:`fsstate_spark.tiered.fast_loop`, :mod:`pyspark_fsstate.worker`);
    empty without fast queries or log."""
    if not fast or not log.exists():
        return []
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    bad = []
    for line in text.splitlines():
        if not line.startswith("fsstate: "):
            continue
        m = STOCK_QUERY.match(line)
        if (m is not None and m["name"] in fast) or any(n in line for n in STOCK_NOTES):
            bad.append(line)
    return bad
