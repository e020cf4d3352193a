"""Unchanged StatefulProcessors: the flow driver against Spark's transformWithState, side by side.

One keyed processor, the running aggregate of ``spark_operators`` (count and sum(v) per key in
a value state, one output row per key and batch:
:class:`bench.harness.operator_queries.RunningAgg`, and its Row twin
:class:`bench.harness.operator_queries.RunningAggRow`), in four queries over the same Parquet
micro-batches (``spark_operators``' shape: ``rows`` rows per batch over ``rows / 2``
keys), time mode ``None``, update output:

* ``pandas/native``: ``df.groupBy("k").transformWithStateInPandas(...)``, Spark's handles;
* ``pandas/driver``: ``ops.transform_with_state_in_pandas(df.groupBy("k"), ...)`` run by
  ``ops.write_stream`` (:mod:`fsstate_spark.operators`);
* ``row/native``: ``df.groupBy("k").transformWithState(...)``, Spark's handles;
* ``row/driver``: ``ops.transform_with_state(df.groupBy("k"), ...)``.

Shapes: 50,000 and 500,000 rows per batch (``--quick``: 10,000 and 40,000 rows, fewer
batches; the larger shape has 2 timed batches: a native pandas batch of 500,000 rows, 250,000
keys, takes about 3 minutes here). Per shape the four queries run at once, each on its own
copy of the input, with a processing-time trigger; round by round a batch file is given to one
query at a time (the order rotating) and the round waits for it; a query's batch time is Spark's
``triggerExecution``. Per batch, native time / driver time is a sample of the flavour's ratio;
a row's value is the median over the steady batches (batch 0 warms up), its status decided on
it. Goals: the pandas processor >= 10x ``transformWithStateInPandas``, the Row processor >= 30x
``transformWithState``. The suite also holds the driver's own cost per key without Spark
(:mod:`bench.suites.spark_driver_cost`, goal <= 20 µs). ``--only "per key"`` runs only those rows,
``--only "50k"`` (a shape's label) only that shape.

Invariants:

* Both sides of a ratio do the same work: the same processor object type and logic, the same
  input file, the same output rows, the same partitions (``spark.sql.shuffle.partitions`` =
  the driver's ``partitions`` = ``PARTITIONS``) and the same sink: every query is a
  ``foreachBatch`` query (the driver is one by construction; the native queries get one)
  whose function writes the batch to Spark's ``noop`` format, as the driver does without a
  sink.
* Nothing fast but wrong passes: on batch 0 (warm-up) and on one extra, small batch after the
  timed ones (so the running totals of every earlier batch are in it), the same sink function
  instead computes (rows, sum n, sum s, sum crc32(k)) of the output; the four queries must
  agree with each other and with the same figures computed from the input files with Arrow,
  or the suite fails. Neither checked batch is a sample.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median, ratio_result, spread_text
from bench.harness.operator_queries import INPUT_SCHEMA, RunningAgg, RunningAggRow, batch_table
from bench.harness.processor_queries import (
    OUTPUT_DDL,
    Checksum,
    ChecksumSink,
    RowsCell,
    expected_checksum,
    wait_batch,
)
from bench.harness.spark import require_pyspark, session
from bench.suites.spark_driver_cost import run_cost

SUITE = "spark_driver"
GOALS = {"pandas": 10.0, "row": 30.0}
NATIVE = {"pandas": "transformWithStateInPandas", "row": "transformWithState"}
FLAVOUR_NAMES = {"pandas": "pandas processor", "row": "Row processor"}
PARTITIONS = 4
TRIGGER = "500 milliseconds"
CHECK_ROWS = 2_000  # rows of the extra, checked batch after the timed ones
KINDS = (("pandas", "native"), ("pandas", "driver"), ("row", "native"), ("row", "driver"))


@dataclass(frozen=True)
class Shape(RowsCell):
    """Rows per batch (over ``rows // 2`` keys) and timed batches after the warm-up."""

    rows: int
    steady: int

    @property
    def label(self) -> str:
        """``50k rows/batch`` (its rows' names, logs, ``--only``)."""
        return self.column


def shapes(ctx: BenchContext) -> list[Shape]:
    """The shapes of this mode. The full run is long: transformWithStateInPandas costs
    ~700 µs per key in Spark's own machinery, so a batch of 500k rows (250k keys) takes about
    3 minutes on the native pandas query (measured on an otherwise idle 2-core machine), and
    the larger shape has fewer timed batches."""
    if ctx.mode == "full":
        return [Shape(50_000, 5), Shape(500_000, 2)]
    return [Shape(10_000, 3), Shape(40_000, 3)]


@dataclass
class Job:
    """One running query and its per-batch times."""

    flavour: str
    impl: str
    input_dir: Path
    checkpoint: Path
    sink: ChecksumSink
    query: Any = None
    wall_ms: dict[int, float] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        """``flavour/impl``."""
        return f"{self.flavour}/{self.impl}"


def _start(spark: Any, job: Job) -> None:
    from fsstate_spark import operators as ops

    df = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(job.input_dir))
    )
    proc = RunningAgg() if job.flavour == "pandas" else RunningAggRow()
    grouped = df.groupBy("k")
    if job.impl == "driver":
        call = (
            ops.transform_with_state_in_pandas
            if job.flavour == "pandas"
            else ops.transform_with_state
        )
        flow = call(grouped, proc, OUTPUT_DDL, "Update", "None")
        writer = ops.write_stream(
            flow, checkpoint_location=str(job.checkpoint), sink=job.sink, partitions=PARTITIONS
        )
    else:
        if job.flavour == "pandas":
            out = grouped.transformWithStateInPandas(proc, OUTPUT_DDL, "Update", "None")
        else:
            out = grouped.transformWithState(proc, OUTPUT_DDL, "Update", "None")
        writer = (
            out.writeStream.outputMode("update")
            .foreachBatch(job.sink)
            .option("checkpointLocation", str(job.checkpoint))
        )
    job.query = writer.trigger(processingTime=TRIGGER).start()


