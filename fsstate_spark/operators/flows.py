"""Streams of stateful operators over whole Arrow batches: the Spark user's API.

A :class:`Flow` describes, lazily, how one micro-batch's rows turn into output: a source
(a streaming DataFrame, :func:`source`), stateless steps (:meth:`Flow.transform`, any
DataFrame function) and stateful stages (windowed / session / retracting aggregation,
deduplication, joins, custom batch processors). :func:`fsstate_spark.operators.driver.write_stream`
runs it with ``foreachBatch``: per micro-batch each stage is a shuffle to a fixed partition
count by its keys and a ``mapInArrow`` whose tasks run :mod:`fsstate.operators` on their
partition's rows and state. No per-key framework is involved.

Invariants:

* Operator names are unique within a query (checked when a stage is added); each operator's
  state lives under ``<state_uri>/<name>``.
* A flow is immutable: adding a step returns a new flow, so one flow can feed several stages.
* A flow's plan is data (:data:`Step`: sources, transforms, stages and joins of two plans), and
  one function walks it (:func:`walk`) with a :class:`StageRunner` that turns each stateful
  stage into DataFrames; a step shared by two branches (one flow feeding both sides of a
  join) is walked once per batch.
* Stages see Spark's column types as Arrow (timestamps as ``timestamp[us, UTC]``); their
  output schema is known on the driver before anything runs
  (:meth:`fsstate.operators.Operator.output_schema`).
* A flow's sources are all DataFrames of classic sessions or all of Spark Connect clients
  (:func:`is_connect`); the same flow gives the same rows either way. On Spark Connect the
  flow's steps run in the server's ``foreachBatch`` process, on each batch's DataFrame.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fsstate.errors import ConfigError
from fsstate.operators import (
    Agg,
    BatchProcessor,
    ChangelogJoin,
    Deduplicate,
    IntervalJoin,
    Operator,
    RetractAggregate,
    SessionAggregate,
    Window,
    WindowAggregate,
)
from fsstate.operators.base import SIDE

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_UNIT_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "secs": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "mins": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
    "week": 604_800_000,
    "weeks": 604_800_000,
}


def parse_duration_ms(value: str | int) -> int:
    """A duration as Spark writes them (``"10 seconds"``, ``"1 hour 30 minutes"``) or an int
    of milliseconds, in milliseconds.

    Raises:
        ConfigError: the text is not a duration.
    """
    if isinstance(value, bool):
        raise ConfigError(f"duration {value!r} is not a number of ms or a text like '10 seconds'")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"duration {value} ms is negative")
        return value
    text = str(value).strip().lower()
    total, pos = 0.0, 0
    for m in _DURATION.finditer(text):
        if text[pos : m.start()].strip() or m.group(2) not in _UNIT_MS:
            raise ConfigError(f"duration {value!r}: use e.g. '10 seconds', '1 minute', 500")
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if pos == 0 or text[pos:].strip():
        raise ConfigError(f"duration {value!r}: use e.g. '10 seconds', '1 minute', 500")
    return round(total)


@dataclass(frozen=True, eq=False)
class Source:
    """A streaming DataFrame and its watermark (event-time column, delay in ms)."""

    df: DataFrame
    time: str | None = None
    delay_ms: int = 0


@dataclass(frozen=True, eq=False)
class StageSpec:
    """A stateful stage: its operator, partitioning columns and the watermark inputs it
    records (operator input name -> source)."""

    op: Operator
    keys: tuple[str, ...]
    records: tuple[tuple[str, Source], ...] = ()


Prepare = Callable[[DataFrame, int], DataFrame]  # (a stage's input, the epoch) -> its input


@dataclass(frozen=True, eq=False)
class SourceStep:
    """The rows of a source."""

    source: Source


@dataclass(frozen=True, eq=False)
class TransformStep:
    """A stateless DataFrame function of the parent's rows."""

    parent: Step
    fn: Callable[[DataFrame], DataFrame]


@dataclass(frozen=True, eq=False)
class StageStep:
    """A stateful stage over the parent's rows; ``prepare`` turns them into what its tasks
    take, per epoch (e.g. an initial state joined in at epoch 0)."""

    parent: Step
    spec: StageSpec
    prepare: Prepare | None = None


