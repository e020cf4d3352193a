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
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker_paths() -> None:
    """Let Spark's Python workers import the repository root's packages.

    Run it before the SparkSession starts: the JVM hands its workers the environment it was
    started with.
    """
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(ROOT), *existing]))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
