"""The driver of a flow: ``foreachBatch`` per micro-batch, stages as shuffles + ``mapInArrow``.

:func:`write_stream` returns the ``DataStreamWriter`` of the flow's sources (two sources are
unioned, each row tagged with its source) with a ``foreachBatch`` function, :class:`Driver`,
that per micro-batch ``b``:

1. plans the epoch with the rules every driver shares
   (:class:`fsstate.operators.planning.EpochPlanner`, from the records of version ``b - 1`` of
   every partition of every stage): the watermarks, with Spark's rules (late rows are those at
   or below the watermark of ``b - 1``, eviction uses the watermark computed after ``b - 1``
   from every source's largest event time minus its delay, minimum across sources, a source
   without rows counting as 0), and for each stage that combines, whether combining pays;
   if a stage reads processing time (a StatefulProcessor in ``ProcessingTime`` or ``EventTime``
   mode), the batch's clock: the driver's time at the batch's first attempt, recorded with
   the state (put-if-absent), so a re-run of the batch uses the same;
2. builds the batch's plan (:mod:`fsstate_spark.operators.stage_plan`): every stage tags each
   row with its state partition ``pmod(hash(keys), partitions)`` (a stage without keys uses a
   literal Spark hashes to partition 0, so all its rows meet there) and is
   ``repartition(tasks, partition).mapInArrow(task)``, each task running epoch ``b`` of the
   partitions it owns exactly once (:mod:`fsstate_spark.operators.tasks`; with as many tasks
   as partitions, the plain ``repartition(partitions, *keys)``, a task per partition),
   preceded, for an operator
   that combines (decomposable aggregates) and whose previous epoch says combining pays
   (:mod:`fsstate.operators.combining`), by Spark's own aggregate of the batch into the
   operator's partials, grouped by keys (and pane) and the row's partition
   (:mod:`fsstate_spark.operators.partials`: the stage's shuffle then carries one row per
   group; where Spark's aggregate is not exact, a ``mapInArrow`` pre-aggregating each input
   partition with Arrow); at the first micro-batch ``b`` of a run, a stage whose state was
   written with another partition count is rescaled first, at version ``b - 1``
   (:mod:`fsstate_spark.operators.stage_rescale`), and every stage's stores are then those of
   its layout generation in force; before that, and before anything is written, the state's
   owner record is checked (a state URI belongs to one checkpoint: another checkpoint, a copy's
   included, is refused) and, at the first batch of a run (and the next while a batch finds its
   versions there), the batch's versions already on storage are checked against the batch's
   planning (Spark's ``batchTimestampMs``, which every version records: a checkpoint restored
   from a backup beside state that went on is refused)
   (:mod:`fsstate_spark.operators.lineage`);
3. hands the last stage's DataFrame to the user's sink (``sink(df, batch_id)``; without one the
   rows are dropped with Spark's ``noop`` format);
4. checks that every partition of every stage committed ``b`` (from the receipts its tasks
   add to an accumulator, the version's record; a partition without one, as on Spark Connect,
   has its manifest read: :func:`fsstate.store.record.read_records`), which also gives step 1
   of the next batch, and keeps the receipts' figures (each version's summary and commit
   time) in :attr:`Driver.history` for :mod:`fsstate_spark.metrics`; partitions the sink
   did not compute (it read only part of the DataFrame) are computed then, by writing the
   DataFrame to ``noop``: their epochs commit, the others adopt what they published. So a
   batch never ends with a partition behind, which the next batch would find as a missing
   version.

Exactly once, end to end: Spark re-runs an uncommitted batch with the same input after a
restart (the same planning: its offsets entry, its ``batchTimestampMs``); stages then
adopt their published versions and produce the same rows, so an
idempotent sink (one that overwrites by batch id, or Spark's file sink semantics) sees each
batch's output once. Watermark differences from Spark: Spark runs *no-data* micro-batches to
emit and evict when only the watermark moved; a ``foreachBatch`` query gets no such batches, so
that work happens in the next batch with data (with
``spark.sql.streaming.noDataMicroBatches.enabled=false`` Spark's built-in operators behave the
same, which the equivalence tests use).

Spark Connect: a flow of a Connect client's DataFrames runs the same way. ``foreachBatch``
pickles the :class:`Driver` (with the flow, its sink and settings) and runs it in a Python
process of the server, once per query; there each batch's DataFrame belongs to a session
cloned from the client's, and everything above (Spark functions, ``repartition``,
``mapInArrow``, fsstate's FileIO) works on it unchanged, except receipts: Connect has no
accumulators, so step 4 reads every partition's manifest. The driver the client's writer
carries (``fsstate_driver``) is the pickled original: its counters stay at zero there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamWriter

from fsstate.errors import ConfigError, FsStateError, PartitionCountError, VersionNotFoundError
from fsstate.inspect.checkpoint import read_query_id
from fsstate.operators.base import Operator
from fsstate.operators.planning import EpochPlan, EpochPlanner, PlannedStage, WatermarkInput
from fsstate.operators.runner import check_layout
from fsstate.storage.fileio import FileIO
from fsstate.store.layout import continued_operator, in_force, read_layouts
from fsstate.store.record import Writer
from fsstate_spark.operators.flows import Flow, Source, StageSpec, walk
from fsstate_spark.operators.lineage import FlowLineage
from fsstate_spark.operators.partials import SparkPartials, spark_partials
from fsstate_spark.operators.processor_stage import ProcessorStage
from fsstate_spark.operators.settings import (
    PARTITIONS_DEFAULT,
    FlowSettings,
    resolve_flow_settings,
)
from fsstate_spark.operators.stage_plan import StagePlanner
from fsstate_spark.operators.stage_rescale import rescale_stage
from fsstate_spark.operators.tasks import PARTITION_COL
from fsstate_spark.pyspark import require_supported_pyspark
from fsstate_spark.receipts import (
    COMMIT_MS_KEY,
    SUMMARY_KEY,
    Receipts,
    merge_receipts,
    receipt,
    register_flow,
)
from fsstate_spark.runtime import QUERY_ID_PROPERTY, fileio_for
from fsstate_spark.state.keys import ints_hashed_to

if TYPE_CHECKING:  # Spark Connect's writer (not a subclass of the classic one)
    from pyspark.sql.connect.streaming.readwriter import DataStreamWriter as ConnectStreamWriter

log = logging.getLogger(__name__)

Sink = Callable[[DataFrame, int], Any]
SRC = "_fsstate_src"
CLOCK_DIR = "_fsstate_batches"  # <state_uri>/_fsstate_batches/<batch id>.json: batch clocks
CLOCK_KEEP = 3  # clock records kept (the last ones; a restart re-runs one batch at most)
TIMED_BATCHES_MAX = 64  # batches whose step times Driver.batch_ms keeps


class _Receipts(AccumulatorParam[dict[Any, Any]]):
    """Receipts of committed epochs, (stage, partition, epoch) -> the version's meta: merged
    by key (a repeated task adds the same receipt)."""

    def zero(self, value: dict[Any, Any]) -> dict[Any, Any]:
        return {}

    def addInPlace(self, value1: dict[Any, Any], value2: dict[Any, Any]) -> dict[Any, Any]:
        value1.update(value2)
        return value1


class Driver:
    """The ``foreachBatch`` function of a flow (see the module docstring)."""

    def __init__(self, flow: Flow, sink: Sink | None, config: FlowSettings) -> None:
        if not flow.stages:
            raise ConfigError("the flow has no stateful stage: use a plain streaming query")
        self.flow, self.sink, self.config = flow, sink, config
        self.partitions = config.partitions
        self.writer = Writer(uuid.uuid4().hex, uuid.uuid4().hex)
        self.batch_writer = self.writer  # the writer of the batch running (its planning time)
        self.lineage = FlowLineage(config)  # the state's owner, each batch's planning
        self.layouts: dict[str, str] = {}  # stage -> its layout generation directory
        self.planner: EpochPlanner | None = None  # made once the layouts are resolved
        self._clock = any(s.op.uses_clock for s in flow.stages)
        self._zero_key: int | None = None
        self._routes: tuple[int, ...] | None = None  # task -> an int Spark hashes to it
        self._tasks: int | None = config.tasks
        self.receipts: Any = None  # created at the first batch (classic PySpark only)
        self._combined: dict[tuple[str, pa.Schema], Operator] = {}
        self._partials: dict[tuple[str, pa.Schema], SparkPartials | None] = {}
        self._inputs = _watermark_inputs(flow)
        # diagnostics: each recent batch's step times in ms (and manifests read), newest last
        self.batch_ms: dict[int, dict[str, float]] = {}
        # the query this driver runs in (learnt at its first batch) and the figures of its
        # recent batches: query -> batch -> (stage, partition) -> receipt (fsstate_spark.receipts)
        self.query_id: str | None = None
        self.history: Receipts = {}
        if config.metrics:  # off: nothing to report, so the driver never looks for it
            register_flow(self)

    @property
    def manifest_reads(self) -> int:
        """Manifests the driver read (partitions without a receipt)."""
        return self.planner.manifest_reads if self.planner is not None else 0

    def combined_op(self, spec: StageSpec, input_schema: pa.Schema) -> Operator:
        """The stage's operator taking combined rows (one copy per stage and input schema)."""
        key = (spec.op.name, input_schema)
        op = self._combined.get(key)
        if op is None:
            op = self._combined[key] = spec.op.with_combined(input_schema)
        return op

    def spark_partials(self, spec: StageSpec, input_schema: pa.Schema) -> SparkPartials | None:
        """How Spark combines the stage's input (None: the operator combines in Python),
        built once per stage and input schema."""
        key = (spec.op.name, input_schema)
        if key not in self._partials:
            self._partials[key] = spark_partials(spec.op, input_schema)
        return self._partials[key]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (Spark Connect's ``foreachBatch``) without the Spark columns it built."""
        state = dict(self.__dict__)
        state["_partials"] = {}
        return state

    def zero_key(self, df: DataFrame) -> int:
        """A bigint literal that Spark's hash partitioning sends to partition 0: the key of a
        stage without keys (a global window or aggregate: every row in one partition, the
        one that holds its state). Found once per driver with Spark's own ``hash``."""
        if self._zero_key is None:
            self._zero_key = ints_hashed_to(df, self.partitions, "bigint")[0]
        return self._zero_key

    def task_count(self, df: DataFrame) -> int:
        """Spark tasks per stage: ``tasks=``, else the cluster's default parallelism (at most
        ``partitions``; on Spark Connect, which does not tell it, ``partitions``)."""
        if self._tasks is None:
            try:
                cores = int(df.sparkSession.sparkContext.defaultParallelism)
            except Exception:  # Spark Connect: no SparkContext
                cores = self.partitions
            self._tasks = max(1, min(self.partitions, cores))
        return self._tasks

    def owned(self, df: DataFrame) -> tuple[tuple[int, ...], ...] | None:
        """The state partitions of each task (None: one task per partition): partition ``p``
        goes to task ``p mod tasks``, so every task runs as many partitions as another, give
        or take one (Spark's hash of the partition number gave 4 partitions over 2 tasks as
        1 and 3: the batch waited for the task with three)."""
        tasks = self.task_count(df)
        if tasks == self.partitions:
            return None
        return tuple(tuple(range(t, self.partitions, tasks)) for t in range(tasks))

    def route(self, df: DataFrame) -> Column:
        """The expression a stage with fewer tasks than partitions repartitions by: for a row
        of partition ``p``, an int that Spark's hash partitioning into ``tasks`` sends to task
        ``p mod tasks`` (:meth:`owned`). The ints are found once per driver with Spark's own
        ``hash``; a task still checks every row's partition."""
        tasks = self.task_count(df)
        if self._routes is None:
            self._routes = ints_hashed_to(df, tasks, "int")
        values = ", ".join(str(v) for v in self._routes)
        return F.expr(f"element_at(array({values}), pmod(`{PARTITION_COL}`, {tasks}) + 1)")

    def _reset_receipts(self, batch_df: DataFrame) -> None:
        """An empty receipt accumulator for this batch's tasks (none on Spark Connect, which
        has no accumulators: the manifests are read instead)."""
        if self.receipts is None:
            try:
                sc = batch_df.sparkSession.sparkContext
            except Exception:  # Spark Connect: no SparkContext
                return
            self.receipts = sc.accumulator({}, _Receipts())
        self.receipts.value = {}

    def check(self) -> None:
        """Build the flow's plan over its sources once, for the schemas: a bad column, type or
        aggregate fails here, before the query starts, not in a worker."""
        dfs = {id(src): src.df for src in self.flow.sources}
        walk(self.flow.plan, dfs, StagePlanner(self, EpochPlan(0), None, schemas_only=True))

    def _resolve(self, fileio: FileIO, batch_df: DataFrame, batch_id: int) -> EpochPlanner:
        """At the run's first batch: the state's owner checked (before anything is written),
        every stage's layout generation, the batch's versions checked against its planning
        (:mod:`fsstate_spark.operators.lineage`), then stages whose state has another
        partition count rescaled (at the version this batch starts from), and the planner of
        the run's epochs. At later batches, the versions checked while the lineage asks."""
        if self.planner is not None:
            self.lineage.check(
                fileio, self._stage_layouts(), batch_id, self.batch_writer.planned_ms
            )
            return self.planner
        self.lineage.claim(fileio)
        version = batch_id - 1 if batch_id > 0 else None
        if version is not None:
            self._continue_renamed(fileio)
        rescale = []
        for spec in self.flow.stages:
            try:
                layout = check_layout(fileio, spec.op, self.partitions, version)
            except PartitionCountError:  # rescaled below, once the versions are checked
                layout = in_force(read_layouts(fileio, spec.op.name), version)
                rescale.append(spec)
            self.layouts[spec.op.name] = layout.dir
        self.lineage.check(fileio, self._stage_layouts(), batch_id, self.batch_writer.planned_ms)
        for spec in rescale:  # at the version this batch starts from
            layout = rescale_stage(
                batch_df.sparkSession, fileio, spec.op.name, spec.keys, self.config, version
            )
            self.layouts[spec.op.name] = layout.dir
        stages = [
            PlannedStage(s.op.name, self.partitions, self.layouts[s.op.name])
            for s in self.flow.stages
        ]
        self.planner = EpochPlanner(fileio, stages, self._inputs)
        return self.planner

    def _stage_layouts(self) -> list[tuple[str, str]]:
        """(operator, layout directory) of every stage."""
        return [(s.op.name, self.layouts[s.op.name]) for s in self.flow.stages]

    def _continue_renamed(self, fileio: FileIO) -> None:
        """A processor stage named after its processor's class whose name has no state takes
        over the one state of processor stages no stage of the flow claims (a renamed or
        replaced class: state follows the query's operator, as Spark's does).

        Raises:
            ConfigError: several unclaimed processor stages' states could be this one's.
        """
        claimed = {s.op.name for s in self.flow.stages}
        for spec in self.flow.stages:
            op = spec.op
            if not isinstance(op, ProcessorStage) or op.name_given:
                continue
            who = f"transform_with_state: the stage {op.name!r}"
            op.name = continued_operator(
                fileio, op.name, type(op).__name__, who, claimed=claimed, several="processor stages"
            )
            claimed.add(op.name)
        self._inputs = _watermark_inputs(self.flow)

    def batch_clock(self, fileio: FileIO, batch_id: int) -> int:
        """The processing time of micro-batch ``batch_id``: fixed by its first attempt and
        recorded with the state (``_fsstate_batches/<id>.json``, put-if-absent), so a batch
        re-run after a restart sees the same time (TTL and timers give the same rows)."""
        path = f"{CLOCK_DIR}/{batch_id:020d}.json"
        now = int(time.time() * 1000)
        if not fileio.publish_if_absent(path, json.dumps({"processing_time_ms": now}).encode()):
            now = int(json.loads(fileio.read_bytes(path))["processing_time_ms"])
        if batch_id >= CLOCK_KEEP:  # only a batch not yet committed by Spark is re-run
            with contextlib.suppress(FsStateError):
                fileio.delete(f"{CLOCK_DIR}/{batch_id - CLOCK_KEEP:020d}.json")
        return now

    # -- one micro-batch -----------------------------------------------------------------------
    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        steps = _Steps(self.batch_ms, batch_id)
        fileio = fileio_for(self.config.root, self.config.store.fsync)
        self.batch_writer = self.lineage.writer(self.writer, batch_id)
        planner = self._resolve(fileio, batch_df, batch_id)
        reads = planner.manifest_reads
        with steps("watermarks"):
            plan = planner.plan(batch_id, f" under {self.config.state_uri!r}")
        self._reset_receipts(batch_df)
        if len(self.flow.sources) == 1:
            dfs = {id(self.flow.sources[0]): batch_df}
        else:
            dfs = {
                id(src): batch_df.where(F.col(SRC) == i).select(f"_s{i}.*")
                for i, src in enumerate(self.flow.sources)
            }
        with steps("plan"):
            now = self.batch_clock(fileio, batch_id) if self._clock else None
            out = walk(self.flow.plan, dfs, StagePlanner(self, plan, now, schemas_only=False))
        with steps("job"):
            if self.sink is None:
                out.write.format("noop").mode("overwrite").save()
            else:
                self.sink(out, batch_id)
        with steps("commit check"):
            done = planner.complete(batch_id, self._received())
        if not done:  # the sink computed part of the output: compute the rest
            log.info("fsstate: batch %s: completing partitions the sink did not compute", batch_id)
            out.write.format("noop").mode("overwrite").save()
            if not planner.complete(batch_id, self._received()):
                raise VersionNotFoundError(
                    f"micro-batch {batch_id}: some partitions of the stages "
                    f"{[s.op.name for s in self.flow.stages]} did not commit under "
                    f"{self.config.state_uri!r}"
                )
        steps.add("manifest reads", planner.manifest_reads - reads)
        self._keep_figures(batch_df, batch_id)

    def _keep_figures(self, batch_df: DataFrame, batch_id: int) -> None:
        """Keep the batch's receipts (summaries and commit times) in :attr:`history`, under
        the query's id (the streaming query's local property on a classic session, else the
        checkpoint's ``metadata``; the batch's figures, :mod:`fsstate_spark.metrics`)."""
        if self.query_id is None:
            self.query_id = _query_id(batch_df, self.lineage)
        if self.query_id is None:
            return
        got = {
            (stage, partition): receipt(meta.get(SUMMARY_KEY), meta.get(COMMIT_MS_KEY) or 0.0)
            for (stage, partition, epoch), meta in self._received().items()
            if epoch == batch_id
        }
        merge_receipts(self.history, {self.query_id: {batch_id: got}})

    def _received(self) -> dict[Any, Any]:
        """The receipts this batch's tasks added (none on Spark Connect)."""
        return dict(self.receipts.value) if self.receipts is not None else {}


def _query_id(batch_df: DataFrame, lineage: FlowLineage) -> str | None:
    """The id of the streaming query running ``foreachBatch``: Spark's local property (classic
    sessions), else the checkpoint's ``metadata`` (Spark Connect; None if unreadable)."""
    with contextlib.suppress(Exception):  # Spark Connect: no SparkContext
        found = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if found:
            return str(found)
    ckpt = lineage.checkpoint()
    if ckpt is None:
        return None
    try:
        return read_query_id(ckpt)
    except FsStateError:
        return None


class _Steps:
    """Times the steps of one batch into ``batch_ms[batch]`` (the last
    :data:`TIMED_BATCHES_MAX` batches are kept)."""

    def __init__(self, batch_ms: dict[int, dict[str, float]], batch: int) -> None:
        self.times = batch_ms.setdefault(batch, {})
        while len(batch_ms) > TIMED_BATCHES_MAX:
            del batch_ms[next(iter(batch_ms))]
        self._name = ""
        self._t0 = 0.0

    def __call__(self, name: str) -> _Steps:
        self._name = name
        return self

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.add(self._name, (time.perf_counter() - self._t0) * 1000)

    def add(self, name: str, value: float) -> None:
        self.times[name] = self.times.get(name, 0.0) + value


def _watermark_inputs(flow: Flow) -> list[WatermarkInput]:
    """The flow's watermark inputs: each source with a watermark, recorded by the first stage
    that uses its time column on the source's rows.

    Raises:
        ConfigError: a source's watermark is followed by no stage.
    """
    out = []
    for i, src in enumerate(flow.sources):
        if src.time is None:
            continue
        rec = [(s.op.name, name) for s in flow.stages for name, o in s.records if o is src]
        if not rec:
            raise ConfigError(
                f"the watermark on {src.time!r} of source {i} is not followed by any stage "
                "(a stage must use that column as its event time on the source's rows)"
            )
        out.append(WatermarkInput(f"source{i}", rec[0][0], rec[0][1], src.delay_ms))
    return out


def _union(sources: tuple[Source, ...]) -> DataFrame:
    """One streaming DataFrame of several sources: ``_fsstate_src`` and one struct per source."""
    if len(sources) == 1:
        return sources[0].df
    structs = [F.struct(*[F.col(c) for c in s.df.columns]) for s in sources]
    types = [s.df.select(st.alias("x")).schema["x"].dataType for s, st in zip(sources, structs)]
    parts = []
    for i, (s, st) in enumerate(zip(sources, structs)):
        cols = [F.lit(i).alias(SRC)]
        for j, t in enumerate(types):
            cols.append((st if j == i else F.lit(None).cast(t)).alias(f"_s{j}"))
        parts.append(s.df.select(*cols))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def write_stream(
    flow: Flow,
    *,
    checkpoint_location: str,
    sink: Sink | None = None,
    partitions: int = PARTITIONS_DEFAULT,
    tasks: int | None = None,
    state_uri: str | None = None,
    memory_limit: int | str | None = None,
    **options: Any,
) -> DataStreamWriter | ConnectStreamWriter:
    """The ``DataStreamWriter`` that runs ``flow``; add a trigger and ``start()`` it (a Spark
    Connect one for a flow of a Connect client's DataFrames).

    The writer carries its :class:`Driver` as ``fsstate_driver`` (diagnostics: e.g.
    ``manifest_reads``, the manifests the driver had to read for lack of a task's receipt).

    Args:
        flow: the flow (its last stage's rows are the output).
        checkpoint_location: Spark's checkpoint location of the query.
        sink: ``sink(df, batch_id)`` writes a batch's output (idempotently per batch id for
            exactly-once output); None drops it.
        partitions: partitions of every stage's state, where keys live (recorded with the
            state; a flow started with another count rescales the state at its first
            micro-batch).
        tasks: Spark tasks per stage and batch, each running the epochs of several
            partitions (None: the default parallelism, at most ``partitions``): a batch pays
            Spark's per-task cost per task, not per partition.
        state_uri: where the operators' state lives (default ``<checkpoint>/fsstate``).
        memory_limit: the engine's byte budget in each Python worker.
        **options: store, engine and storage settings (:mod:`fsstate_spark.operators.settings`).

    Raises:
        ConfigError: a setting is invalid, or two operators share a name.
        FsStateError: a stage does not fit its input (a missing column, an event-time column
            that is no time, an aggregate over a type it does not take), found by building
            the flow's plan once for its schemas.
    """
    require_supported_pyspark("write_stream()")
    config = resolve_flow_settings(
        checkpoint_location, partitions, state_uri, memory_limit, options, tasks=tasks
    )
    driver = Driver(flow, sink, config)
    driver.check()
    writer = _union(flow.sources).writeStream.foreachBatch(driver)
    writer.fsstate_driver = driver  # type: ignore[attr-defined]  # diagnostics (tests, benches)
    return writer.option("checkpointLocation", checkpoint_location)