def _wait(job: Job, batch: int, rows: int) -> None:
    job.wall_ms[batch], job.rows[batch] = wait_batch(job.query, job.tag, batch, rows)


def _run_shape(ctx: BenchContext, spark: Any, shape: Shape, scratch: Path) -> list[Job]:
    """Run the four queries of ``shape`` side by side; check batch 0 and the extra batch."""
    check_batch = shape.steady + 1
    jobs = [
        Job(
            f,
            i,
            scratch / f"{f}-{i}" / "input",
            scratch / f"{f}-{i}" / "checkpoint",
            ChecksumSink({0, check_batch}),
        )
        for f, i in KINDS
    ]
    source = scratch / "batches"
    source.mkdir()
    inputs: list[pa.Table] = []
    want: dict[int, Checksum] = {}
    try:
        for job in jobs:
            job.input_dir.mkdir(parents=True)
            _start(spark, job)
        for b in range(check_batch + 1):
            rows = CHECK_ROWS if b == check_batch else shape.rows
            table = batch_table(b, rows, shape.keys)
            inputs.append(table)
            if b in (0, check_batch):
                want[b] = expected_checksum(inputs)
            path = source / f"batch-{b:05d}.parquet"
            pq.write_table(table, path)
            mtime = 1_600_000_000 + 10 * b
            order = jobs[b % len(jobs) :] + jobs[: b % len(jobs)]
            for job in order:
                target = job.input_dir / path.name
                os.link(path, target)
                os.utime(target, (mtime, mtime))
                _wait(job, b, rows)
                ctx.log(f"  {shape.label} batch {b} {job.tag:<14} {job.wall_ms[b] / 1000:7.2f} s")
    finally:
        for job in jobs:
            if job.query is not None:
                job.query.stop()
    for b, w in want.items():
        got = {job.tag: job.sink.sums.get(b) for job in jobs}
        if any(g != w for g in got.values()):
            raise AssertionError(
                f"{shape.label}, batch {b}: output checksums (rows, sum n, sum s, sum crc32 k) "
                f"{got} differ from the input's {w}"
            )
    ctx.log(f"  {shape.label}: outputs of batches 0 and {check_batch} agree with the input")
    return jobs


def run(ctx: BenchContext) -> list[Result]:
    """The driver's cost per key, then each shape's four queries side by side."""
    require_pyspark()
    out: list[Result] = []
    if ctx.wants("per key"):
        out += run_cost(ctx)
    todo = [s for s in shapes(ctx) if ctx.wants(s.label)]
    if not todo:
        return out
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    spark = session(
        ctx,
        "fsstate-bench-driver",
        **{
            "spark.sql.shuffle.partitions": str(PARTITIONS),
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        },
    )
    try:
        for shape in todo:
            scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
            try:
                out += _results(_run_shape(ctx, spark, shape, scratch), shape)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    finally:
        spark.stop()
    return out


def _results(jobs: list[Job], shape: Shape) -> list[Result]:
    steady = shape.batches
    by = {(j.flavour, j.impl): j for j in jobs}
    work = shape.work(f"{PARTITIONS} partitions")
    out: list[Result] = []
    for flavour in ("pandas", "row"):
        native, driver = by[(flavour, "native")], by[(flavour, "driver")]
        ratios = [native.wall_ms[b] / driver.wall_ms[b] for b in steady]
        out.append(
            ratio_result(
                SUITE,
                f"{shape.label}: {FLAVOUR_NAMES[flavour]}: driver vs {NATIVE[flavour]}",
                ratios,
                f"{NATIVE[flavour]} (Spark's handles) batch time / the same processor "
                "through the flow driver, same batch, paired",
                work,
                GOALS[flavour],
            )
        )
        for job in (native, driver):
            api = NATIVE[flavour] if job.impl == "native" else "flow driver"
            rates = [job.rows[b] / (job.wall_ms[b] / 1000) for b in steady]
            out.append(
                Result(
                    suite=SUITE,
                    name=f"{shape.label}: {FLAVOUR_NAMES[flavour]}: {api} rows/s",
                    value=median(rates),
                    unit="rows/s",
                    notes=f"triggerExecution per batch ({spread_text(rates)}); {work}",
                    samples=rates,
                )
            )
    return out