@dataclass(frozen=True, eq=False)
class JoinStep:
    """Both sides' rows in one DataFrame (:func:`_join_input`), keyed by ``pairs``."""

    left: Step
    right: Step
    pairs: tuple[tuple[str, str], ...]
    op_column: str | None = None


Step = SourceStep | TransformStep | StageStep | JoinStep


class StageRunner(Protocol):
    """What a walk of a plan asks to run a stateful stage of one epoch (the driver's)."""

    @property
    def epoch(self) -> int: ...

    def run_stage(self, spec: StageSpec, df: DataFrame) -> DataFrame:
        """The stage's output rows from its input rows."""
        ...


def walk(step: Step, dfs: Mapping[int, DataFrame], runner: StageRunner) -> DataFrame:
    """The rows of ``step`` for one batch: ``dfs`` maps ``id(source)`` to the source's rows of
    the batch; every step is computed once, however many steps read it."""
    done: dict[int, DataFrame] = {}

    def rows(s: Step) -> DataFrame:
        have = done.get(id(s))
        if have is not None:
            return have
        if isinstance(s, SourceStep):
            out = dfs[id(s.source)]
        elif isinstance(s, TransformStep):
            out = s.fn(rows(s.parent))
        elif isinstance(s, StageStep):
            df = rows(s.parent)
            out = runner.run_stage(s.spec, s.prepare(df, runner.epoch) if s.prepare else df)
        else:
            out = _join_input(rows(s.left), rows(s.right), s.pairs, s.op_column)
        done[id(s)] = out
        return out

    return rows(step)


