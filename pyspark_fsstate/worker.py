"""PySpark's Python worker, with fsstate's keyed loop for ``tiered()`` transformWithState tasks.

Set ``spark.python.worker.module=pyspark_fsstate.worker`` (a static conf: before the
SparkContext starts) with fsstate installed in the executors' Python. Spark's daemon imports
this module in each forked worker and calls :func:`main`; without the daemon, Spark runs it as
``python -m pyspark_fsstate.worker``.

Invariants:

* Importing this module never raises, and it never changes what any other Python UDF does, on
  any PySpark: its ``read_udfs`` wrapper takes and passes on whatever arguments PySpark's own
  takes, and only a transformWithState eval type reaches fsstate. Anything that goes wrong
  while installing fsstate's loop (fsstate missing, a PySpark minor without an adapter, any
  error) is said once on stderr and PySpark's own worker runs, untouched, for every task (an
  error here would break every Python UDF of the application).
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
from collections.abc import Callable
from typing import Any

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

TWS_PREFIX = "SQL_TRANSFORM_WITH_STATE_"
"""What the ``PythonEvalType`` names of transformWithState start with: the eval types this
module hands to fsstate (the exact names fsstate's loop runs are
:data:`fsstate_spark.pyspark.worker.TWS_EVAL_TYPES`, not imported here: fsstate loads at the
first such task)."""


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
    never import fsstate at all. The wrapper takes whatever arguments this PySpark's
    ``read_udfs`` takes (three in 4.0 and 4.1, five in 4.2 and 4.3; the eval type is the third
    in all of them) and hands them on unchanged.
    """
    import pyspark.worker as w
    from pyspark.util import PythonEvalType

    stock: Callable[..., Any] = w.read_udfs
    tws = {v for n, v in vars(PythonEvalType).items() if n.startswith(TWS_PREFIX)}

    def read_udfs(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 3 or args[2] not in tws:
            return stock(*args, **kwargs)
        w.read_udfs = stock  # once: fsstate's install wraps PySpark's own function
        try:
            from fsstate_spark.tiered.fast_loop import install

            install()
        except Exception as exc:  # PySpark's loop runs
            _off(exc)
        installed: Callable[..., Any] = w.read_udfs
        return installed(*args, **kwargs)

    w.read_udfs = read_udfs


try:
    _hook()
except Exception as _exc:  # never raise at import: PySpark's worker runs as it is
    _off(_exc)

from pyspark.worker import main  # noqa: E402 - after the allocator is chosen

__all__ = ["main"]


def _run_without_daemon() -> None:
    """Connect back to the executor as this PySpark's own worker does when it runs as a
    script (4.2+: ``get_sock_file_to_executor``; 4.0 and 4.1: the factory's port or socket path
    and secret from the environment), then run :func:`main`."""
    try:
        from pyspark.worker_util import get_sock_file_to_executor
    except ImportError:  # PySpark 4.0 and 4.1
        from pyspark import serializers
        from pyspark.util import local_connect_and_auth

        write_int: Callable[[int, Any], None] = serializers.write_int
        conn = os.environ.get("PYTHON_WORKER_FACTORY_SOCK_PATH") or int(
            os.environ.get("PYTHON_WORKER_FACTORY_PORT", -1)
        )
        sock_file, _ = local_connect_and_auth(conn, os.environ.get("PYTHON_WORKER_FACTORY_SECRET"))
        write_int(os.getpid(), sock_file)
        sock_file.flush()
        try:
            main(sock_file, sock_file)
        finally:
            sock_file.close()
        return
    with get_sock_file_to_executor() as sock_file:
        main(sock_file, sock_file)


if __name__ == "__main__":  # Spark without its daemon: as PySpark's worker's own entry point
    _run_without_daemon()
