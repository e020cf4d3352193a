"""The conformance harness: scenarios as data, the ways that run them, the comparison.

A :class:`Scenario` is one of Spark's Python transformWithState tests (or one variant of it):
its micro-batches, its processor per flavour, its query. It runs three ways on the same
input: with Spark's handles (the plain processor in ``transformWithStateInPandas`` /
``transformWithState``, the reference), and with each way of :data:`WAYS`: ``"tiered-fast"``
(``tiered(processor)`` in the same Spark operator, run by fsstate's keyed loop, the session's
Python worker), ``"tiered-stock"`` (the same on PySpark's own per-key loop,
``fast_loop=False``) and ``"driver"`` (fsstate's flow driver,
``ops.transform_with_state[_in_pandas]`` and ``ops.write_stream``). A way is a runner looked
up in :data:`WAYS`, so a new way is one entry there.

Invariants:

* One JSON file per micro-batch (``write_batches``: distinct, increasing modification times),
  read with ``maxFilesPerTrigger=1`` under an ``availableNow`` trigger, with
  ``spark.sql.streaming.noDataMicroBatches.enabled=false`` (Spark's suites run so): a run's
  micro-batches are exactly its files, and a run that did not deliver every one of them to
  its sink is an error, never a shorter output.
* Session settings a scenario needs are set around its runs with ``session_conf`` and put
  back; every run gets fresh input, checkpoint and state directories.
* The reference is stored per PySpark minor (:mod:`.reference`: ``make
  conformance-reference`` runs Spark's handles and stores their rows), or, with
  ``FSSTATE_CONFORMANCE_REFERENCE`` set to ``live`` (and while it is being made), runs once
  per scenario and flavour in a test session (:class:`Conformance` memoizes it); either way it
  is shared by every way. It must reproduce the values Spark's own test asserts
  (``Scenario.expected``, its expected errors), or every test of that scenario fails: a port
  that does not reproduce Spark's test proves nothing. On an older PySpark minor (``make
  test-compat``) a scenario its own handles do not reproduce is not one of that minor (its
  behaviour changed later): skipped there, with what its handles did. A stored reference is
  looked up before the way runs; a live one runs after it, so a way that fails where Spark's
  test passes (or passes where it expects an error) fails without running it (on an older
  minor, once the reference says the scenario is the minor's).
* Outputs are compared batch by batch as multisets of rows (order within a micro-batch is
  not defined); maps compare as sets of entries. A step where Spark's handles fail must fail
  in the way too, and the other way round.
* A scenario's ``normalize`` blanks only values its timing does not make certain (wall-clock
  times); ``check`` asserts what the timing does make certain, on every way's output.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark
import pytest
from pyspark.sql import DataFrame, GroupedData, Row, SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from devkit.spark_local import session_conf, write_batches
from fsstate_spark import operators as ops
from fsstate_spark import tiered
from fsstate_spark.pyspark import PYSPARK_MINOR, ROW_TRANSFORM_WITH_STATE

if TYPE_CHECKING:
    from tests.fsstate_spark.conformance.reference import StoredReferences

FLAVOURS = ("pandas", "row")
ID_TEMPERATURE = "id STRING, temperature INT"
RUN_TIMEOUT_S = 240
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"

Batch = Sequence[Mapping[str, Any]]
Factory = Callable[[], StatefulProcessor]


# -- scenarios -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One streaming query of a scenario: its processor per flavour, its output schema and the
    micro-batches (files) it adds. Later steps restart on the same checkpoint and input.

    ``spark_error``: Spark's test expects this step to fail with this text in the error.
    """

    processors: Mapping[str, Factory]
    output: str
    batches: Sequence[Batch]
    spark_error: str | None = None


@dataclass(frozen=True)
class Difference:
    """A known difference (issue 38): the ways and flavours where a scenario fails for it.

    ``ways`` None: every fsstate way (a new way inherits it); ``flavours`` None: both.
    """

    number: int
    detail: str
    ways: tuple[str, ...] | None = None
    flavours: tuple[str, ...] | None = None

    def applies(self, way: str, flavour: str) -> bool:
        return (self.ways is None or way in self.ways) and (
            self.flavours is None or flavour in self.flavours
        )

    @property
    def reason(self) -> str:
        return f"issue 38 difference {self.number}: {self.detail}"


