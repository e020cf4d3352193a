"""fsstate's keyed loop as Spark's Python worker for transformWithState, for ``tiered()`` only.

Spark runs a ``transformWithStateInPandas`` / ``transformWithState`` operator's Python side in
``pyspark.worker``: per task it reads the operator's Arrow batches, regroups them by key row by
row, converts each key's rows and each key's output on their own, and sets the grouping key on
Spark's state server (a blocking round trip) before every key. With ``tiered()`` the state is
in fsstate, in this process, so that loop, not state, is the cost. :func:`install` replaces,
for the four transformWithState eval types and only when the operator's processor is a
:class:`fsstate_spark.tiered.processor.TieredProcessor` with ``fast_loop`` on, the function
PySpark builds for a task (``pyspark.worker.read_udfs``) by :class:`FastTask`:

* one Arrow-to-pandas conversion per input batch (or Rows made in bulk), key runs found with
  Arrow (keys group as the JVM groups them: nulls together, NaN together), the shared keyed
  loop (:func:`fsstate_spark.state.keyed.run_keys`) calling the user's processor with the
  same arguments Spark's loop gives (keys, chunks of ``maxRecordsPerBatch`` rows and Spark's
  byte estimate, ``TimerValues``, expired timers, initial state);
* the outputs of all keys of an input batch as one conversion, handed back in Arrow batches of
  at most ``maxRecordsPerBatch`` rows, wrapped in Spark's one struct column;
* the implicit key sent to Spark's state server only when a request needs it (a Spark-held
  handle: the timers, or Spark state variables): :class:`DeferredKeyClient`. Timers stay
  with Spark (its timer index, its expiry and its ``TimerValues``).

Set-up: ``spark.python.worker.module=pyspark_fsstate.worker`` (a static conf: spark-defaults,
``spark-submit --conf``, the builder before the SparkContext starts, a Connect server's conf);
:mod:`pyspark_fsstate.worker` calls :func:`install` and is PySpark's worker otherwise.

Invariants:

* Never worse than stock: :func:`install` patches nothing on a PySpark version it was not
  built for (:data:`BUILT_FOR`) or that lacks a name it uses; a task whose set-up meets any
  surprise runs PySpark's own loop. Each case says so once per process in the worker log
  (:func:`note`). A processor that is not ``tiered()`` (or ``tiered(fast_loop=False)``) runs
  PySpark's own loop, untouched.
* Spark's protocol as PySpark's loop speaks it: the handle states (``INITIALIZED`` after
  ``init``, ``DATA_PROCESSED`` before the timers, ``TIMER_PROCESSED`` after them without
  initial state, ``CLOSED`` after ``close``), the implicit key set before any request that
  acts on a key (it is sent lazily, never skipped), removed before ``close``.
* The task is one epoch of the store (:mod:`fsstate.store.epoch`): a failure anywhere fails
  it (nothing committed, the store discarded), and the exception reaches Spark as PySpark's
  loop would raise it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from fsstate.tables.resolve import first_of_group
from fsstate_spark.state.keyed import (
    KeyedRows,
    Output,
    PandasOutput,
    RowOutput,
    run_keys,
)
from fsstate_spark.state.keys import normalize_key
from fsstate_spark.tiered.processor import TieredProcessor

log = logging.getLogger(__name__)

BUILT_FOR = ("4.3.0",)  # the PySpark versions whose worker this one was built against
NEEDED = ("read_udfs", "read_command", "ArrowStreamSerializer", "StatefulProcessorApiClient")

_noted: set[str] = set()


class _Process:
    """What this worker process did: whether :func:`install` patched PySpark."""

    installed = False


def note(what: str) -> None:
    """Say ``what`` once per process in the worker's log (stderr, which Spark keeps)."""
    if what in _noted:
        return
    _noted.add(what)
    print(f"fsstate: {what}", file=sys.stderr, flush=True)


def installed() -> bool:
    """Whether :func:`install` patched this process's PySpark worker."""
    return _Process.installed


