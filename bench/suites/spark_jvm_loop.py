"""The keyed loop's own cost per key, without Spark: fsstate's worker loop against PySpark's
(part of the ``spark_jvm`` suite).

One Python task of a ``transformWithStateInPandas`` / ``transformWithState`` operator, in this
process, over Arrow batches shaped as Spark's operator sends them: the input's columns
(``k``, ``v``, ``t``), rows grouped by key (sorted), at most ``maxRecordsPerBatch`` (10,000)
rows per batch, a key's rows possibly continuing in the next batch. ``ROWS`` rows over
``KEYS`` keys: one task's share of the 50k-rows, 4-partitions cell of the suite (~2.3 rows
per distinct key). A figure is the task's wall time over its distinct keys, in µs.

* fsstate's loop: :class:`fsstate_spark.tiered.fast_loop.FastTask` ``.run``, as fsstate's worker
  runs a ``tiered()`` task (key runs across batches, :class:`~fsstate_spark.state.keyed.KeyedRows`,
  :func:`~fsstate_spark.state.keyed.run_keys`, the output gathered and converted per batch and
  wrapped in Spark's struct column), with a stand-in for the ``tiered()`` proxy (no store: its
  ``begin_fast`` only calls the processor's ``init``) and for Spark's state-server client (no
  socket: handle states kept, no request sent);
* PySpark's loop: the function ``pyspark.worker.read_udfs`` builds for the same eval type
  (PySpark's own code, its per-key grouping, frames or Rows, calls and per-key output
  conversion), the command and the state-server client replaced by the same stand-ins while
  it is built. In a real task PySpark's loop also sends the grouping key to the JVM's state
  server before every key (a blocking round trip) and fsstate's does not (it defers it to
  the first state request that needs it, none with ``tiered()`` state); that round trip is
  left out here, so PySpark's figure is a lower bound of its loop's cost.

Processors: :class:`~bench.harness.processor_queries.Idle` (no output, rows never read),
:class:`OneRow` (one prebuilt output row per key, rows never read) and :class:`ReadRows` (reads
every chunk or Row of its key, then one prebuilt row): the loop's cost with no user work,
then with the output, then with the input handed over too. Goal: fsstate's loop <=
``GOAL_US`` µs per key, every processor and flavour; PySpark's rows are informative.

Invariants:

* Both loops get the same batches, processor classes and runner settings (Spark's defaults,
  UTC), and neither touches state: the difference is the loops' own work.
* The twelve runs (processor x flavour x loop) are interleaved task by task, the order
  rotating, a full ``gc.collect()`` before each timed task; warm-up tasks are dropped.
* Every run's output rows are counted: one per key (none for ``Idle``), on both loops, or the
  suite fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from bench.harness.common import BenchContext, Result, median, spread_text, time_call
from bench.harness.operator_queries import batch_table
from bench.harness.processor_queries import OUTPUT_TYPE, Idle

SUITE = "spark_jvm"
GOAL_US = 10.0
ROWS = 12_500
KEYS = 6_250
ARGS = [5, 1, 0, 0, 1, 2]  # Spark's grouped arg offsets: key column 0, value columns 0, 1, 2
FLAVOURS = {"pandas": "pandas", "row": "Row"}
PROCESSORS = {"idle": "Idle", "one_row": "OneRow", "read_rows": "ReadRows"}
LOOPS = {"fsstate": "fsstate's loop", "pyspark": "PySpark's loop"}


class OneRow(StatefulProcessor):
    """One prebuilt output row per key (``(k, n, s)``); rows never read, no state."""

    def __init__(self, pandas: bool) -> None:
        self.out: Any = (
            pd.DataFrame({"k": ["k"], "n": [1], "s": [1]}) if pandas else Row(k="k", n=1, s=1)
        )

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Nothing to declare."""

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Any:
        """The prebuilt row."""
        yield self.out

    def close(self) -> None:
        """Nothing to release."""


class ReadRows(OneRow):
    """Reads every chunk (pandas) or Row of its key, touching nothing in them, then yields the
    prebuilt row."""

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Any:
        """Drain ``rows``, then the prebuilt row."""
        for _ in rows:
            pass
        yield self.out


def make_processor(name: str, pandas: bool) -> StatefulProcessor:
    """A fresh processor of :data:`PROCESSORS` ``name``."""
    if name == "idle":
        return Idle()
    return OneRow(pandas) if name == "one_row" else ReadRows(pandas)


