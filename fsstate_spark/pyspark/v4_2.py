"""PySpark 4.2's transformWithState task set-up, read for fsstate's keyed loop.

4.2's ``main`` reads the runner and eval confs (``RunnerConf`` / ``EvalConf``) and calls
``read_udfs(pickleSer, infile, eval_type, runner_conf, eval_conf)``: the state server and the
grouping key's schema are eval-conf keys; ``read_udfs`` reads the number of UDFs and per UDF
its arg offsets (an int and a named-argument flag each), its chain of pickled commands and a
result id, from ``infile``.

Invariant: the UDF is read through a :class:`~fsstate_spark.pyspark.task.Recording`, and the
arguments handed back for PySpark's own ``read_udfs`` replay it (nothing is lost).
"""

from __future__ import annotations

from typing import Any

from fsstate_spark.pyspark.task import (
    Recording,
    TaskConf,
    TaskSetup,
    Unreadable,
    read_udf_command,
    udf_processor,
    wire,
)


def task_conf(runner_conf: Any) -> TaskConf:
    """4.2's and 4.3's ``RunnerConf`` as a :class:`TaskConf`."""
    return TaskConf(
        timezone=runner_conf.timezone or "UTC",
        max_records_per_batch=int(runner_conf.arrow_max_records_per_batch),
        max_bytes_per_batch=int(runner_conf.arrow_max_bytes_per_batch),
        safecheck=bool(runner_conf.safecheck),
        int_to_decimal=bool(runner_conf.int_to_decimal_coercion_enabled),
        assign_cols_by_name=bool(runner_conf.assign_cols_by_name),
        prefer_int_ext_dtype=bool(getattr(runner_conf, "prefer_int_ext_dtype", False)),
    )


class Adapter42:
    """``read_udfs(pickleSer, infile, eval_type, runner_conf, eval_conf)``."""

    def read_task(self, w: Any, args: tuple[Any, ...]) -> tuple[TaskSetup, tuple[Any, ...]]:

        pickle_ser, infile, eval_type, runner_conf, eval_conf = args
        rec = Recording(infile)
        io = wire()
        read_int, read_bool, read_long = io.read_int, io.read_bool, io.read_long
        try:
            if read_int(rec) != 1:
                raise ValueError("a transformWithState task with more than one UDF")
            offsets = []
            for _ in range(read_int(rec)):
                offset = read_int(rec)
                if read_bool(rec):
                    io.read_utf8(rec)  # a named argument: not in transformWithState's offsets
                offsets.append(offset)
            if read_int(rec) != 1:
                raise ValueError("a chained transformWithState UDF")
            f, return_type = read_udf_command(w, pickle_ser, rec)
            read_long(rec)  # the result id
        except Exception as exc:
            raise Unreadable((pickle_ser, rec.replay(), *args[2:]), exc) from exc
        fallback = (pickle_ser, rec.replay(), *args[2:])
        setup = TaskSetup(
            *udf_processor(f), return_type, offsets, eval_type, task_conf(runner_conf),
            eval_conf.state_server_socket_port, eval_conf.grouping_key_schema,
            profiled=bool(runner_conf.udf_profiler),
        )  # fmt: skip
        return setup, fallback


ADAPTER = Adapter42()