ALL_WAYS = "*"

# Known differences are Difference objects a scenario lists (strict xfail where they apply):
# there are none; issue 38's seven (deleteIfExists then use, a bare map user key, the driver's
# Arrow batch limits and decimal coercion, state identity by class name, a removed value
# field, a non-nullable state schema under Avro) were fixed, and their cases pass.


@dataclass(frozen=True)
class Scenario:
    """One of Spark's tests as data (see the module docstring).

    Attributes:
        name: Spark's test name, with the variant after a colon.
        steps: the queries, in order, on one checkpoint.
        input_schema: DDL of the JSON input.
        keys: grouping columns.
        time_mode / output_mode: of transformWithState.
        sink_mode: the writer's output mode.
        prepare: applied to the streaming input before grouping (columns, watermark).
        initial_state: ``(conformance, flavour) -> DataFrame`` of the initial state (grouped
            by ``keys``), read in micro-batch 0.
        downstream: applied to transformWithState's output before the sink.
        event_time_column: ``eventTimeColumnName``.
        conf: session settings for the runs.
        partitions: shuffle partitions (Spark's operator) and partitions (the driver).
        batch_query: a batch (not streaming) query over the first batch's rows.
        gap_s: the sink sleeps this long after each micro-batch (later batch times are at
            least this much later).
        normalize: ``(batch id, row) -> row`` blanking values no timing makes certain.
        check: ``(rows by batch id, who) -> None`` asserting what the timing makes certain.
        expected: Spark's own expected rows per batch id, on ``expected_columns``.
        not_for: way (or ``"*"``) -> why the scenario cannot apply to it.
        differences: known differences (strict xfail).
        slow: marked ``slow`` (a variant another scenario covers, kept out of the budget).
    """

    name: str
    steps: tuple[Step, ...]
    input_schema: str = ID_TEMPERATURE
    keys: tuple[str, ...] = ("id",)
    time_mode: str = "None"
    output_mode: str = "Update"
    sink_mode: str = "update"
    prepare: Callable[[DataFrame], DataFrame] | None = None
    initial_state: Callable[[Conformance, str], DataFrame] | None = None
    downstream: Callable[[DataFrame], DataFrame] | None = None
    event_time_column: str = ""
    conf: Mapping[str, str] = field(default_factory=dict)
    partitions: int = 2
    batch_query: bool = False
    gap_s: float = 0.0
    normalize: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
    check: Callable[[Mapping[int, list[dict[str, Any]]], str], None] | None = None
    expected: Mapping[int, Sequence[tuple[Any, ...]]] | None = None
    expected_columns: tuple[str, ...] = ()
    not_for: Mapping[str, str] = field(default_factory=dict)
    differences: tuple[Difference, ...] = ()
    slow: bool = False

    @property
    def flavours(self) -> tuple[str, ...]:
        return tuple(f for f in FLAVOURS if f in self.steps[0].processors)

    @property
    def ident(self) -> str:
        return self.name.replace(" ", "_").replace(":", "-")

    def skip_reason(self, way: str) -> str | None:
        return self.not_for.get(way) or self.not_for.get(ALL_WAYS)

    def difference(self, way: str, flavour: str) -> Difference | None:
        return next((d for d in self.differences if d.applies(way, flavour)), None)


def step(
    processors: Mapping[str, Factory],
    output: str,
    *batches: Batch,
    spark_error: str | None = None,
) -> Step:
    """A :class:`Step` (batches as arguments)."""
    return Step(processors, output, tuple(batches), spark_error)


def flavours(pandas: Factory | None = None, row: Factory | None = None) -> dict[str, Factory]:
    """The processor factories of a step, per flavour (a flavour Spark lacks is left out)."""
    return {k: v for k, v in (("pandas", pandas), ("row", row)) if v is not None}


