"""What a transformWithState task hands its Python worker, read the way each PySpark minor sends it.

fsstate's keyed loop (:mod:`fsstate_spark.tiered.fast_loop`) is version-neutral: it runs a
:class:`TaskSetup` (the processor's function, its return type, the grouped arg offsets, the
task's Arrow settings and Spark's state server). What moves between PySpark minors is how a task
is set up: which arguments ``pyspark.worker.read_udfs`` takes, where the runner conf, the state
server's port and the grouping key's schema come from, and how a UDF is framed on the wire. One
small module per supported minor reads that (:func:`adapter_for`):

==========  ======================================================================================
minor       ``read_udfs`` and where the task's set-up comes from
==========  ======================================================================================
4.0         none: PySpark's own loop runs (one key per Arrow batch, list/map/timer replies as
            Arrow, no ``ExpiredTimerIterator``: see :data:`STOCK_ONLY`)
4.1         ``read_udfs(pickleSer, infile, eval_type)``: the conf, the state server (a port, or
            ``-1`` and a Unix socket path), the key schema and the UDF read from ``infile``
            (:mod:`.v4_1`)
4.2         ``read_udfs(pickleSer, infile, eval_type, runner_conf, eval_conf)``: the confs read by
            ``main``, the UDF from ``infile`` (:mod:`.v4_2`)
4.3         ``read_udfs(pickleSer, udf_info_list, eval_type, runner_conf, eval_conf)``: the UDF
            framed in the init message (:mod:`.v4_3`)
==========  ======================================================================================

Invariants:

* An adapter never loses a byte of the task's input: where it reads the UDF from ``infile``
  itself, every byte it read is recorded (:class:`Recording`) and, when the task is not for
  fsstate's loop (or anything goes wrong), PySpark's own ``read_udfs`` reads them again from
  :class:`Replay`, then the rest of the stream, exactly as if nobody had read before it.
* Only the minors in :data:`ADAPTERS` are read by fsstate; any other PySpark runs its own loop.
* An adapter returns a :class:`TaskSetup` or raises; deciding whether the task is fsstate's
  (``tiered()`` with its fast loop on) is the core's.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

ADAPTERS = ((4, 1), (4, 2), (4, 3))
"""The PySpark minors whose task set-up fsstate's keyed loop reads."""

STOCK_ONLY = {
    (4, 0): "PySpark 4.0 sends one key per Arrow batch and has no expired-timer iterator: "
    "tiered() runs on PySpark's own loop there",
}
"""Supported minors where ``tiered()`` runs on PySpark's own loop, and why."""


@dataclass(frozen=True)
class TaskConf:
    """The task's Arrow and pandas settings (Spark's runner conf), whatever the minor."""

    timezone: str = "UTC"
    max_records_per_batch: int = 10_000  # <= 0 in Spark's conf means no limit
    max_bytes_per_batch: int = 2**31 - 1
    safecheck: bool = False
    int_to_decimal: bool = False
    assign_cols_by_name: bool = True
    prefer_int_ext_dtype: bool = False


@dataclass(frozen=True)
class TaskSetup:
    """One transformWithState task as fsstate's keyed loop runs it."""

    processor: Any  # the StatefulProcessor inside PySpark's UDF (None: not found)
    time_mode: str  # the operator's time mode, lower case
    return_type: Any  # the output's StructType
    offsets: list[int]  # Spark's grouped arg offsets (``BasePandasGroupExec.resolveArgOffsets``)
    eval_type: int
    conf: TaskConf
    state_server: int | str  # a TCP port or a Unix socket path
    key_schema: Any  # the grouping key's StructType
    profiled: bool = False  # a UDF profiler is on: PySpark's loop runs


class Unreadable(Exception):
    """A task's set-up fsstate could not read: PySpark's ``read_udfs`` takes ``fallback``."""

    def __init__(self, fallback: tuple[Any, ...], cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.fallback = fallback


class Adapter(Protocol):
    """One PySpark minor's task set-up (a module of this package)."""

    def read_task(self, w: Any, args: tuple[Any, ...]) -> tuple[TaskSetup, tuple[Any, ...]]:
        """The task's set-up from ``read_udfs``'s arguments, and the arguments PySpark's own
        ``read_udfs`` takes instead if fsstate's loop does not run the task; raises
        :class:`Unreadable` (with those arguments) if the set-up cannot be read."""
        ...


def minor_of(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a PySpark version string (None if it is not ``X.Y...``)."""
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def adapter_for(minor: tuple[int, int] | None) -> Adapter | None:
    """The adapter of a PySpark minor (None: fsstate does not read that minor's tasks)."""
    if minor == (4, 1):
        from fsstate_spark.tiered.adapters import v4_1

        return v4_1.ADAPTER
    if minor == (4, 2):
        from fsstate_spark.tiered.adapters import v4_2

        return v4_2.ADAPTER
    if minor == (4, 3):
        from fsstate_spark.tiered.adapters import v4_3

        return v4_3.ADAPTER
    return None


class Recording:
    """A file-like reader that keeps every byte read through it (see the invariants)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.parts: list[bytes] = []

    def read(self, n: int = -1) -> bytes:
        data: bytes = self.stream.read(n)
        self.parts.append(data)
        return data

    def replay(self) -> Replay:
        """A reader that gives the recorded bytes again, then the rest of the stream."""
        return Replay(b"".join(self.parts), self.stream)


class Replay:
    """The recorded bytes, then the underlying stream (what PySpark's ``read_udfs`` reads)."""

    def __init__(self, recorded: bytes, stream: Any) -> None:
        self.head = io.BytesIO(recorded)
        self.left = len(recorded)
        self.stream = stream

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            data: bytes = self.stream.read(n)
            return data
        if n is None or n < 0:
            self.left = 0
            tail: bytes = self.stream.read()
            return self.head.read() + tail
        head = self.head.read(min(n, self.left))
        self.left -= len(head)
        if len(head) < n:
            rest: bytes = self.stream.read(n - len(head))
            head += rest
        return head

    def __getattr__(self, name: str) -> Any:  # anything else of the file: the stream's
        return getattr(self.stream, name)


@dataclass(frozen=True)
class Wire:
    """PySpark's framing readers (``pyspark.serializers``), typed."""

    read_int: Callable[[Any], int]
    read_long: Callable[[Any], int]
    read_bool: Callable[[Any], bool]
    read_utf8: Callable[[Any], str]


def wire() -> Wire:
    """The framing readers of the running PySpark (the same in every supported minor)."""
    from pyspark import serializers as s

    utf8: Any = s.UTF8Deserializer
    return Wire(s.read_int, s.read_long, s.read_bool, utf8().loads)


def read_udf_command(w: Any, pickle_ser: Any, infile: Any) -> tuple[Any, Any]:
    """One ``(func, return_type)`` of the UDF's chain (PySpark's own ``read_command``)."""
    reader: Callable[[Any, Any], tuple[Any, Any]] = w.read_command
    return reader(pickle_ser, infile)


def udf_processor(func: Any) -> tuple[Any, str]:
    """The StatefulProcessor and the time mode (lower case) of PySpark's transformWithState
    UDF: a bound method of ``TransformWithStateInPandasUdfUtils`` in 4.1 to 4.3 (None and ``""``
    for anything else)."""
    util = getattr(func, "__self__", None)
    processor = getattr(util, "_stateful_processor", None)
    return processor, str(getattr(util, "_time_mode", "")).lower()