def install() -> bool:
    """Patch ``pyspark.worker.read_udfs`` (see the module docstring); False if not patched."""
    try:
        import pyspark
        import pyspark.worker as w
    except Exception as exc:  # pragma: no cover - PySpark is what runs this module
        note(f"PySpark's worker did not import ({exc}); the stock worker runs")
        return False
    if pyspark.__version__ not in BUILT_FOR:
        note(
            f"the keyed loop was built for PySpark {', '.join(BUILT_FOR)}, this is "
            f"{pyspark.__version__}: tiered() runs on PySpark's own loop"
        )
        return False
    from pyspark.util import PythonEvalType

    missing = [n for n in NEEDED if not hasattr(w, n)]
    missing += [n for n in EVAL_TYPES if not hasattr(PythonEvalType, n)]
    if missing:
        note(f"PySpark's worker lacks {missing}: tiered() runs on PySpark's own loop")
        return False
    if getattr(w.read_udfs, "__fsstate__", False):
        return True
    FLAVOURS.update({getattr(PythonEvalType, n): f for n, f in EVAL_TYPES.items()})
    stock: Callable[..., Any] = w.read_udfs

    def read_udfs(
        pickle_ser: Any, udf_info_list: Any, eval_type: int, runner_conf: Any, eval_conf: Any
    ) -> Any:
        if eval_type in FLAVOURS:
            try:
                fast = plan(w, pickle_ser, udf_info_list, eval_type, runner_conf, eval_conf)
            except Exception as exc:
                note(f"a task's set-up failed ({type(exc).__name__}: {exc}); PySpark's loop runs")
                fast = None
            if fast is not None:
                return fast
        return stock(pickle_ser, udf_info_list, eval_type, runner_conf, eval_conf)

    read_udfs.__fsstate__ = True  # type: ignore[attr-defined]
    w.read_udfs = read_udfs
    _Process.installed = True
    return True


@dataclass(frozen=True)
class Flavour:
    """What a transformWithState eval type hands the processor (:class:`RowFlavour`)."""

    pandas: bool
    initial_state: bool
    timezone: str = "UTC"
    max_records_per_batch: int = 10_000
    max_bytes_per_batch: int = 2**31 - 1
    prefer_int_ext_dtype: bool = False


# PySpark's PythonEvalType names of transformWithState: (pandas, with initial state)
EVAL_TYPES = {
    "SQL_TRANSFORM_WITH_STATE_PANDAS_UDF": (True, False),
    "SQL_TRANSFORM_WITH_STATE_PANDAS_INIT_STATE_UDF": (True, True),
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF": (False, False),
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_INIT_STATE_UDF": (False, True),
}
FLAVOURS: dict[int, tuple[bool, bool]] = {}  # eval type value -> flavour (set by install)


def parse_offsets(args: list[int]) -> list[tuple[list[int], list[int]]]:
    """PySpark's grouped arg offsets as (key offsets, value offsets) per input (the format of
    ``BasePandasGroupExec.resolveArgOffsets``: per input its length, the number of key
    offsets, the key offsets, the value offsets)."""
    out = []
    i = 0
    while i < len(args):
        n = args[i]
        group = args[i + 1 : i + 1 + n]
        split = group[0] + 1
        out.append((list(group[1:split]), list(group[split:])))
        i += 1 + n
    return out


def plan(
    w: Any, pickle_ser: Any, udf_info_list: Any, eval_type: int, runner_conf: Any, eval_conf: Any
) -> tuple[Callable[..., Any], None, Any, Any] | None:
    """PySpark's ``(func, profiler, deserializer, serializer)`` of a task, run by fsstate's
    keyed loop, or None when the task is not for it (not ``tiered()``, profiled, ...)."""
    if len(udf_info_list) != 1 or len(udf_info_list[0].udfs) != 1:
        return None
    info = udf_info_list[0]
    f, return_type = w.read_command(pickle_ser, info.udfs[0])
    util = getattr(f, "__self__", None)
    proc = getattr(util, "_stateful_processor", None)
    if util is None or not isinstance(proc, TieredProcessor) or not proc.config.fast_loop:
        return None
    pandas, initial = FLAVOURS[eval_type]
    records = runner_conf.arrow_max_records_per_batch
    flavour = Flavour(
        pandas,
        initial,
        runner_conf.timezone or "UTC",
        records if records > 0 else 2**31 - 1,
        runner_conf.arrow_max_bytes_per_batch,
        bool(getattr(runner_conf, "prefer_int_ext_dtype", False)),
    )
    client = DeferredKeyClient(eval_conf.state_server_socket_port, eval_conf.grouping_key_schema)
    offsets = parse_offsets(list(info.args))
    task = FastTask(proc, str(util._time_mode), return_type, offsets, flavour, runner_conf, client)
    ser = w.ArrowStreamSerializer(write_start_stream=True)
    return task.run, None, ser, ser


def _client_class() -> type:
    from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient

    return StatefulProcessorApiClient


