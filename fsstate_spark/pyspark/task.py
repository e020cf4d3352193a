"""What a transformWithState task hands fsstate's keyed loop, whatever the PySpark minor: the
:class:`TaskSetup` each adapter of :mod:`fsstate_spark.pyspark.worker` reads, and the pieces
the adapters share (the recorded read and its replay, PySpark's framing readers, the processor
inside PySpark's UDF).

Invariants: a :class:`Replay` gives exactly the bytes a :class:`Recording` read, then the rest
of the stream; :func:`udf_processor` is the only read of PySpark's private UDF attributes.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


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
