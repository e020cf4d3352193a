"""PySpark's Python worker, with fsstate's keyed loop for ``tiered()`` transformWithState tasks.

Set ``spark.python.worker.module=pyspark_fsstate.worker`` (a static conf: before the
SparkContext starts) with fsstate installed in the executors' Python. Spark's daemon imports
this module in each forked worker and calls :func:`main`; without the daemon, Spark runs it as
``python -m pyspark_fsstate.worker``.

Invariants:

* Importing this module never raises: anything that goes wrong while installing fsstate's loop
  (fsstate missing, another PySpark version, any error) is said once on stderr and PySpark's
  own worker runs, untouched, for every task (an import error here would break every Python
  UDF of the application).
* Arrow's allocator is the system's (``ARROW_DEFAULT_MEMORY_POOL=system``, unless the
  environment already says otherwise), chosen before pyarrow loads: freed Arrow memory goes
  back to the operating system, so a worker's RSS follows fsstate's memory budget.
* fsstate is imported at the first transformWithState task, once the task's ``--py-files`` are
  on ``sys.path`` (never by the daemon, never for another eval type): the job's copy of fsstate
  is the one that runs.
* Every eval type but transformWithState's, and transformWithState tasks whose processor is not
  ``tiered()``, run PySpark's own code (:mod:`fsstate_spark.tiered.fast_loop`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

TWS_EVAL_TYPES = (
    "SQL_TRANSFORM_WITH_STATE_PANDAS_UDF",
    "SQL_TRANSFORM_WITH_STATE_PANDAS_INIT_STATE_UDF",
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF",
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_INIT_STATE_UDF",
)


def _off(exc: BaseException) -> None:
    print(
        f"fsstate: fsstate's keyed loop is off in this worker ({type(exc).__name__}: {exc}); "
        "PySpark's own worker runs",
        file=sys.stderr,
        flush=True,
    )


def _hook() -> None:
    """Load fsstate's loop at the first transformWithState task, not at import.

    Spark's daemon imports this module before a task's ``--py-files`` are on ``sys.path``:
    importing fsstate here would pin the executors' installed copy for every task. At the
    first transformWithState task PySpark has put the task's files on the path, so fsstate
    (and the processor's own modules) import from where the job ships them; other eval types
    never import fsstate at all.
    """
    import pyspark.worker as w
    from pyspark.util import PythonEvalType

    stock = w.read_udfs
    tws = {getattr(PythonEvalType, n) for n in TWS_EVAL_TYPES if hasattr(PythonEvalType, n)}

    def read_udfs(
        pickle_ser: Any, udf_info_list: Any, eval_type: Any, runner_conf: Any, eval_conf: Any
    ) -> Any:
        if eval_type not in tws:
            return stock(  # type: ignore[no-untyped-call]
                pickle_ser, udf_info_list, eval_type, runner_conf, eval_conf
            )
        w.read_udfs = stock  # once: fsstate's install wraps PySpark's own function
        try:
            from fsstate_spark.tiered.fast_loop import install

            install()
        except Exception as exc:  # PySpark's loop runs
            _off(exc)
        return w.read_udfs(  # type: ignore[no-untyped-call]
            pickle_ser, udf_info_list, eval_type, runner_conf, eval_conf
        )

    w.read_udfs = read_udfs


try:
    _hook()
except Exception as _exc:  # never raise at import: PySpark's worker runs as it is
    _off(_exc)

from pyspark.worker import main  # noqa: E402 - after the allocator is chosen

__all__ = ["main"]

if __name__ == "__main__":  # Spark without its daemon: as PySpark's worker's own entry point
    from pyspark.worker_util import get_sock_file_to_executor

    with get_sock_file_to_executor() as sock_file:
        main(sock_file, sock_file)
