"""PySpark 4.1's transformWithState task set-up, read for fsstate's keyed loop.

4.1's ``read_udfs(pickleSer, infile, eval_type)`` reads everything from ``infile``: the runner
conf (``num_conf`` and that many UTF-8 key/value pairs), the state server (an int port, or
``-1`` then a UTF-8 Unix socket path), the grouping key's schema (JSON), the profiler (a bool,
then its name), the number of UDFs, and per UDF its arg offsets (plain ints for these eval
types), its chain of pickled commands and, when profiled, a result id.

Invariant: everything is read through a :class:`~fsstate_spark.pyspark.task.Recording`, and
the arguments handed back for PySpark's own ``read_udfs`` replay it (nothing is lost).
"""

from __future__ import annotations

import json
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

NO_LIMIT = 2**31 - 1


def _flag(conf: dict[str, str], key: str, default: str) -> bool:
    return conf.get(key, default).lower() == "true"


def task_conf(conf: dict[str, str]) -> TaskConf:
    """4.1's runner conf (raw strings, as ``read_udfs`` reads them) as a :class:`TaskConf`."""
    return TaskConf(
        timezone=conf.get("spark.sql.session.timeZone") or "UTC",
        max_records_per_batch=int(conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", 10000)),
        max_bytes_per_batch=int(conf.get("spark.sql.execution.arrow.maxBytesPerBatch", NO_LIMIT)),
        safecheck=_flag(conf, "spark.sql.execution.pandas.convertToArrowArraySafely", "false"),
        int_to_decimal=_flag(
            conf, "spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled", "false"
        ),
        assign_cols_by_name=_flag(
            conf, "spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName", "true"
        ),
    )


class Adapter41:
    """``read_udfs(pickleSer, infile, eval_type)``."""

    def read_task(self, w: Any, args: tuple[Any, ...]) -> tuple[TaskSetup, tuple[Any, ...]]:
        from pyspark.sql.types import StructType

        pickle_ser, infile, eval_type = args[:3]
        rec = Recording(infile)
        io = wire()
        read_int, read_bool, read_long = io.read_int, io.read_bool, io.read_long
        try:
            conf = {}
            for _ in range(read_int(rec)):
                k = io.read_utf8(rec)
                conf[k] = io.read_utf8(rec)
            port: int | str = read_int(rec)
            if port == -1:
                port = io.read_utf8(rec)
            key_schema = StructType.fromJson(json.loads(io.read_utf8(rec)))
            profiler = io.read_utf8(rec) if read_bool(rec) else None
            if read_int(rec) != 1:
                raise ValueError("a transformWithState task with more than one UDF")
            offsets = [read_int(rec) for _ in range(read_int(rec))]
            if read_int(rec) != 1:
                raise ValueError("a chained transformWithState UDF")
            f, return_type = read_udf_command(w, pickle_ser, rec)
            if profiler in ("perf", "memory"):
                read_long(rec)
        except Exception as exc:
            raise Unreadable((pickle_ser, rec.replay(), *args[2:]), exc) from exc
        fallback = (pickle_ser, rec.replay(), *args[2:])
        setup = TaskSetup(
            *udf_processor(f), return_type, offsets, eval_type, task_conf(conf), port, key_schema,
            profiled=profiler is not None,
        )  # fmt: skip
        return setup, fallback


ADAPTER = Adapter41()