class StubClient:
    """Spark's state-server client without a server: keeps the handle state, sends nothing."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        from pyspark.sql.streaming.stateful_processor_api_client import (
            StatefulProcessorHandleState,
        )

        self.handle_state = StatefulProcessorHandleState.CREATED

    def set_handle_state(self, state: Any) -> None:
        """Kept, not sent."""
        self.handle_state = state

    def get_timestamps(self, time_mode: str) -> tuple[int, int]:
        """Time mode None: no clock."""
        return -1, -1

    def set_implicit_key(self, key: Any) -> None:
        """Not sent (see the module docstring)."""

    def remove_implicit_key(self) -> None:
        """Not sent."""


class StubTask:
    """:class:`fsstate_spark.tiered.processor.KeyedTask` without a store: the clock and the
    key binding go nowhere, the commit only closes the processor."""

    def __init__(self, owner: StubTiered) -> None:
        self._owner = owner

    def set_clock(self, now_ms: int) -> None:
        """No clock."""

    def enter(self, store_key: Any) -> None:
        """Nothing to bind."""

    def commit(self) -> None:
        """The processor's ``close`` (nothing to commit)."""
        self._owner.close()

    def fail(self) -> None:
        """The proxy's ``fail_task`` (no store: nothing to roll back)."""
        self._owner.fail_task()


class StubTiered:
    """The ``tiered()`` proxy as fsstate's loop uses it, without a store."""

    def __init__(self, processor: StatefulProcessor) -> None:
        self.processor = processor

    def begin_fast(self, handle: StatefulProcessorHandle) -> StubTask:
        """The processor's ``init``; the task's seam, whose clock and key binding go nowhere."""
        self.processor.init(handle)
        return StubTask(self)

    def close(self) -> None:
        """The processor's ``close`` (no commit)."""
        self.processor.close()

    def fail_task(self) -> None:
        """Nothing to fail."""


def _runner_conf() -> Any:
    from pyspark.worker import RunnerConf

    return RunnerConf({"spark.sql.session.timeZone": "UTC"})