@dataclass(frozen=True, eq=False)
class Grouped:
    """A flow grouped by columns (:meth:`Flow.group_by`), as ``df.groupBy(...)``: what
    :func:`fsstate_spark.operators.transform_with_state` takes."""

    flow: Flow
    keys: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Flow:
    """A lazily described stream (see the module docstring). Build flows with
    :func:`source`, their methods, :func:`interval_join` and :func:`changelog_join`.

    Attributes:
        sources: the streaming sources, in the order their rows are tagged.
        stages: the stateful stages, in plan order.
        plan: the step whose rows are the flow's.
        origin: the source this flow's rows come from unchanged in time (None: none).
    """

    sources: tuple[Source, ...]
    stages: tuple[StageSpec, ...]
    plan: Step
    origin: Source | None = None  # the source this flow's rows come from unchanged in time

    # -- stateless ---------------------------------------------------------------------------
    def transform(self, fn: Callable[[DataFrame], DataFrame]) -> Flow:
        """Apply a DataFrame function to every micro-batch's rows (select, filter...)."""
        return Flow(self.sources, self.stages, TransformStep(self.plan, fn), self.origin)

    # -- stateful ----------------------------------------------------------------------------
    def group_by(self, *keys: str) -> Grouped:
        """The flow grouped by columns, for :func:`fsstate_spark.operators.transform_with_state`
        and :func:`~fsstate_spark.operators.transform_with_state_in_pandas`."""
        if not keys or not all(isinstance(k, str) and k for k in keys):
            raise ConfigError(f"group_by{keys!r}: give one or more column names")
        return Grouped(self, tuple(keys))

    def _stage(
        self,
        op: Operator,
        keys: Sequence[str],
        records: Sequence[tuple[str, Source]] = (),
        prepare: Prepare | None = None,
    ) -> Flow:
        """This flow followed by a stateful stage running ``op``, shuffled by ``keys``;
        ``prepare`` turns the stage's input into what its tasks take (per batch)."""
        names = [s.op.name for s in self.stages]
        if op.name in names:
            raise ConfigError(
                f"two stateful operators of one query are both named {op.name!r}; each needs "
                "its own name (its state lives under <state_uri>/<name>)"
            )
        spec = StageSpec(op, tuple(keys), tuple(records))
        step = StageStep(self.plan, spec, prepare)
        return Flow(self.sources, (*self.stages, spec), step, None)

    def _records(self, time: str) -> list[tuple[str, Source]]:
        o = self.origin
        return [("input", o)] if o is not None and o.time == time else []

    def window_aggregate(
        self,
        *,
        keys: Sequence[str],
        time: str,
        window: Window,
        aggs: Sequence[Agg],
        mode: str = "append",
        name: str = "window_aggregate",
    ) -> Flow:
        """``groupBy(window(time, ...), *keys).agg(*aggs)`` (tumbling or sliding windows;
        output columns ``window`` (struct start, end), the keys, the aggregates)."""
        op = WindowAggregate(name, keys=keys, time=time, window=window, aggs=aggs, mode=mode)
        return self._stage(op, keys, self._records(time))

    def session_aggregate(
        self,
        *,
        keys: Sequence[str],
        time: str,
        gap_ms: int,
        aggs: Sequence[Agg],
        name: str = "session_aggregate",
    ) -> Flow:
        """``groupBy(session_window(time, gap), *keys).agg(*aggs)`` in append mode (output
        columns ``session_window``, the keys, the aggregates)."""
        op = SessionAggregate(name, keys=keys, time=time, gap_ms=gap_ms, aggs=aggs)
        return self._stage(op, keys, self._records(time))

    def deduplicate(
        self, *, keys: Sequence[str], time: str, delay_ms: int | None = None, name: str = "dedup"
    ) -> Flow:
        """``dropDuplicatesWithinWatermark(keys)``: the delay defaults to the source's
        watermark delay (as Spark's)."""
        if delay_ms is None:
            if self.origin is None or self.origin.time is None:
                raise ConfigError(
                    f"operator {name!r}: deduplicate needs delay_ms, or a source with a "
                    "watermark on its time column"
                )
            delay_ms = self.origin.delay_ms
        op = Deduplicate(name, keys=keys, time=time, delay_ms=delay_ms)
        return self._stage(op, keys, self._records(time))

    def retract_aggregate(
        self,
        *,
        keys: Sequence[str],
        aggs: Sequence[Agg],
        output: str = "changelog",
        name: str = "retract_aggregate",
    ) -> Flow:
        """Aggregate a change stream (column ``op``: +1 insert, -1 delete) with retractions;
        output a changelog (``op`` -1 old result, +1 new) or upserts."""
        return self._stage(RetractAggregate(name, keys=keys, aggs=aggs, output=output), keys)

    def process(self, processor: BatchProcessor, *, keys: Sequence[str]) -> Flow:
        """Run a :class:`fsstate.operators.BatchProcessor` on each partition's batch."""
        records = self._records(processor.time) if processor.time else []
        return self._stage(processor, keys, records)


