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
* Every eval type but transformWithState's, and transformWithState tasks whose processor is not
  ``tiered()``, run PySpark's own code (:mod:`fsstate_spark.tiered.fast_loop`).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

try:
    from fsstate_spark.tiered.fast_loop import install as _install

    _install()
except Exception as _exc:  # never raise at import: PySpark's worker runs as it is
    print(
        f"fsstate: fsstate's keyed loop is off in this worker ({type(_exc).__name__}: {_exc}); "
        "PySpark's own worker runs",
        file=sys.stderr,
        flush=True,
    )

from pyspark.worker import main  # after the allocator is chosen

__all__ = ["main"]

if __name__ == "__main__":  # Spark without its daemon: as PySpark's worker's own entry point
    from pyspark.worker_util import get_sock_file_to_executor

    with get_sock_file_to_executor() as sock_file:
        main(sock_file, sock_file)
