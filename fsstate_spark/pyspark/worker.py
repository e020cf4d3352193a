"""What a transformWithState task hands its Python worker, read the way each PySpark minor sends it.

fsstate's keyed loop (:mod:`fsstate_spark.tiered.fast_loop`) is version-neutral: it runs a
:class:`TaskSetup` (the processor's function, its return type, the grouped arg offsets, the
task's Arrow settings and Spark's state server). What moves between PySpark minors is how a task
is set up: which arguments ``pyspark.worker.read_udfs`` takes, where the runner conf, the state
server's port and the grouping key's schema come from, and how a UDF is framed on the wire. One
small module per supported minor reads that (:func:`adapter_for`); the rest of what the loop
needs of PySpark's worker is the same on every minor and is here (:func:`pyspark_worker`, the
eval types :data:`TWS_EVAL_TYPES`, the output stream's start marker :func:`start_arrow_stream`):

==========  ======================================================================================
minor       ``read_udfs`` and where the task's set-up comes from
==========  ======================================================================================
4.0         none: PySpark's own loop runs (one key per Arrow batch, list/map/timer replies as
            Arrow, no ``ExpiredTimerIterator``: see :data:`STOCK_ONLY`)
4.1         ``read_udfs(pickleSer, infile, eval_type)``: the conf, the state server (a port, or
            ``-1`` and a Unix socket path), the key schema and the UDF read from ``infile``
            (:mod:`fsstate_spark.pyspark.v4_1`)
4.2         ``read_udfs(pickleSer, infile, eval_type, runner_conf, eval_conf)``: the confs read by
            ``main``, the UDF from ``infile`` (:mod:`fsstate_spark.pyspark.v4_2`)
4.3         ``read_udfs(pickleSer, udf_info_list, eval_type, runner_conf, eval_conf)``: the UDF
            framed in the init message (:mod:`fsstate_spark.pyspark.v4_3`)
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

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from fsstate_spark.pyspark.task import Adapter, TaskConf, TaskSetup, Unreadable

__all__ = [
    "ADAPTERS",
    "STOCK_ONLY",
    "TWS_EVAL_TYPES",
    "TaskConf",
    "TaskSetup",
    "Unreadable",
    "adapter_for",
    "initial_state_sides",
    "pyspark_worker",
    "start_arrow_stream",
]

ADAPTERS = ((4, 1), (4, 2), (4, 3))
"""The PySpark minors whose task set-up fsstate's keyed loop reads."""

STOCK_ONLY = {
    (4, 0): "PySpark 4.0 sends one key per Arrow batch and has no expired-timer iterator: "
    "tiered() runs on PySpark's own loop there",
}
"""Supported minors where ``tiered()`` runs on PySpark's own loop, and why."""

TWS_EVAL_TYPES = {
    "SQL_TRANSFORM_WITH_STATE_PANDAS_UDF": (True, False),
    "SQL_TRANSFORM_WITH_STATE_PANDAS_INIT_STATE_UDF": (True, True),
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF": (False, False),
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_INIT_STATE_UDF": (False, True),
}
"""PySpark's ``PythonEvalType`` names of transformWithState: (pandas, with initial state).
:mod:`pyspark_fsstate.worker` selects the same names by their ``SQL_TRANSFORM_WITH_STATE_``
prefix (it must not import fsstate before the first such task)."""


def adapter_for(minor: tuple[int, int] | None) -> Adapter | None:
    """The adapter of a PySpark minor (None: fsstate does not read that minor's tasks)."""
    if minor == (4, 1):
        from fsstate_spark.pyspark import v4_1

        return v4_1.ADAPTER
    if minor == (4, 2):
        from fsstate_spark.pyspark import v4_2

        return v4_2.ADAPTER
    if minor == (4, 3):
        from fsstate_spark.pyspark import v4_3

        return v4_3.ADAPTER
    return None


def pyspark_worker() -> Any:
    """PySpark's worker module (``pyspark.worker``), whose ``read_udfs`` fsstate's loop wraps."""
    import pyspark.worker as w

    return w


def start_arrow_stream(stream: Any) -> None:
    """Write Spark's ``START_ARROW_STREAM`` marker, which precedes a task's output stream."""
    from pyspark import serializers

    write_int: Callable[[int, Any], None] = serializers.write_int
    write_int(serializers.SpecialLengths.START_ARROW_STREAM, stream)


def initial_state_sides(batch: pa.RecordBatch) -> list[tuple[int, pa.Table]]:
    """The rows of a batch of a transformWithState task with initial state, per side present
    (0: ``inputData``, 1: ``initState``), each side's struct fields as a table: at their own
    lengths, as PySpark's own loop reads them (4.1 pads the shorter side of a batch with rows
    whose fields have no values; 4.2+ sends the absent side as a null struct)."""
    out = []
    for side, name in ((0, "inputData"), (1, "initState")):
        col = batch.column(batch.schema.get_field_index(name))
        if col.null_count == len(col):
            continue
        fields = [col.field(i) for i in range(col.type.num_fields)]
        struct = pa.Table.from_arrays(fields, names=[f.name for f in col.type])
        if struct.num_rows:
            out.append((side, struct))
    return out
