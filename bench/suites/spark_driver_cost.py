"""The flow driver's own cost per key, without Spark: one partition's epoch of a processor stage.

:class:`fsstate_spark.operators.processor_stage.ProcessorStage` runs through the engine's
:func:`fsstate.operators.runner.run_epoch`, as a ``mapInArrow`` task of the flow driver runs it,
minus Spark: store acquire, canonical sort, the stage (its sort by key, grouping, the per-key
frames or Rows, the calls, the output conversion) and the commit. Each epoch gets a fresh
batch of ``ROWS`` rows drawn over ``KEYS`` keys (the ``spark_operators`` shape: ~2 rows per
key, so ~86 % of the key range appears in a batch); a figure is the epoch's wall time over the
batch's distinct keys (the number of ``handleInputRows`` calls), in µs.

Processors (:mod:`bench.harness.processor_queries`, :mod:`bench.harness.operator_queries`):

* :class:`~bench.harness.processor_queries.Idle`: ``handleInputRows`` returns an empty
  iterator and never touches its rows: what remains is the driver's own cost (goal <=
  ``GOAL_US`` µs per key, both flavours);
* :class:`~bench.harness.operator_queries.RunningAgg` (pandas) and its Row twin
  :class:`~bench.harness.operator_queries.RunningAggRow`: count and sum per key in a value
  state, one output row per key (informative: the share of user code, pandas frame building
  and state calls).

Invariants:

* The four variants (idle / running aggregate x pandas / Row) run interleaved epoch by epoch,
  the order rotating, each on its own store, all on the same sequence of batches; a full
  ``gc.collect()`` runs before every timed epoch (:func:`bench.harness.common.time_call`).
* A row's value is the median of its per-epoch samples (warm-up epochs dropped); its status is
  decided on that median.
* The running aggregates' outputs are checked against numpy on the last epoch (row count and
  sums), so a fast but wrong stage cannot pass.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from bench.harness.common import BenchContext, Result, median, spread_text, time_call
from bench.harness.operator_queries import RunningAgg, RunningAggRow, batch_table
from bench.harness.processor_queries import OUTPUT_TYPE, Idle, checksum, expected_checksum

SUITE = "spark_driver"
GOAL_US = 20.0
ROWS = 50_000
KEYS = 25_000
VARIANTS = ("idle", "running")
FLAVOURS = ("pandas", "row")


def processor(variant: str, flavour: str) -> StatefulProcessor:
    """A fresh processor of ``variant`` (``idle`` / ``running``) in ``flavour``."""
    if variant == "idle":
        return Idle()
    return RunningAgg() if flavour == "pandas" else RunningAggRow()


# -- one stage on the engine's runner --------------------------------------------------------------
@dataclass
class StageRun:
    """A processor stage with its own store, run epoch after epoch (``next_epoch``)."""

    variant: str
    flavour: str
    root: Path
    epoch: int = 0
    seconds: list[float] = field(default_factory=list)
    last: pa.Table | None = None

    def __post_init__(self) -> None:
        from fsstate.storage.fileio import FileIO
        from fsstate.storage.location import Location
        from fsstate.store.pool import StorePool
        from fsstate_spark.operators.processor_stage import ProcessorSpec, ProcessorStage

        spec = ProcessorSpec(
            keys=("k",),
            output_type=OUTPUT_TYPE,
            output_mode="update",
            time_mode="none",
            pandas=self.flavour == "pandas",
        )
        self.op = ProcessorStage(self.tag, processor(self.variant, self.flavour), spec)
        self.fileio = FileIO(Location.parse(str(self.root / self.tag)))
        self.pool = StorePool()

    @property
    def tag(self) -> str:
        """``variant_flavour``."""
        return f"{self.variant}_{self.flavour}"

    def call(self, batch: pa.Table) -> Callable[[], None]:
        """The next epoch over ``batch`` as a call (the epoch counter moves when it runs)."""
        from fsstate.operators.runner import run_epoch

        def one() -> None:
            res = run_epoch(self.op, self.fileio, 0, self.epoch, batch, pool=self.pool)
            self.last = res.output
            self.epoch += 1

        return one


def batches(n: int, rows: int = ROWS, keys: int = KEYS) -> list[pa.Table]:
    """``n`` input batches (``k``, ``v``, ``t``), seeded by their index."""
    return [batch_table(b, rows, keys) for b in range(n)]


def distinct_keys(batch: pa.Table) -> int:
    """The batch's distinct keys (``handleInputRows`` calls)."""
    return int(pc.count_distinct(batch.column("k")).as_py())