class DeferredKeyClient(_client_class()):  # type: ignore[misc]
    """Spark's state-server client whose implicit key is sent with the first request after it
    was set that goes to the server (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: tuple[Any, ...] | None = None
        self._sent: tuple[Any, ...] | None = None
        self._flushing = False

    def set_implicit_key(self, key: tuple[Any, ...]) -> None:
        self._pending = key

    def remove_implicit_key(self) -> None:
        self._pending = None
        if self._sent is not None:
            self._sent = None
            super().remove_implicit_key()

    def _send_proto_message(self, message: bytes) -> None:
        key = self._pending
        if key is not None and not self._flushing and (self._sent is None or key != self._sent):
            self._flushing = True
            try:
                super().set_implicit_key(key)
            finally:
                self._flushing = False
            self._sent = key
        super()._send_proto_message(message)


class FastTask:
    """One task of a tiered transformWithState operator, run by fsstate's keyed loop."""

    def __init__(
        self,
        proc: TieredProcessor,
        time_mode: str,
        return_type: Any,
        offsets: list[tuple[list[int], list[int]]],
        flavour: Flavour,
        runner_conf: Any,
        client: DeferredKeyClient,
    ) -> None:
        self.proc = proc
        self.time_mode = time_mode.lower()
        self.return_type = return_type
        self.offsets = offsets
        self.flavour = flavour
        self.conf = runner_conf
        self.client = client

    # -- the task ----------------------------------------------------------------------------
    def run(self, _split: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """PySpark's ``func(split_index, batches)``: the task's output batches."""
        from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle, TimerValues
        from pyspark.sql.streaming.stateful_processor_api_client import (
            StatefulProcessorHandleState as S,
        )

        client, proc = self.client, self.proc
        task = proc.begin_fast(StatefulProcessorHandle(client))
        try:
            client.set_handle_state(S.INITIALIZED)
            now, watermark = client.get_timestamps(self.time_mode)
            task.set_clock(now)
            values = TimerValues(now, watermark)
            binding = task.binding

            def enter(key: tuple[Any, ...], store_key: tuple[Any, ...]) -> None:
                binding.key = store_key
                client.set_implicit_key(key)

            out = self._output()
            for data, init in self._windows(batches):
                run_keys(proc.processor, data, init, values, out, enter)
                yield from self._emit(out)
                out = self._output()
            client.set_handle_state(S.DATA_PROCESSED)
            self._timers(now, watermark, values, enter, out)
            yield from self._emit(out)
            if not self.flavour.initial_state:
                client.set_handle_state(S.TIMER_PROCESSED)
            client.remove_implicit_key()
            binding.key = None
            proc.close()
            client.set_handle_state(S.CLOSED)
        except BaseException:
            proc.fail_task()
            raise

    def _timers(
        self,
        now: int,
        watermark: int,
        values: Any,
        enter: Callable[[tuple[Any, ...], tuple[Any, ...]], None],
        out: Output,
    ) -> None:
        """Every timer Spark finds expired, in Spark's order, each deleted after its call."""
        from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo
        from pyspark.sql.streaming.stateful_processor_api_client import ExpiredTimerIterator

        if self.time_mode == "processingtime":
            through = now
        elif self.time_mode == "eventtime":
            through = watermark
        else:
            return
        user = self.proc.processor
        for key, expiry in ExpiredTimerIterator(self.client, through):
            store_key = normalize_key(key)
            enter(key, store_key)
            result = user.handleExpiredTimer(key, values, ExpiredTimerInfo(expiry))
            if result is not None:
                for item in result:
                    enter(key, store_key)
                    out.add(item)
            enter(key, store_key)
            self.client.delete_timer(expiry)

    # -- input ---------------------------------------------------------------------------------
    def _windows(
        self, batches: Iterator[pa.RecordBatch]
    ) -> Iterator[tuple[KeyedRows | None, KeyedRows | None]]:
        """(data, initial state) of the complete keys read so far, per input batch: a key's
        rows may continue in the next batch, so the last run of a batch waits for it."""
        runs = _Runs()
        for batch in batches:
            for side, table in self._sides(batch):
                runs.add(side, table, self._key_count(side))
                window = runs.complete()
                if window is not None:
                    yield self._keyed(window)
        window = runs.rest()
        if window is not None:
            yield self._keyed(window)

    def _key_count(self, side: int) -> int:
        return len(self.offsets[side][0])

    def _sides(self, batch: pa.RecordBatch) -> list[tuple[int, pa.Table]]:
        """The batch's rows as (side, table of key columns then value columns): side 0 the
        input, side 1 the initial state (a batch holds one of them)."""
        if not batch.num_rows:
            return []
        if not self.flavour.initial_state:
            keys, vals = self.offsets[0]
            table = pa.Table.from_batches([batch])
            if not self.flavour.pandas:  # Spark's Row loop hands every column of the batch
                vals = list(range(table.num_columns))
            return [(0, table.select([*keys, *vals]))]
        out = []
        for side, name in ((0, "inputData"), (1, "initState")):
            col = batch.column(batch.schema.get_field_index(name))
            if col.null_count == len(col):
                continue
            struct = pa.Table.from_arrays(col.flatten(), names=[f.name for f in col.type])
            keys = self.offsets[side][0]
            out.append((side, struct.select([*keys, *range(struct.num_columns)])))
        return out

    def _keyed(
        self, window: tuple[pa.Table | None, pa.Table | None]
    ) -> tuple[KeyedRows | None, KeyedRows | None]:
        return tuple(  # type: ignore[return-value]
            None if t is None else self._rows(t, self._key_count(side))
            for side, t in enumerate(window)
        )

    def _rows(self, table: pa.Table, nkeys: int) -> KeyedRows:
        """A side's rows of complete keys: keys are its first ``nkeys`` columns, the
        processor sees the rest."""
        keys = [table.column(i) for i in range(nkeys)]
        values = table.select(list(range(nkeys, table.num_columns)))
        starts = np.flatnonzero(first_of_group([k.combine_chunks() for k in keys]))
        return KeyedRows(values, np.append(starts, table.num_rows), self.flavour, keys)

    # -- output --------------------------------------------------------------------------------
    def _output(self) -> Output:
        from pyspark.sql.pandas.types import to_arrow_schema

        if self.flavour.pandas:
            return PandasOutput(
                self.return_type,
                safecheck=bool(self.conf.safecheck),
                int_to_decimal=bool(self.conf.int_to_decimal_coercion_enabled),
                timezone=self.flavour.timezone,
                by_name=bool(self.conf.assign_cols_by_name),
                wrapped=True,
            )
        return RowOutput(to_arrow_schema(self.return_type, timezone="UTC"), wrapped=True)

    def _emit(self, out: Output) -> Iterator[pa.RecordBatch]:
        """The gathered output in batches of Spark's record limit (none if empty)."""
        table = out.table()
        if not table.num_rows:
            return
        yield from table.to_batches(max_chunksize=self.flavour.max_records_per_batch)


class _Runs:
    """Key runs across a task's input: rows arrive grouped by key (each key's rows, of one or
    both sides, contiguous), possibly split across batches; a window holds every run up to the
    last key seen, which stays open until a row of another key arrives."""

    def __init__(self) -> None:
        self.parts: list[tuple[int, pa.Table]] = []  # (side, rows) of complete keys, in order
        self.open: list[tuple[int, pa.Table]] = []  # (side, rows) of the last key
        self.open_key: pa.Table | None = None  # the last key's value (one row)

    def add(self, side: int, table: pa.Table, nkeys: int) -> None:
        """Take a batch's rows of one side (its first ``nkeys`` columns are the key)."""
        keys = table.select(list(range(nkeys)))
        starts = np.flatnonzero(first_of_group([c.combine_chunks() for c in keys.columns]))
        n = table.num_rows
        begin = 0
        if self.open_key is not None and _same_key(self.open_key, keys.slice(0, 1)):
            begin = int(starts[1]) if len(starts) > 1 else n
            self.open.append((side, table.slice(0, begin)))  # the open key goes on
            if begin == n:
                return
        self.parts += self.open  # the open key is complete
        last = int(starts[-1])
        if last > begin:
            self.parts.append((side, table.slice(begin, last - begin)))
        self.open = [(side, table.slice(last))]
        self.open_key = keys.slice(last, 1)

    def complete(self) -> tuple[pa.Table | None, pa.Table | None] | None:
        """The complete keys' rows by side (None: none yet)."""
        if not self.parts:
            return None
        window = _by_side(self.parts)
        self.parts = []
        return window

    def rest(self) -> tuple[pa.Table | None, pa.Table | None] | None:
        """Everything not handed out yet (the end of the input)."""
        self.parts += self.open
        self.open, self.open_key = [], None
        return self.complete()


def _same_key(a: pa.Table, b: pa.Table) -> bool:
    """Whether two one-row key tables hold the same key (nulls equal, NaN equal)."""
    if a.num_columns != b.num_columns:
        return False
    cols = [pa.concat_arrays([x.combine_chunks(), y.combine_chunks().cast(x.type)])
            for x, y in zip(a.columns, b.columns)]  # fmt: skip
    return not bool(first_of_group(cols)[1])


def _by_side(parts: list[tuple[int, pa.Table]]) -> tuple[pa.Table | None, pa.Table | None]:
    tables: list[list[pa.Table]] = [[], []]
    for side, t in parts:
        if t.num_rows:
            tables[side].append(t)
    return tuple(  # type: ignore[return-value]
        pa.concat_tables(ts) if ts else None for ts in tables
    )
