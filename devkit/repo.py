"""The repository root, and making it importable by Spark's Python workers.

Spark's Python workers are started by the JVM with the driver's environment, and import the
processors a query uses by module name (``tests.<...>``, ``bench.<...>``, ``examples.<...>``,
``devkit.<...>``): the repository root must be on their ``PYTHONPATH``.

Invariants:

* :data:`ROOT` is the directory holding ``devkit/`` (the checkout's root), whatever the
  working directory.
* :func:`worker_paths` only prepends :data:`ROOT` to ``PYTHONPATH`` (entries already there stay,
  in order, without duplicates) and points PySpark at this interpreter unless it already names
  one; it imports nothing, so it can run before any SparkSession (or pyspark import) exists.
* :func:`compiled_pyspark_workers` (the test suite's) only changes which file starts the
  workers' interpreter: :data:`WORKER_LAUNCHER` runs the same interpreter, with the same
  pyspark, imported from its installed, compiled files instead of Spark's zip.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER_LAUNCHER = ROOT / "devkit" / "bin" / "spark-python"
WORKER_PYTHON_ENV = "FSSTATE_WORKER_PYTHON"  # the interpreter the launcher runs


def worker_paths() -> None:
    """Let Spark's Python workers import the repository root's packages.

    Run it before the SparkSession starts: the JVM hands its workers the environment it was
    started with.
    """
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(ROOT), *existing]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def compiled_pyspark_workers() -> None:
    """Have Spark start its Python workers through :data:`WORKER_LAUNCHER` (the test suite's).

    Spark puts its zipped copy of pyspark first on a worker's ``PYTHONPATH``; Python compiles
    what it imports from a zip again in every new process, where an installed package's modules
    load from their ``.pyc`` files: 1.8 s against 0.7 s of CPU for pyspark, pandas and pyarrow
    on this 2-core machine. Every driver-side ``transformWithState`` runner (each query's
    first batch) and every Spark Connect ``foreachBatch`` worker is such a new process. The
    launcher runs the interpreter ``PYSPARK_PYTHON`` named (else this one) without the zips,
    when they belong to a pip-installed pyspark, which is then the one imported (the same
    release: the zip is built from it). Run it before :func:`worker_paths` and before any
    SparkSession exists; running it twice changes nothing.
    """
    current = os.environ.get("PYSPARK_PYTHON") or sys.executable
    if current == str(WORKER_LAUNCHER):
        return
    os.environ[WORKER_PYTHON_ENV] = current
    os.environ["PYSPARK_PYTHON"] = str(WORKER_LAUNCHER)
