"""A class-data archive of Spark's driver JVM, for the test suite's many short-lived JVMs.

Every Spark application the test suite starts (its sessions, and each ``spark-submit``,
local-cluster, Connect or kill-and-restart job) loads, parses and verifies the same tens of
thousands of classes from Spark's jars before its first query. The JDK can map them from an
archive instead (application class-data sharing: a dynamic archive, JDK 13+, dumped by
``-XX:ArchiveClassesAtExit`` at the exit of one JVM, used by ``-XX:SharedArchiveFile``).
:func:`spark_class_archive` builds one by running :mod:`devkit.jvm_archive_job` (a small Spark
job) in a JVM that dumps what it loaded, and adds the option that uses it to
``JDK_JAVA_OPTIONS``, which every JVM started from this environment reads. Measured on this
2-core machine (a session, a two-batch streaming aggregation, stop; 3 runs each): the
driver JVM's CPU 14.5-15.2 s -> 8.1-11.3 s, the session's start 6.2-7.4 s -> 4.0-5.4 s.

Invariants:

* One archive per key (the ``java -version`` text, the pyspark installation's path, version
  and jars), under the interpreter's prefix (``<venv>/spark-class-archive/``); it is built at
  most once there, published by rename (never seen half-written) under a lock file that
  concurrent test processes take in turn.
* Best effort, never a failure: a JVM whose class path does not start with the dumping JVM's
  (``spark-submit``'s launcher JVM, a job with other jars) ignores the archive without a word
  (``-Xlog:cds=off``); a build that fails leaves ``JDK_JAVA_OPTIONS`` as it was and warns once.
* The classes are the same ones from the same jars: only how the JVM loads them changes. Only
  the test suite uses it (its plugin); the demo, the examples and the benchmarks start their
  JVMs as users do.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from devkit.repo import ROOT

ARCHIVE_DIR = Path(sys.prefix) / "spark-class-archive"
BUILD_TIMEOUT_S = 300
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM that cannot use the archive says nothing
DUMP_OPTION = "-XX:ArchiveClassesAtExit"
USE_OPTION = "-XX:SharedArchiveFile"
DUMP_ENV = "FSSTATE_DUMP_JAVA_OPTIONS"  # the archiving job's driver options (it alone dumps)
OFF_ENV = "FSSTATE_TEST_NO_JVM_ARCHIVE"  # 1: no archive (a short session would not earn it back)


def spark_class_archive() -> Path | None:
    """Build (once) the archive of this pyspark's driver JVM and have every JVM started from
    this environment use it; returns its path, or None when there is none (a warning said
    why). Run it before any SparkSession exists."""
    options = os.environ.get("JDK_JAVA_OPTIONS", "")
    if USE_OPTION in options or os.environ.get(OFF_ENV, "").strip().lower() in ("1", "true"):
        return None  # set by a parent process, or already here; or not wanted
    try:
        path = _archive_path()
        if not path.exists():
            _build_locked(path)
    except (OSError, subprocess.SubprocessError) as exc:
        warnings.warn(f"no class-data archive for Spark's JVMs: {exc}", stacklevel=2)
        return None
    os.environ["JDK_JAVA_OPTIONS"] = f"{options} {USE_OPTION}={path} {QUIET}".strip()
    return path


def _archive_path() -> Path:
    """The archive's path for this java and this pyspark installation."""
    import pyspark

    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if "JAVA_HOME" in os.environ else "java"
    version = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, timeout=60, check=True
    ).stderr
    home = Path(pyspark.__file__).parent
    jars = sorted((p.name, p.stat().st_size) for p in (home / "jars").glob("*.jar"))
    text = f"{version}\n{home}\n{pyspark.__version__}\n{jars}\n{_options()}"
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    return ARCHIVE_DIR / f"driver-{pyspark.__version__}-{key}.jsa"


def _options() -> str:
    """The JVM options the archive is dumped and used with (they must agree: GC, code cache)."""
    return os.environ.get("JDK_JAVA_OPTIONS", "")


def _build_locked(path: Path) -> None:
    """Build the archive unless another process did while this one waited for the lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            _build(path)


def _build(path: Path) -> None:
    """Run the archiving job in a JVM that dumps its classes at exit; publish it by rename."""
    with tempfile.TemporaryDirectory(dir=path.parent) as work:
        dumped = Path(work) / "archive.jsa"
        env = dict(os.environ)
        env[DUMP_ENV] = f"{DUMP_OPTION}={dumped} {QUIET}"
        proc = subprocess.run(
            [sys.executable, "-m", "devkit.jvm_archive_job", work],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        )  # fmt: skip
        if proc.returncode != 0 or not dumped.exists():
            tail = (proc.stdout + proc.stderr)[-1500:]
            raise OSError(f"the archiving job ended with {proc.returncode}: {tail}")
        os.replace(dumped, path)
