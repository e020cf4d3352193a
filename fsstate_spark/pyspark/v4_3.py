"""PySpark 4.3's transformWithState task set-up, read for fsstate's keyed loop.

4.3's ``main`` reads a framed init message (``START_OF_INIT_MESSAGE``): the runner and eval
confs and the UDFs, each a ``UDFInfo`` with its arg offsets and its pickled commands, and calls
``read_udfs(pickleSer, udf_info_list, eval_type, runner_conf, eval_conf)``. Nothing is read
from a stream here, so PySpark's own ``read_udfs`` takes the same arguments.
"""

from __future__ import annotations

from typing import Any

from fsstate_spark.pyspark.task import TaskSetup, udf_processor
from fsstate_spark.pyspark.v4_2 import task_conf


class Adapter43:
    """``read_udfs(pickleSer, udf_info_list, eval_type, runner_conf, eval_conf)``."""

    def read_task(self, w: Any, args: tuple[Any, ...]) -> tuple[TaskSetup, tuple[Any, ...]]:
        pickle_ser, udf_info_list, eval_type, runner_conf, eval_conf = args
        if len(udf_info_list) != 1 or len(udf_info_list[0].udfs) != 1:
            raise ValueError("a transformWithState task with more than one UDF")
        info = udf_info_list[0]
        f, return_type = w.read_command(pickle_ser, info.udfs[0])
        setup = TaskSetup(
            *udf_processor(f), return_type, list(info.args), eval_type, task_conf(runner_conf),
            eval_conf.state_server_socket_port, eval_conf.grouping_key_schema,
            profiled=bool(getattr(runner_conf, "udf_profiler", None)),
        )  # fmt: skip
        return setup, args


ADAPTER = Adapter43()