def fsstate_task(proc: StatefulProcessor, pandas: bool) -> Callable[[list[pa.RecordBatch]], Any]:
    """fsstate's loop over a task's batches (``FastTask.run``), as a function of them."""
    from fsstate_spark.pyspark.v4_2 import task_conf
    from fsstate_spark.tiered.fast_loop import FastTask, Flavour, parse_offsets

    conf = task_conf(_runner_conf())  # the settings a real task gets (4.2's and 4.3's adapter)
    flavour = Flavour(
        pandas,
        False,
        conf.timezone,
        conf.max_records_per_batch,
        conf.max_bytes_per_batch,
        conf.prefer_int_ext_dtype,
    )

    def run(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = FastTask(
            cast(Any, StubTiered(proc)),
            "None",
            OUTPUT_TYPE,
            parse_offsets(ARGS),
            flavour,
            conf,
            cast(Any, StubClient()),
        )
        return task.run(0, iter(batches))

    return run


def pyspark_task(proc: StatefulProcessor, pandas: bool) -> Callable[[list[pa.RecordBatch]], Any]:
    """PySpark's loop over a task's batches: ``read_udfs``' function for the eval type, built
    with the command and the state-server client replaced (see the module docstring)."""
    import pyspark.worker
    from pyspark.sql.streaming.stateful_processor_util import TransformWithStateInPandasUdfUtils
    from pyspark.util import PythonEvalType

    w: Any = pyspark.worker  # its names are patched for a moment, not called as typed
    kind = "PANDAS" if pandas else "PYTHON_ROW"
    eval_type = getattr(PythonEvalType, f"SQL_TRANSFORM_WITH_STATE_{kind}_UDF")
    udf = TransformWithStateInPandasUdfUtils(proc, "None").transformWithStateUDF
    info = SimpleNamespace(udfs=[b""], args=ARGS, kwargs={}, result_id=0)
    saved = w.read_command, w.StatefulProcessorApiClient
    w.read_command = lambda _ser, _udf: (udf, OUTPUT_TYPE)
    w.StatefulProcessorApiClient = StubClient
    try:
        func = w.read_udfs(
            None, [info], eval_type, _runner_conf(), w.EvalConf({"state_server_socket_port": "0"})
        )[0]
    finally:
        w.read_command, w.StatefulProcessorApiClient = saved

    def run(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return cast(Iterator[pa.RecordBatch], func(0, iter(batches)))

    return run


@dataclass
class LoopRun:
    """One processor in one flavour on one loop, task after task."""

    processor: str
    flavour: str
    loop: str
    seconds: list[float] = field(default_factory=list)
    out_rows: int = -1

    @property
    def tag(self) -> str:
        """``processor/flavour/loop``."""
        return f"{self.processor}/{self.flavour}/{self.loop}"

    def call(self, batches: list[pa.RecordBatch]) -> Callable[[], None]:
        """One task over ``batches`` (a fresh processor and task each time)."""
        pandas = self.flavour == "pandas"
        build = fsstate_task if self.loop == "fsstate" else pyspark_task
        task = build(make_processor(self.processor, pandas), pandas)

        def one() -> None:
            self.out_rows = sum(b.num_rows for b in task(batches))

        return one


def task_batches(seed: int) -> tuple[list[pa.RecordBatch], int]:
    """A task's input as Spark sends it (sorted by key, 10,000-row batches) and its distinct
    keys."""
    table = batch_table(seed, ROWS, KEYS).sort_by("k")
    keys = int(pc.count_distinct(table.column("k")).as_py())
    return table.to_batches(max_chunksize=10_000), keys


def run_loop_cost(ctx: BenchContext) -> list[Result]:
    """The loop-cost rows: every run interleaved task by task."""
    warmup = 1
    repeat = ctx.pick(3, 9)
    runs = [LoopRun(p, f, lp) for p in PROCESSORS for f in FLAVOURS for lp in LOOPS]
    keys: list[int] = []
    for t in range(warmup + repeat):
        batches, n = task_batches(t)
        order = runs[t % len(runs) :] + runs[: t % len(runs)]
        for r in order:
            dt = time_call(r.call(batches))
            want = 0 if r.processor == "idle" else n
            if r.out_rows != want:
                raise AssertionError(f"{r.tag}: {r.out_rows} output rows, expected {want}")
            if t >= warmup:
                r.seconds.append(dt)
        if t >= warmup:
            keys.append(n)
            ctx.log(
                f"  loop task {t}: "
                + ", ".join(f"{r.tag} {1e6 * r.seconds[-1] / n:.1f}" for r in runs)
                + " µs/key"
            )
        else:
            ctx.log(f"  loop task {t} (warm-up)")
    return _loop_results(runs, keys)


def _loop_results(runs: list[LoopRun], keys: list[int]) -> list[Result]:
    by = {(r.processor, r.flavour, r.loop): r for r in runs}
    work = (
        f"one task in this process, no Spark: {ROWS:,} rows over {KEYS:,} keys "
        f"(~{median([float(k) for k in keys]):,.0f} distinct keys = calls) in Arrow batches of "
        "10,000 rows grouped by key, as Spark's operator sends them; no state, no store, no "
        "state-server requests; task wall time / distinct keys"
    )
    out: list[Result] = []
    for flavour, fname in FLAVOURS.items():
        for proc, pname in PROCESSORS.items():
            fast, stock = by[(proc, flavour, "fsstate")], by[(proc, flavour, "pyspark")]
            us = {r.loop: [1e6 * s / k for s, k in zip(r.seconds, keys, strict=True)]
                  for r in (fast, stock)}  # fmt: skip
            ratio = median(us["pyspark"]) / median(us["fsstate"])
            for run, goal in ((fast, GOAL_US), (stock, None)):
                xs = us[run.loop]
                out.append(
                    Result(
                        suite=SUITE,
                        name=f"loop cost per key, {fname}, {pname}: {LOOPS[run.loop]} (µs)",
                        value=median(xs),
                        unit="µs",
                        goal=goal,
                        goal_op="<=",
                        notes=f"{_what(proc, run.loop)}; PySpark's / fsstate's: {ratio:.1f}x "
                        f"({spread_text(xs)}); {work}",
                        samples=xs,
                    )
                )
    return out


def _what(proc: str, loop: str) -> str:
    what = {
        "idle": "Idle: no output, rows never read",
        "one_row": "OneRow: one prebuilt output row per key, rows never read",
        "read_rows": "ReadRows: reads every chunk / Row of its key, one prebuilt row",
    }[proc]
    if loop == "fsstate":
        return f"{what}; fsstate's worker loop (FastTask.run, without the store)"
    return (
        f"{what}; PySpark's own loop (read_udfs' function), without its per-key round trip "
        "to the state server: a lower bound"
    )
