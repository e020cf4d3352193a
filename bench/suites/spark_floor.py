"""How fast a micro-batch can be at all: the floors under the 4-partition cells of ``spark_matrix``.

``spark_matrix`` compares fsstate's operators with Spark's built-ins (goal 1.5x in every cell).
At 4 partitions the built-in's batch is short (0.6-3 s here), and the question is how much of
it any design that runs inside a ``foreachBatch`` query must pay anyway. Per cell (windowed count
and running aggregate, 2 and 20 rows per key, 4 partitions; the shapes and input of
``spark_matrix``), four queries run side by side in one SparkSession (local[2]), each on its own
hard links of the same Parquet batch files, taking turns to go first:

* ``builtin``: Spark's operator (RocksDB state), as in ``spark_matrix``;
* ``fsstate``: the flow, as in ``spark_matrix`` (default settings);
* ``aggregate``: a ``foreachBatch`` query whose function runs Spark's own aggregate of the
  batch (the same grouping and aggregates, event-time windows for the windowed count) into
  Spark's ``noop`` sink, keeping no state at all: what a batch costs with Spark's generated
  partial and final aggregation and nothing else;
* ``aggregate + stage``: the same aggregate, then what a flow's stateful stage adds around its
  work: each row's partition (``pmod(hash(keys), 4)``), a shuffle to the stage's tasks and a
  Python ``mapInArrow`` that reads its rows and returns none (no state).

Rows (informative, no goal; per measured batch, paired within the cell): the built-in's batch
time over each floor's, and over fsstate's. A floor's ratio is the most a design of that shape
could reach with state for free; the ratios show where the 4-partition cells' time goes.

Invariants: the same input rows per batch for all (checked in each query's progress); batch 0
(the first load) and 1 are not measured; the floor queries compute their aggregates for real
(written to ``noop``).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median, ratio_result, spread_text
from bench.harness.matrix import GROUPS, PER_KEY, TRIGGER, matrix_table, shapes
from bench.harness.operator_queries import INPUT_SCHEMA, WINDOW_MS, builtin_query, fsstate_flow
from bench.harness.spark import (
    batch_progress,
    hand_in,
    require_pyspark,
    session,
    stop_queries,
)

SUITE = "spark_floor"
PARTITIONS = 4
SIDES = ("builtin", "fsstate", "aggregate", "aggregate_stage")
LABEL = {
    "fsstate": "fsstate",
    "aggregate": "Spark aggregate without state",
    "aggregate_stage": "Spark aggregate + a Python stage, no state",
}


@dataclass
class _Job:
    group: str
    per_key: int
    side: str
    root: Path
    query: Any = None
    wall_ms: dict[int, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"floor_{self.group}_{self.per_key}_{self.side}"


def _drop(batches: Any) -> Any:
    """A Python stage that reads its rows and keeps nothing."""
    for _ in batches:
        pass
    return iter(())


def _aggregate(df: Any, group: str) -> Any:
    from pyspark.sql import functions as F

    if group == "window":
        return df.groupBy(F.window("t", f"{WINDOW_MS // 1000} seconds"), "k").agg(
            F.count(F.lit(1)).alias("n")
        )
    return df.groupBy("k").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s"))


def _floor(group: str, stage: bool) -> Any:
    from pyspark.sql import functions as F

    def sink(df: Any, batch_id: int) -> None:
        out = _aggregate(df, group)
        if stage:
            out = out.withColumn("_p", F.pmod(F.hash("k"), F.lit(PARTITIONS)).cast("int"))
            out = out.repartition(2, "_p").mapInArrow(_drop, out.schema)
        out.write.format("noop").mode("overwrite").save()

    return sink


def _start(spark: Any, job: _Job) -> None:
    from fsstate_spark import operators as ops

    spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    (job.root / "input").mkdir(parents=True)
    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.root / "input"))
    )
    checkpoint = str(job.root / "checkpoint")
    if job.side == "builtin":
        out, mode = builtin_query(df, job.group)
        writer = out.writeStream.outputMode(mode).format("noop")
    elif job.side == "fsstate":
        writer = ops.write_stream(
            fsstate_flow(df, job.group, name=job.name),
            checkpoint_location=checkpoint,
            partitions=PARTITIONS,
        )
    else:
        writer = df.writeStream.foreachBatch(_floor(job.group, job.side == "aggregate_stage"))
    writer = writer.option("checkpointLocation", checkpoint)
    job.query = writer.queryName(job.name).trigger(processingTime=TRIGGER).start()


def _wait(job: _Job, batch: int, rows: int) -> None:
    p = batch_progress(job.query, batch, job.name)
    if int(p["numInputRows"]) != rows:
        raise RuntimeError(f"{job.name}: batch {batch} read {p['numInputRows']} rows")
    job.wall_ms[batch] = float(p["durationMs"]["triggerExecution"])


def run(ctx: BenchContext) -> list[Result]:
    """Every cell's four queries side by side."""
    require_pyspark()
    sizes = shapes(ctx)
    warm, measured = (2, 7) if ctx.mode == "full" else (2, 3)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    spark = session(
        ctx, "fsstate-bench-floor", **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}
    )
    cells = [(g, r) for g in GROUPS for r in PER_KEY]
    jobs = {
        (c, s): _Job(c[0], c[1], s, scratch / f"{c[0]}-{c[1]}" / s) for c in cells for s in SIDES
    }
    try:
        for job in jobs.values():
            _start(spark, job)
        for b in range(warm + measured):
            tables: dict[int, pa.Table] = {}
            for r, (_, keys) in sizes.items():
                tables[r] = matrix_table(b, keys, r)
            mtime = 1_600_000_000 + 10 * b
            for cell in cells[b % len(cells) :] + cells[: b % len(cells)]:
                path = scratch / f"r{cell[1]}-batch-{b:05d}.parquet"
                if not path.exists():
                    pq.write_table(tables[cell[1]], path)
                for side in SIDES[b % len(SIDES) :] + SIDES[: b % len(SIDES)]:
                    job = jobs[(cell, side)]
                    target = job.root / "input" / path.name
                    hand_in(path, target, mtime)
                    _wait(job, b, sizes[cell[1]][0])
                    ctx.log(f"  batch {b} {job.name:<40} {job.wall_ms[b] / 1000:7.2f} s")
    finally:
        stop_queries((job.query for job in jobs.values()), spark)
        shutil.rmtree(scratch, ignore_errors=True)
    steady = list(range(warm, warm + measured))
    out: list[Result] = []
    for group, per_key in cells:
        rows, keys = sizes[per_key]
        times = {s: [jobs[((group, per_key), s)].wall_ms[b] / 1000 for b in steady] for s in SIDES}
        secs = "; ".join(
            f"{s} {median(times[s]):.3g} s/batch ({spread_text(times[s])})" for s in SIDES
        )
        work = (
            f"{rows:,} rows per batch over {keys:,} keys, {PARTITIONS} partitions, local[2], "
            f"noop sinks, batches {steady[0]}-{steady[-1]}"
        )
        for side in SIDES[1:]:
            ratios = [a / c for a, c in zip(times["builtin"], times[side])]
            out.append(
                ratio_result(
                    SUITE,
                    f"{GROUPS[group]}, {PARTITIONS} partitions, {per_key} rows/key: "
                    f"{LABEL[side]} vs builtin",
                    ratios,
                    f"builtin batch time / {LABEL[side]} batch time, paired by batch",
                    f"{secs}; {work}",
                )
            )
    return out