def rows(keys: Sequence[str], *values: Sequence[Any]) -> list[dict[str, Any]]:
    """A micro-batch from tuples (``rows(("id", "temperature"), ("0", 123), ...)``)."""
    return [dict(zip(keys, v)) for v in values]


STATE_API_WAYS = ("tiered-fast", "driver")
"""The ways of a file whose scenarios exercise the state API alone (state variables, TTL,
schema evolution, the fuzz tests): the handles a processor gets are one module for every way
(:mod:`fsstate_spark.state`), so PySpark's own loop (``tiered-stock``) would run the same
handles again; it runs the files that cross the loop (input batches, timers, initial state,
Arrow batch limits), and is the way of every scenario on PySpark 4.0 (``make test-compat``)."""

SLOW_WAYS = ("tiered-fast",)
"""The ways of a ``slow`` scenario (a variant of a behaviour another scenario covers in every
way): fsstate's keyed loop, against Spark's handles."""


def cases(scenarios: Sequence[Scenario], ways: Sequence[str] | None = None) -> list[Any]:
    """``pytest.param(scenario, way, flavour)`` for every scenario, flavour and way of ``ways``
    (default: every way; a ``slow`` scenario: :data:`SLOW_WAYS`; the environment's
    :data:`WAYS_ENV`, when set, instead of both): a skip mark where the scenario cannot apply
    to the way, a strict xfail where a known difference makes it fail."""
    out = []
    only = [w for w in os.environ.get(WAYS_ENV, "").split(",") if w]
    for scenario in scenarios:
        allowed = only or (SLOW_WAYS if scenario.slow else (ways or tuple(WAYS)))
        for flavour in scenario.flavours:
            for way in WAYS:
                if way not in allowed:
                    continue
                marks: list[Any] = [pytest.mark.slow] if scenario.slow else []
                reason = scenario.skip_reason(way)
                if flavour == "row" and not ROW_TRANSFORM_WITH_STATE:
                    reason = (
                        f"PySpark {pyspark.__version__} has no Row-flavour transformWithState "
                        "(the reference; 4.1+)"
                    )
                diff = scenario.difference(way, flavour)
                if reason is not None:
                    marks.append(pytest.mark.skip(reason=reason))
                elif diff is not None:
                    marks.append(pytest.mark.xfail(strict=True, reason=diff.reason))
                out.append(
                    pytest.param(
                        scenario, way, flavour, id=f"{scenario.ident}-{way}-{flavour}", marks=marks
                    )
                )
    return out


# -- outcomes --------------------------------------------------------------------------------
@dataclass
class StepOutcome:
    """What one step delivered: rows per micro-batch, or the error that ended it."""

    batches: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Outcome:
    """A scenario's run by one way (or the reference): its steps and checkpoint."""

    steps: list[StepOutcome]
    checkpoint: Path | None  # None: a stored reference (nothing ran)

    @property
    def batches(self) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        for s in self.steps:
            out.update(s.batches)
        return out


def canonical(value: Any) -> Any:
    """A hashable form of a collected value: rows and lists as tuples, maps as sorted
    entries, NaN as one value."""
    if isinstance(value, Row):
        return tuple((k, canonical(v)) for k, v in value.asDict().items())
    if isinstance(value, dict):
        return (
            "map",
            tuple(sorted(((canonical(k), canonical(v)) for k, v in value.items()), key=repr)),
        )
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple((k, canonical(v)) for k, v in row.items())


def _show(row: Any) -> str:
    text = repr(row)
    return text if len(text) <= 300 else f"{text[:300]}... ({len(text)} chars)"