def run_cost(ctx: BenchContext) -> list[Result]:
    """The driver-cost rows: the four variants interleaved epoch by epoch."""
    warmup = 2
    repeat = ctx.pick(5, 11)
    data = batches(warmup + repeat)
    keys = [distinct_keys(b) for b in data]
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="driver-cost-", dir=ctx.tmp_dir))
    try:
        runs = [StageRun(v, f, scratch) for v in VARIANTS for f in FLAVOURS]
        for e, batch in enumerate(data):
            order = runs[e % len(runs) :] + runs[: e % len(runs)]
            for r in order:
                dt = time_call(r.call(batch))
                if e >= warmup:
                    r.seconds.append(dt)
            ctx.log(
                f"  epoch {e}: "
                + ", ".join(f"{r.tag} {1e6 * r.seconds[-1] / keys[e]:.1f} µs/key" for r in runs)
                if e >= warmup
                else f"  epoch {e} (warm-up)"
            )
        want = expected_checksum(data)
        for r in runs:
            assert r.last is not None
            if r.variant == "running" and checksum(r.last) != want:
                raise AssertionError(f"{r.tag}: output {checksum(r.last)}, expected {want}")
            if r.variant == "idle" and r.last.num_rows:
                raise AssertionError(f"{r.tag}: {r.last.num_rows} output rows, expected none")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _results(runs, keys[warmup:])


def _results(runs: list[StageRun], keys: list[int]) -> list[Result]:
    out = []
    work = (
        f"one partition's epoch through run_epoch (store acquire, sort, grouping, calls, "
        f"output conversion, commit; local disk), {ROWS:,} rows over {KEYS:,} keys per batch "
        f"(~{median([float(k) for k in keys]):,.0f} distinct keys = calls), no Spark"
    )
    names = {"pandas": "pandas", "row": "Row"}
    for r in runs:
        us = [1e6 * s / k for s, k in zip(r.seconds, keys, strict=True)]
        if r.variant == "idle":
            name = f"driver cost per key, {names[r.flavour]} (µs)"
            what = "a processor that does nothing (empty iterator, rows never read)"
            goal: float | None = GOAL_US
        else:
            name = f"running aggregate per key, {names[r.flavour]} (µs)"
            what = (
                "RunningAgg (reads its rows, value state get + update, one output row per "
                "key); informative: the driver's cost plus the user code's"
            )
            goal = None
        out.append(
            Result(
                suite=SUITE,
                name=name,
                value=median(us),
                unit="µs",
                goal=goal,
                goal_op="<=",
                notes=f"{what}; epoch wall time / distinct keys ({spread_text(us)}); {work}",
                samples=us,
            )
        )
    return out


def epoch_fixture(
    variant: str, flavour: str, tmp: Path, rows: int = ROWS, epochs: int = 2
) -> Callable[[], None]:
    """A stage that has run ``epochs`` epochs, and its next epoch as a call (for profiling);
    batches of ``rows`` rows over ``rows // 2`` keys."""
    data = batches(epochs + 1, rows, max(1, rows // 2))
    run = StageRun(variant, flavour, tmp)
    for b in data[:-1]:
        run.call(b)()
    return run.call(data[-1])
