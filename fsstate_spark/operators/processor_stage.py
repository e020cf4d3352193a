"""A user's unchanged StatefulProcessor run by fsstate over a partition's whole batch.

:class:`ProcessorStage` is an :class:`fsstate.operators.Operator`: the flow driver shuffles a
micro-batch by the grouping columns and, in each ``mapInArrow`` task, the runner hands it the
partition's rows and its store (:mod:`fsstate.operators.runner`). The stage then does in one
Python process, with no state server and no socket, what Spark's Python worker and JVM do
per key (``pyspark.sql.streaming.stateful_processor_util``, pyspark 4.3):

1. ``init(handle)`` with a handle whose value / list / map state are the ``tiered()`` state
   objects (:mod:`fsstate_spark.state.handles`) and whose timers live in the store
   (:mod:`fsstate_spark.state.timers`);
2. in the first micro-batch, ``handleInitialState`` for every row (Row flavour) or chunk
   (pandas) of the initial state of each key, before that key's input;
3. ``handleInputRows(key, rows, timerValues)`` once per key with input: the batch is sorted by
   key once (the runner's canonical order leads with the keys when there is no initial
   state, and no second sort is made) and sliced; ``rows`` is a lazy iterator of pandas
   DataFrames (chunks of at most ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, a
   fresh ``RangeIndex`` each) or of
   ``Row`` objects (all made in bulk on the first read), so a processor that does not read its
   rows pays no conversion;
4. ``handleExpiredTimer`` for every timer due (processing time in ``ProcessingTime`` mode, the
   eviction watermark in ``EventTime`` mode), in expiry order, each timer deleted after its
   callback, as Spark does; timers registered meanwhile at or before that time fire in the
   next micro-batch (as in Spark);
5. ``close()``, then TTL cleanup at the batch's processing time; the runner commits.

Outputs are gathered per task: pandas frames column by column (no concat of small frames),
converted once with Spark's own pandas-to-Arrow conversion (names or positions, casts and
checks as Spark's); Rows as Spark's worker converts them (``asDict(True)`` and
``RecordBatch.from_pylist``), plain Rows with the output's fields gathered by column into the
same lists.

Invariants:

* Spark's arguments exactly: ``key`` is a tuple (numpy scalars from the pandas frame in the
  pandas flavour, Python values in the Row flavour), ``TimerValues`` is ``(-1, -1)`` in time
  mode None, ``(batch time, eviction watermark)`` otherwise (0 without a watermark).
* Deterministic given the store version and the set of input rows (rows of a key in the
  runner's canonical order; processing time fixed per micro-batch by the driver), so retries
  and re-runs adopt the published version and produce the same rows.
* In ``EventTime`` mode input rows at or below the previous micro-batch's watermark are late
  and dropped before the processor sees them, as Spark's operator does.
* Timer calls in time mode None raise :class:`fsstate_spark.state.handles.TimerModeError`,
  as Spark refuses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    TimerValues,
)
from pyspark.sql.types import StructType

from fsstate.errors import ConfigError, SchemaError
from fsstate.operators.base import SIDE, Epoch, Operator, time_us
from fsstate.store.partition import PartitionStore
from fsstate.tables.resolve import first_of_group
from fsstate_spark.state.handles import TieredHandle
from fsstate_spark.state.keyed import (
    KeyedRows,
    Output,
    PandasOutput,
    RowOutput,
    run_keys,
    run_timers,
)
from fsstate_spark.state.keys import KeyBinding
from fsstate_spark.state.map_order import UNSAFEROW
from fsstate_spark.state.timers import Timers

TIME_MODES = {"none": "none", "processingtime": "processingtime", "eventtime": "eventtime"}
OUTPUT_MODES = ("append", "update")
INPUT = "input"  # struct column of the input rows when an initial state shares the stage
INIT = "init"  # struct column of the initial state rows


@dataclass(frozen=True)
class ProcessorSpec:
    """How a stage calls its processor (decided on the driver, pickled with the stage).

    Attributes:
        keys: the grouping columns (of the input; ``_k0..`` with an initial state).
        output_type: Spark's output schema.
        output_mode: ``append`` or ``update`` (Spark's; it changes nothing in the stage).
        time_mode: ``none``, ``processingtime`` or ``eventtime``.
        pandas: the pandas flavour (``transformWithStateInPandas``) or the Row one.
        event_time: the watermark column of the input (event time recorded, late rows
            dropped in ``eventtime`` mode), or None (a stage after another stateful stage: the
            flow's watermark still fires its timers; the stage before dropped late rows).
        watermarked: whether the flow has a watermark at all (``eventtime`` needs one).
        initial_state: whether the input carries an initial state (``_side``, ``input``,
            ``init`` columns).
        init_keys: the grouping columns of the initial state rows.
        timezone: the session time zone (timestamps in pandas frames, as Spark's).
        max_records_per_batch: rows per pandas chunk (``arrow.maxRecordsPerBatch``).
        max_bytes_per_batch: bytes per pandas chunk (``arrow.maxBytesPerBatch``, by the
            average row size as Spark's worker estimates it).
        safecheck: pandas output converted safely (``pandas.convertToArrowArraySafely``).
        int_to_decimal: integer pandas output coerced into decimal fields
            (``pythonUDF.pandas.intToDecimalCoercionEnabled``).
        state_encoding: Spark's state encoding (MapState iteration order).
    """

    keys: tuple[str, ...]
    output_type: StructType
    output_mode: str
    time_mode: str
    pandas: bool
    event_time: str | None = None
    initial_state: bool = False
    init_keys: tuple[str, ...] = ()
    watermarked: bool = False
    timezone: str = "UTC"
    max_records_per_batch: int = 10_000
    max_bytes_per_batch: int = 2**31 - 1
    safecheck: bool = False
    int_to_decimal: bool = False
    state_encoding: str = UNSAFEROW

    def __post_init__(self) -> None:
        if self.time_mode not in TIME_MODES.values():
            raise ConfigError(
                f"timeMode={self.time_mode!r}: use 'None', 'ProcessingTime' or 'EventTime'"
            )
        if self.output_mode not in OUTPUT_MODES:
            raise ConfigError(f"outputMode={self.output_mode!r}: use 'Append' or 'Update'")
        if self.time_mode == "eventtime" and self.event_time is None and not self.watermarked:
            raise ConfigError(
                "timeMode='EventTime' needs a watermark: ops.source(df, watermark=(column, "
                "delay)) or df.withWatermark(column, delay) before groupBy"
            )


def output_arrow_schema(output_type: StructType) -> pa.Schema:
    """The Arrow schema of a processor's output (timestamps ``timestamp[us, UTC]``)."""
    from fsstate_spark.pyspark.arrow import to_arrow_schema

    return to_arrow_schema(output_type)


class ProcessorStage(Operator):
    """A StatefulProcessor as a whole-batch stage (see the module docstring).

    Args:
        name: the stage's state name.
        processor: the user's processor (unchanged).
        spec: how it is called.
        name_given: whether the user named the stage (else ``name`` is the processor's class
            name, and the driver may continue the state of a renamed class:
            :mod:`fsstate_spark.operators.driver`).
    """

    def __init__(
        self,
        name: str,
        processor: StatefulProcessor,
        spec: ProcessorSpec,
        name_given: bool = True,
    ) -> None:
        super().__init__(name)
        self.name_given = name_given
        if not isinstance(processor, StatefulProcessor):
            raise ConfigError(
                f"operator {name!r}: transform_with_state takes a pyspark StatefulProcessor, "
                f"got {type(processor).__name__}"
            )
        self.processor = processor
        self.spec = spec
        self.time = spec.event_time
        self.uses_clock = spec.time_mode != "none"
        self._out_schema = output_arrow_schema(spec.output_type)

    # -- the operator contract -----------------------------------------------------------------
    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return self._out_schema

    def _input_schema(self, schema: pa.Schema) -> pa.Schema:
        if not self.spec.initial_state:
            return schema
        return pa.schema(list(schema.field(INPUT).type))

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        rows = self._input_schema(input_schema)
        missing = [k for k in self.spec.keys if k not in rows.names]
        if missing:
            raise SchemaError(
                f"operator {self.name!r}: grouping column(s) {missing} are not in the input "
                f"({rows.names})"
            )
        self._key_schema = pa.schema([rows.field(k).with_nullable(True) for k in self.spec.keys])
        self._timers = (
            Timers(store, self._key_schema, self.spec.state_encoding)
            if self.spec.time_mode != "none"
            else None
        )

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        if self.time is None:
            return {}
        rows = self._rows(batch, 0)
        return {"input": time_us(rows.column(self.time), self.name, self.time)}

    def leading_order(self, input_schema: pa.Schema) -> tuple[str, ...]:
        """The grouping key columns (without an initial state the batch's rows are the input
        rows, keys at the top level): the runner's canonical order then groups the keys, and
        :meth:`_groups` sorts nothing."""
        return () if self.spec.initial_state else tuple(self.spec.keys)

    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        spec = self.spec
        rows = self._rows(batch, 0)
        init = self._rows(batch, 1) if spec.initial_state and epoch.epoch == 0 else None
        if spec.time_mode == "eventtime" and self.time is not None and rows.num_rows:
            t = time_us(rows.column(self.time), self.name, self.time)
            late = pc.fill_null(pc.less_equal(t, epoch.late_ms * 1000), False)
            rows = rows.filter(pc.invert(late))
        if spec.time_mode == "none":
            values = TimerValues(-1, -1)
        else:
            now = -1 if epoch.now_ms is None else epoch.now_ms
            values = TimerValues(now, epoch.evict_ms)
        binding = KeyBinding()
        handle = TieredHandle(
            None,
            self.store,
            binding,
            spec.state_encoding,
            key_schema=self._key_schema,
            timers=self._timers,
            timers_allowed=spec.time_mode != "none",
        )
        out: Output = (
            PandasOutput(
                spec.output_type, safecheck=spec.safecheck, int_to_decimal=spec.int_to_decimal
            )
            if spec.pandas
            else RowOutput(self._out_schema)
        )
        self.processor.init(handle)
        # the runner's canonical order led with the keys: the rows are grouped already
        presorted = bool(epoch.sorted_by) and epoch.sorted_by == tuple(spec.keys)
        self._run_keys(rows, init, binding, values, out, presorted)
        if self._timers is not None:
            through = epoch.evict_ms if spec.time_mode == "eventtime" else epoch.now_ms
            if through is not None:
                self._fire(self._timers, through, binding, values, out)
        binding.key = None
        self.processor.close()
        if self._timers is not None:
            self._timers.flush()
        if spec.time_mode != "none" and epoch.now_ms is not None:
            self.store.expire()
        return out.table()

    # -- input ---------------------------------------------------------------------------------
    def _rows(self, batch: pa.Table, side: int) -> pa.Table:
        """The input rows (side 0) or the initial state rows (side 1) as plain columns."""
        if not self.spec.initial_state:
            return batch
        mask = pc.equal(batch.column(SIDE), side)
        col = batch.filter(mask).column(INPUT if side == 0 else INIT).combine_chunks()
        struct_type = col.type
        if isinstance(col, pa.ChunkedArray):  # pragma: no cover - combine_chunks gives an Array
            col = col.combine_chunks()
        fields = list(struct_type)
        return pa.Table.from_arrays(col.flatten(), schema=pa.schema(fields))

    def _groups(
        self, table: pa.Table, keys: tuple[str, ...], presorted: bool = False
    ) -> tuple[pa.Table, np.ndarray[Any, Any]]:
        """``table`` sorted by ``keys`` (stable) and the row offsets where each key starts; a
        table already sorted by ``keys`` (``presorted``: the runner's canonical order led with
        them, ``Epoch.sorted_by``, and the late-row filter keeps the order) is taken as it is."""
        if table.num_rows == 0:
            return table, np.zeros(1, np.int64)
        if not presorted:
            sort_keys = [(k, "ascending") for k in keys]
            order = pc.sort_indices(table, sort_keys=sort_keys)  # nulls last
            table = table.take(order)
        cols = [table.column(k).combine_chunks() for k in keys]
        starts = np.flatnonzero(first_of_group(cols))
        return table, np.append(starts, table.num_rows)

    def _run_keys(
        self,
        rows: pa.Table,
        init: pa.Table | None,
        binding: KeyBinding,
        values: TimerValues,
        out: Output,
        presorted: bool,
    ) -> None:
        spec = self.spec
        rows, bounds = self._groups(rows, spec.keys, presorted)
        data = KeyedRows(rows, bounds, spec, spec.keys) if rows.num_rows else None
        if init is not None and init.num_rows:
            init, init_bounds = self._groups(init, spec.init_keys)
            init_data: KeyedRows | None = KeyedRows(init, init_bounds, spec, spec.init_keys)
        else:
            init_data = None

        def enter(key: tuple[Any, ...], store_key: tuple[Any, ...]) -> None:
            binding.key = store_key

        run_keys(self.processor, data, init_data, values, out, enter)

    def _fire(
        self,
        timers: Timers,
        through_ms: int,
        binding: KeyBinding,
        values: TimerValues,
        out: Output,
    ) -> None:
        def enter(key: tuple[Any, ...], store_key: tuple[Any, ...]) -> None:
            binding.key = store_key

        due = ((key, key, ts) for key, ts in timers.due(through_ms))
        run_timers(self.processor, due, values, out, enter, timers.delete)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_timers", None)
        return state