def multiset(batch: Sequence[Mapping[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(_row_key(r) for r in batch)


# -- running ---------------------------------------------------------------------------------
class Conformance:
    """Runs scenarios for one test session: fresh directories per run, the reference memo.

    ``stored``: the stored references (:mod:`.reference`) the ways are compared with; None
    runs Spark's handles in the session, once per scenario and flavour, and keeps what
    :meth:`spark_state` read of their checkpoints (``state_reads``, for storing).
    """

    def __init__(
        self, spark: SparkSession, root: Path, stored: StoredReferences | None = None
    ) -> None:
        self.spark = spark
        self.root = root
        self.stored = stored
        self.runs = 0
        self._outcomes: dict[Entry, Outcome] = {}
        self.state_reads: dict[tuple[str, str], dict[str, DataFrame]] = {}

    def new_dir(self, label: str) -> Path:
        self.runs += 1
        path = self.root / f"{self.runs:04d}-{label}"
        path.mkdir(parents=True)
        return path

    @contextmanager
    def settings(self, scenario: Scenario) -> Iterator[None]:
        conf = {
            NO_DATA_BATCHES: "false",
            SHUFFLE_PARTITIONS: str(scenario.partitions),
            **scenario.conf,
        }
        with session_conf(self.spark, **conf):
            yield

    def reference(self, scenario: Scenario, flavour: str) -> Outcome:
        """Spark's handles on ``scenario`` (stored, or run once per session), checked against
        the values Spark's own test asserts. On another PySpark minor than the one the tests
        were ported from (:data:`PORTED_FROM`), a scenario whose values that minor's own
        handles do not give is one the minor does not have: skipped, with what its handles
        did."""
        if self.stored is not None:
            outcome = self.stored.outcome(scenario, flavour)
        else:
            outcome = self.outcome(SPARK, scenario, flavour)
        if PYSPARK_MINOR == PORTED_FROM:
            _check_reference(scenario, flavour, outcome)
            return outcome
        try:
            _check_reference(scenario, flavour, outcome)
        except AssertionError as exc:
            pytest.skip(
                f"not a scenario of PySpark {pyspark.__version__}: its own handles do not give "
                f"Spark {PORTED_FROM[0]}.{PORTED_FROM[1]}'s test's values "
                f"({stable(str(exc))[:300]})"
            )
        return outcome

    def check(self, scenario: Scenario, way: str, flavour: str) -> None:
        """Run ``scenario`` ``way`` and compare it, batch by batch, with Spark's handles."""
        if self.stored is not None or PYSPARK_MINOR != PORTED_FROM:
            self.reference(scenario, flavour)  # first: is it stored, and of this minor?
        if way in SPARK_OPERATOR_WAYS:
            got = self.outcome(way, scenario, flavour)
        else:
            got = WAYS[way](self, scenario, flavour)
        against_sparks_test(scenario, way, flavour, got)  # no reference needed to fail
        ref = self.reference(scenario, flavour)
        compare(scenario, way, flavour, ref, got)

    def spark_state(
        self, scenario: Scenario, flavour: str, var: str, columns: tuple[str, ...]
    ) -> DataFrame:
        """``columns`` of state variable ``var`` in the checkpoint of ``scenario``'s reference,
        read with Spark's ``statestore`` source (stored: the rows that read gave)."""
        key = f"{var}: {', '.join(columns)}"
        if self.stored is not None:
            self.reference(scenario, flavour)  # skips where the minor lacks the scenario
            schema, rows = self.stored.state_read(scenario, flavour, key)
            return self.spark.createDataFrame(rows, schema)
        checkpoint = self.reference(scenario, flavour).checkpoint
        df = (
            self.spark.read.format("statestore")
            .option("path", str(checkpoint))
            .option("stateVarName", var)
            .load()
            .selectExpr(*columns)
        )
        self.state_reads.setdefault((scenario.name, flavour), {})[key] = df
        return df

    def outcome(self, label: str, scenario: Scenario, flavour: str) -> Outcome:
        """``scenario`` in Spark's operator with Spark's handles (``label`` ``"spark"``) or a
        way of :data:`SPARK_OPERATOR_WAYS`, run once per session."""
        entry = (label, scenario.name, flavour)
        if entry not in self._outcomes:
            wrap = SPARK_WRAPS[label]
            self._outcomes[entry] = run_spark(self, scenario, flavour, label, wrap)
        return self._outcomes[entry]


WAYS_ENV = "FSSTATE_CONFORMANCE_WAYS"
"""Comma-separated ways to run (default: every way); ``make test-compat`` runs one per minor."""

PORTED_FROM = (4, 3)
"""The PySpark minor whose Python transformWithState tests the scenarios port."""

Entry = tuple[str, str, str]  # (label, scenario name, flavour)
SPARK = "spark"


def _check_reference(scenario: Scenario, flavour: str, ref: Outcome) -> None:
    where = f"{scenario.name} [spark's handles, {flavour}]"
    for i, (st, s) in enumerate(zip(scenario.steps, ref.steps)):
        if st.spark_error is None:
            assert s.error is None, (
                f"{where} step {i}: fails where Spark's test passes: {cause(s.error or '')}"
            )
        else:
            assert s.error is not None and st.spark_error in s.error, (
                f"{where} step {i}: Spark's test expects an error with {st.spark_error!r}, "
                f"got {cause(s.error) if s.error else 'none'}"
            )
    if scenario.check is not None:
        scenario.check(ref.batches, where)
    if scenario.expected is None:
        return
    got = _normalized(scenario, ref)
    for batch, want in scenario.expected.items():
        have = Counter(tuple(r[c] for c in scenario.expected_columns) for r in got.get(batch, []))
        assert have == Counter(want), (
            f"{where} batch {batch}: the port does not reproduce Spark's expected rows "
            f"{sorted(want, key=repr)}; got {sorted(have.elements(), key=repr)}"
        )


def _normalized(scenario: Scenario, outcome: Outcome) -> dict[int, list[dict[str, Any]]]:
    fix = scenario.normalize
    return {
        b: [fix(b, dict(r)) if fix else r for r in batch] for b, batch in outcome.batches.items()
    }


def against_sparks_test(scenario: Scenario, way: str, flavour: str, got: Outcome) -> None:
    """Fail if a step of ``got`` fails where Spark's test expects it to pass, or passes where
    Spark's test expects an error: known without running the reference."""
    where = f"{scenario.name} [{way}, {flavour}]"
    for i, (st, g) in enumerate(zip(scenario.steps, got.steps)):
        if st.spark_error is None:
            assert g.error is None, (
                f"{where} step {i}: {way} fails where Spark's test passes: {cause(g.error)}"
            )
        else:
            assert g.error is not None, (
                f"{where} step {i}: {way} succeeds where Spark's test expects an error with "
                f"{st.spark_error!r}; rows: {_show(g.batches)}"
            )


def compare(scenario: Scenario, way: str, flavour: str, ref: Outcome, got: Outcome) -> None:
    """Assert that ``got`` (``way``) delivered what Spark's handles did, step by step and
    batch by batch."""
    where = f"{scenario.name} [{way}, {flavour}]"
    for i, (r, g) in enumerate(zip(ref.steps, got.steps)):
        if r.error is not None:
            assert g.error is not None, (
                f"{where} step {i}: Spark's handles fail ({cause(r.error)}) but {way} succeeds "
                f"with {_show(g.batches)}"
            )
            continue
        assert g.error is None, (
            f"{where} step {i}: {way} fails where Spark's handles succeed: {cause(g.error)}"
        )
    if scenario.check is not None:
        scenario.check(got.batches, where)
    want, have = _normalized(scenario, ref), _normalized(scenario, got)
    for batch in sorted(set(want) | set(have)):
        a, b = multiset(want.get(batch, [])), multiset(have.get(batch, []))
        if a != b:
            only_ref = [_show(dict(k)) for k in (a - b).elements()]
            only_way = [_show(dict(k)) for k in (b - a).elements()]
            pytest.fail(
                f"{where} batch {batch}: outputs differ; only with Spark's handles: {only_ref}; "
                f"only with {way}: {only_way}",
                pytrace=False,
            )


Wrap = Callable[[StatefulProcessor, Path], StatefulProcessor]


class _Sink:
    """A ``foreachBatch`` function collecting each micro-batch's rows (a retried batch
    replaces its rows)."""

    def __init__(self, scenario: Scenario, downstream: bool) -> None:
        self.gap_s = scenario.gap_s
        self.downstream = scenario.downstream if downstream else None
        self.batches: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if self.downstream is not None:
            df = self.downstream(df)
        self.batches[batch_id] = [r.asDict() for r in df.collect()]
        if self.gap_s:
            time.sleep(self.gap_s)


WRAPPERS = ("PythonException", "StreamingQueryException", "Py4JJavaError", "SparkException")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception))(?::\s.*)?$")
_RUN_IDS = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")  # a query's, a run's


def stable(text: str) -> str:
    """``text`` without what differs between runs of the same query (its ids)."""
    return _RUN_IDS.sub("<id>", text)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def cause(error: str) -> str:
    """An error's root cause for a message: the innermost Python exception line of the
    worker's or the driver's traceback, then the error's first line."""
    causes = [
        line.strip()
        for line in error.splitlines()
        if (m := _EXC_LINE.match(line.strip()))
        and not m.group(1).endswith(WRAPPERS)
        and not line.strip().startswith(("java.", "org.", "scala."))
    ]
    head = stable(error.splitlines()[0])[:300] if error else ""
    return f"{causes[-1]} (in: {head})" if causes else stable(error)[:2000]


def _await(query: Any, seen: Mapping[int, Any], first: int, count: int) -> str | None:
    """Wait for an availableNow query; None once its data batches ``first .. first+count-1``
    have all reached the sink (``seen``), else what went wrong."""
    try:
        finished = query.awaitTermination(RUN_TIMEOUT_S)
    except Exception as exc:  # the query failed: StreamingQueryException
        query.stop()
        return _error(exc)
    if not finished:
        query.stop()
        return f"the query did not finish in {RUN_TIMEOUT_S} s"
    missing = sorted(set(range(first, first + count)) - set(seen))
    return f"micro-batches {missing} never reached the sink" if missing else None


def _frame(conf: Conformance, scenario: Scenario, input_dir: Path) -> DataFrame:
    df = (
        conf.spark.readStream.schema(scenario.input_schema)
        .option("maxFilesPerTrigger", 1)
        .json(str(input_dir))
    )
    return scenario.prepare(df) if scenario.prepare is not None else df


def _initial(conf: Conformance, scenario: Scenario, flavour: str) -> GroupedData | None:
    if scenario.initial_state is None:
        return None
    return scenario.initial_state(conf, flavour).groupBy(*scenario.keys)


def _tws(
    grouped: GroupedData,
    processor: StatefulProcessor,
    scenario: Scenario,
    output: str,
    flavour: str,
    initial: GroupedData | None,
) -> DataFrame:
    call = grouped.transformWithStateInPandas if flavour == "pandas" else grouped.transformWithState
    return call(
        statefulProcessor=processor,
        outputStructType=output,
        outputMode=scenario.output_mode,
        timeMode=scenario.time_mode,
        initialState=initial,
        eventTimeColumnName=scenario.event_time_column,
    )


def _run_steps(
    scenario: Scenario,
    input_dir: Path,
    downstream: bool,
    start: Callable[[Step, _Sink], Any],
) -> list[StepOutcome]:
    """Each step of ``scenario`` in turn: its batches written to ``input_dir``, its query
    started by ``start(step, sink)`` (a fresh :class:`_Sink`, ``downstream`` as there) and
    awaited (:func:`_await`); stops after the first step that fails, to start or to run."""
    outcomes: list[StepOutcome] = []
    first = 0
    for st in scenario.steps:
        write_batches(input_dir, st.batches)
        sink = _Sink(scenario, downstream=downstream)
        try:
            query = start(st, sink)
        except Exception as exc:
            outcomes.append(StepOutcome(error=_error(exc)))
            break
        error = _await(query, sink.batches, first, len(st.batches))
        outcome = StepOutcome(dict(sink.batches), error)
        outcomes.append(outcome)
        first += len(st.batches)
        if outcome.error is not None:
            break
    return outcomes


def run_spark(
    conf: Conformance, scenario: Scenario, flavour: str, label: str, wrap: Wrap
) -> Outcome:
    """``scenario`` in Spark's own operator, its processor wrapped by ``wrap(processor,
    run directory)`` (identity: Spark's handles; ``tiered``)."""
    root = conf.new_dir(f"{label}-{flavour}")
    checkpoint, input_dir = root / "checkpoint", root / "input"

    def start(st: Step, sink: _Sink) -> Any:
        grouped = _frame(conf, scenario, input_dir).groupBy(*scenario.keys)
        processor = wrap(st.processors[flavour](), root)
        out = _tws(
            grouped, processor, scenario, st.output, flavour, _initial(conf, scenario, flavour)
        )
        if scenario.downstream is not None:  # in the streaming plan (stateful ones too)
            out = scenario.downstream(out)
        return (
            out.writeStream.foreachBatch(sink)
            .outputMode(scenario.sink_mode)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    with conf.settings(scenario):
        if scenario.batch_query:
            return Outcome([_batch_query(conf, scenario, flavour, root, wrap)], checkpoint)
        return Outcome(_run_steps(scenario, input_dir, False, start), checkpoint)


def _batch_query(
    conf: Conformance, scenario: Scenario, flavour: str, root: Path, wrap: Wrap
) -> StepOutcome:
    """A batch query: the first batch's rows as a DataFrame, collected once (batch id 0)."""
    st = scenario.steps[0]
    try:
        df = conf.spark.createDataFrame(list(st.batches[0]), scenario.input_schema)
        grouped = df.groupBy(*scenario.keys)
        processor = wrap(st.processors[flavour](), root)
        out = _tws(
            grouped, processor, scenario, st.output, flavour, _initial(conf, scenario, flavour)
        )
        return StepOutcome({0: [r.asDict() for r in out.collect()]})
    except Exception as exc:
        return StepOutcome(error=_error(exc))


def _tiered(fast: bool) -> Wrap:
    """``tiered(processor)`` with its state under the run's directory, on fsstate's keyed loop
    (``fast``) or PySpark's own."""

    def wrap(processor: StatefulProcessor, run_dir: Path) -> StatefulProcessor:
        return tiered(processor, state_uri=str(run_dir / "state"), fast_loop=fast)

    return wrap


def _in_spark_operator(label: str) -> Callable[[Conformance, Scenario, str], Outcome]:
    """The runner of a way of :data:`SPARK_OPERATOR_WAYS`."""

    def run(conf: Conformance, scenario: Scenario, flavour: str) -> Outcome:
        return conf.outcome(label, scenario, flavour)

    return run


def run_driver(conf: Conformance, scenario: Scenario, flavour: str) -> Outcome:
    """fsstate's flow driver: ``ops.transform_with_state[_in_pandas]`` and ``ops.write_stream``
    (state under the checkpoint)."""
    root = conf.new_dir(f"driver-{flavour}")
    checkpoint, input_dir = root / "checkpoint", root / "input"
    call = ops.transform_with_state_in_pandas if flavour == "pandas" else ops.transform_with_state

    def start(st: Step, sink: _Sink) -> Any:
        grouped = _frame(conf, scenario, input_dir).groupBy(*scenario.keys)
        flow = call(
            grouped,
            st.processors[flavour](),
            st.output,
            scenario.output_mode,
            scenario.time_mode,
            _initial(conf, scenario, flavour),
            scenario.event_time_column,
        )
        writer = ops.write_stream(
            flow, checkpoint_location=str(checkpoint), sink=sink, partitions=scenario.partitions
        )
        return writer.trigger(availableNow=True).start()

    with conf.settings(scenario):
        return Outcome(_run_steps(scenario, input_dir, True, start), checkpoint)


# The ways that run the processor in Spark's own operator, as a wrapper of the processor;
# "spark" (the plain processor, Spark's handles) is the reference.
SPARK_OPERATOR_WAYS: dict[str, Wrap] = {
    "tiered-fast": _tiered(fast=True),
    "tiered-stock": _tiered(fast=False),
}
SPARK_WRAPS: dict[str, Wrap] = {SPARK: lambda processor, run_dir: processor, **SPARK_OPERATOR_WAYS}

# Every way a scenario is compared in, by name (the test parameter).
WAYS: dict[str, Callable[[Conformance, Scenario, str], Outcome]] = {
    **{label: _in_spark_operator(label) for label in SPARK_OPERATOR_WAYS},
    "driver": run_driver,
}
