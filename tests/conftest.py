"""Repository-wide test set-up: make test and example modules importable by Spark's workers.

Spark's Python workers are started by the JVM with the driver's environment, so PYTHONPATH set
here (before any SparkSession exists) lets them import processors defined under ``tests/`` and
``examples/``. It also points PySpark at this interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_paths = [str(ROOT), str(ROOT / "examples")]
_existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(_paths + _existing))
for _p in reversed(_paths):
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
