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

* Version-neutral: what moves between PySpark minors (how a task is set up, where its confs,
  state server and UDF come from) is read by one adapter per minor
  (:mod:`fsstate_spark.pyspark.worker`) into a :class:`~fsstate_spark.pyspark.task.TaskSetup`;
  this module runs that on every minor alike, with its own Arrow stream framing
  (:class:`ArrowStreamIn`, :class:`ArrowStreamOut`) and Spark's state-server client
  (:mod:`fsstate_spark.pyspark.state_client`). PySpark's internals are touched only through
  :mod:`fsstate_spark.pyspark`.
* Never worse than stock: :func:`install` patches nothing on a PySpark minor without an
  adapter or that lacks a name it uses; a task whose set-up meets any surprise runs PySpark's
  own loop, on the bytes it would have read (the adapter's replay). Each case says so once
  per process in the worker log (:func:`note`). A processor that is not ``tiered()`` (or
  ``tiered(fast_loop=False)``) runs PySpark's own loop, untouched.
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

from fsstate.osmem import task_collector
from fsstate.tables.resolve import first_of_group
from fsstate_spark.pyspark import minor
from fsstate_spark.pyspark.arrow import to_arrow_schema
from fsstate_spark.pyspark.state_client import (
    DeferredKeyClient,
    StatefulProcessorHandleState,
    expired_timers,
)
from fsstate_spark.pyspark.worker import (
    ADAPTERS,
    STOCK_ONLY,
    TWS_EVAL_TYPES,
    TaskConf,
    TaskSetup,
    Unreadable,
    adapter_for,
    initial_state_sides,
    pyspark_worker,
    start_arrow_stream,
)
from fsstate_spark.state.keyed import (
    KeyedRows,
    Output,
    PandasOutput,
    RowOutput,
    run_keys,
    run_timers,
)
from fsstate_spark.state.keys import normalize_key
from fsstate_spark.tiered import task_profile
from fsstate_spark.tiered.processor import TieredProcessor

log = logging.getLogger(__name__)

NEEDED = ("read_udfs", "read_command")

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

        w = pyspark_worker()
    except Exception as exc:  # pragma: no cover - PySpark is what runs this module
        note(f"PySpark's worker did not import ({exc}); the stock worker runs")
        return False
    running = minor()
    adapter = adapter_for(running)
    if adapter is None:
        why = STOCK_ONLY.get(running) if running is not None else None
        reads = ", ".join(f"{a}.{b}" for a, b in ADAPTERS)
        note(
            why
            or f"the keyed loop reads the tasks of PySpark {reads}, this is "
            f"{pyspark.__version__}: tiered() runs on PySpark's own loop"
        )
        return False
    from pyspark.util import PythonEvalType

    missing = [n for n in NEEDED if not hasattr(w, n)]
    missing += [n for n in TWS_EVAL_TYPES if not hasattr(PythonEvalType, n)]
    if missing:
        note(f"PySpark's worker lacks {missing}: tiered() runs on PySpark's own loop")
        return False
    if getattr(w.read_udfs, "__fsstate__", False):
        return True
    FLAVOURS.update({getattr(PythonEvalType, n): f for n, f in TWS_EVAL_TYPES.items()})
    stock: Callable[..., Any] = w.read_udfs

    def read_udfs(*args: Any) -> Any:
        if len(args) > 2 and args[2] in FLAVOURS:
            try:
                setup, args = adapter.read_task(w, args)
                fast = plan(setup)
            except Unreadable as exc:
                note(f"a task's set-up failed ({exc}); PySpark's loop runs")
                fast, args = None, exc.fallback
            except Exception as exc:
                note(f"a task's set-up failed ({type(exc).__name__}: {exc}); PySpark's loop runs")
                fast = None
            if fast is not None:
                return fast
        return stock(*args)

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


def plan(setup: TaskSetup) -> tuple[Callable[..., Any], None, Any, Any] | None:
    """PySpark's ``(func, profiler, deserializer, serializer)`` of a task, run by fsstate's
    keyed loop, or None when the task is not for it (not ``tiered()``, profiled, ...)."""
    proc = setup.processor
    if not isinstance(proc, TieredProcessor) or not proc.config.fast_loop or setup.profiled:
        return None
    pandas, initial = FLAVOURS[setup.eval_type]
    conf = setup.conf
    records = conf.max_records_per_batch
    flavour = Flavour(
        pandas,
        initial,
        conf.timezone,
        records if records > 0 else 2**31 - 1,
        conf.max_bytes_per_batch,
        conf.prefer_int_ext_dtype,
    )
    client = DeferredKeyClient(setup.state_server, setup.key_schema)
    offsets = parse_offsets(setup.offsets)
    task = FastTask(proc, setup.time_mode, setup.return_type, offsets, flavour, conf, client)
    return task.run, None, ArrowStreamIn(), ArrowStreamOut()


class ArrowStreamIn:
    """The task's input: Spark's plain Arrow stream of record batches."""

    def load_stream(self, stream: Any) -> Iterator[pa.RecordBatch]:
        yield from pa.ipc.open_stream(stream)


class ArrowStreamOut:
    """The task's output: Spark's ``START_ARROW_STREAM`` marker once the first batch is made
    (an error before it reaches the JVM as PySpark's would), then an Arrow stream (nothing at
    all when there is no batch), as every supported minor's transformWithState serializer."""

    def dump_stream(self, iterator: Iterator[pa.RecordBatch], stream: Any) -> None:
        it = iter(iterator)
        first = next(it, None)
        if first is None:
            return
        start_arrow_stream(stream)
        with pa.ipc.new_stream(stream, first.schema) as writer:
            writer.write_batch(first)
            for batch in it:
                writer.write_batch(batch)


class FastTask:
    """One task of a tiered transformWithState operator, run by fsstate's keyed loop."""

    def __init__(
        self,
        proc: TieredProcessor,
        time_mode: str,
        return_type: Any,
        offsets: list[tuple[list[int], list[int]]],
        flavour: Flavour,
        conf: TaskConf,
        client: DeferredKeyClient,
    ) -> None:
        self.proc = proc
        self.time_mode = time_mode
        self.return_type = return_type
        self.offsets = offsets
        self.flavour = flavour
        self.conf = conf
        self.client = client

    # -- the task ----------------------------------------------------------------------------
    def run(self, split: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """PySpark's ``func(split_index, batches)``: the task's output batches (profiled with
        ``FSSTATE_PROFILE_DIR`` set: :mod:`fsstate_spark.tiered.task_profile`), run with the
        collector's young threshold raised and what the process keeps (its modules, its
        cached stores) frozen (:mod:`fsstate.osmem`)."""
        with task_collector():
            profile = task_profile.start()
            if profile is None:
                yield from self._run(split, batches)
                return
            try:
                yield from self._run(split, batches)
            finally:
                task_profile.stop(profile, type(self.proc.processor).__name__)

    def _run(self, _split: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle, TimerValues

        S = StatefulProcessorHandleState

        client, proc = self.client, self.proc
        task = proc.begin_fast(StatefulProcessorHandle(client))
        try:
            client.set_handle_state(S.INITIALIZED)
            now, watermark = client.get_timestamps(self.time_mode)
            task.set_clock(now)
            values = TimerValues(now, watermark)
            bind = task.enter

            def enter(key: tuple[Any, ...], store_key: tuple[Any, ...]) -> None:
                bind(store_key)
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
            task.commit()
            client.set_handle_state(S.CLOSED)
        except BaseException:
            task.fail()
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
        if self.time_mode == "processingtime":
            through = now
        elif self.time_mode == "eventtime":
            through = watermark
        else:
            return
        client = self.client
        due = ((key, normalize_key(key), e) for key, e in expired_timers(client, through))
        run_timers(
            self.proc.processor, due, values, out, enter, lambda _k, e: client.delete_timer(e)
        )

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
        for side, struct in initial_state_sides(batch):
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
        if self.flavour.pandas:
            return PandasOutput(
                self.return_type,
                safecheck=self.conf.safecheck,
                int_to_decimal=self.conf.int_to_decimal,
                timezone=self.flavour.timezone,
                by_name=self.conf.assign_cols_by_name,
                wrapped=True,
            )
        return RowOutput(to_arrow_schema(self.return_type), wrapped=True)

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