def is_connect(obj: Any) -> bool:
    """Whether ``obj`` (a DataFrame, GroupedData...) belongs to a Spark Connect session."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def source(df: DataFrame, *, watermark: tuple[str, str | int] | None = None) -> Flow:
    """A flow of a streaming DataFrame's rows.

    Args:
        df: a streaming DataFrame (``spark.readStream...``) of a classic session or of a
            Spark Connect client (``pyspark.sql.DataFrame`` is the parent of both).
        watermark: ``(event-time column, delay)`` as ``withWatermark`` takes them (the delay
            as ``"10 seconds"`` or milliseconds).
    """
    if not isinstance(df, DataFrame) or not df.isStreaming:
        raise ConfigError("source() takes a streaming DataFrame (spark.readStream...)")
    if watermark is None:
        src = Source(df)
    else:
        col, delay = watermark
        if col not in df.columns:
            raise ConfigError(
                f"watermark column {col!r} is not a column of the source ({df.columns})"
            )
        src = Source(df, col, parse_duration_ms(delay))
    return Flow((src,), (), SourceStep(src), src)


def _merge(left: Flow, right: Flow) -> tuple[tuple[Source, ...], tuple[StageSpec, ...]]:
    sources = left.sources + tuple(s for s in right.sources if s not in left.sources)
    if len({is_connect(s.df) for s in sources}) > 1:
        raise ConfigError(
            "a flow joins a classic session's DataFrame with a Spark Connect one: use one kind"
        )
    names = [s.op.name for s in left.stages]
    stages = left.stages + tuple(s for s in right.stages if s not in left.stages)
    dup = [s.op.name for s in right.stages if s not in left.stages and s.op.name in names]
    if dup:
        raise ConfigError(f"two stateful operators of one query are named {dup[0]!r}")
    return sources, stages


def _join_input(
    left: DataFrame, right: DataFrame, on: Sequence[tuple[str, str]], op: str | None
) -> DataFrame:
    """Both sides' rows in one DataFrame: ``_side``, ``_k0..``, ``left``, ``right`` (+ ``op``)."""
    lcols = [c for c in left.columns if c != op]
    rcols = [c for c in right.columns if c != op]
    lstruct = F.struct(*[F.col(c) for c in lcols])
    rstruct = F.struct(*[F.col(c) for c in rcols])
    ltype = left.select(lstruct.alias("s")).schema["s"].dataType
    rtype = right.select(rstruct.alias("s")).schema["s"].dataType
    keys_l = [F.col(lk).alias(f"_k{i}") for i, (lk, _) in enumerate(on)]
    key_types = [left.schema[lk].dataType for lk, _ in on]
    keys_r = [
        F.col(rk).cast(t).alias(f"_k{i}") for i, ((_, rk), t) in enumerate(zip(on, key_types))
    ]
    extra_l = [F.col(op).cast("tinyint").alias("op")] if op else []
    extra_r = [F.col(op).cast("tinyint").alias("op")] if op else []
    lrows = left.select(
        F.lit(0).cast("tinyint").alias(SIDE),
        *keys_l,
        lstruct.alias("left"),
        F.lit(None).cast(rtype).alias("right"),
        *extra_l,
    )
    rrows = right.select(
        F.lit(1).cast("tinyint").alias(SIDE),
        *keys_r,
        F.lit(None).cast(ltype).alias("left"),
        rstruct.alias("right"),
        *extra_r,
    )
    return lrows.unionByName(rrows)


def _pairs(on: Sequence[str] | Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, k) if isinstance(k, str) else (k[0], k[1]) for k in on]


def interval_join(
    left: Flow,
    right: Flow,
    *,
    on: Sequence[str] | Sequence[tuple[str, str]],
    left_time: str,
    right_time: str,
    lower_ms: int,
    upper_ms: int,
    how: str = "inner",
    name: str = "interval_join",
) -> Flow:
    """Stream-stream join: equal keys and ``left.t - lower <= right.t <= left.t + upper``
    (output columns ``left`` and ``right``, structs of each side's row)."""
    pairs = _pairs(on)
    op = IntervalJoin(
        name,
        left_time=left_time,
        right_time=right_time,
        lower_ms=lower_ms,
        upper_ms=upper_ms,
        how=how,
    )
    sources, stages = _merge(left, right)
    records = [
        (side, f.origin)
        for side, f, t in (("left", left, left_time), ("right", right, right_time))
        if f.origin is not None and f.origin.time == t
    ]
    both = Flow(sources, stages, JoinStep(left.plan, right.plan, tuple(pairs)))
    return both._stage(op, [f"_k{i}" for i in range(len(pairs))], records)


def changelog_join(
    left: Flow,
    right: Flow,
    *,
    on: Sequence[str] | Sequence[tuple[str, str]],
    op_column: str = "op",
    name: str = "changelog_join",
) -> Flow:
    """Inner join of two change streams (column ``op_column``: +1 insert, -1 delete); output
    ``left``, ``right`` and ``op``, the changes of the join."""
    pairs = _pairs(on)
    sources, stages = _merge(left, right)
    both = Flow(sources, stages, JoinStep(left.plan, right.plan, tuple(pairs), op_column))
    return both._stage(ChangelogJoin(name), [f"_k{i}" for i in range(len(pairs))])


def arrow_schema_of(df: DataFrame) -> pa.Schema:
    """A DataFrame's schema as Arrow (timestamps ``timestamp[us, UTC]``)."""
    from fsstate_spark.pyspark.arrow import to_arrow_schema

    return to_arrow_schema(df.schema)
