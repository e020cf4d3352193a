"""The Java reference of ``spark_jvm``, ``spark_python_floor`` and ``spark_scale``: the
running aggregate as a Java ``StatefulProcessor`` on Spark's own ``transformWithState``.

The source is ``bench/java/RunningAgg.java`` (class :data:`JAVA_CLASS`): the processor (count
and sum(v) per key in a ``ValueState``, one output row ``(k, n, s)`` per key and batch, time
mode None, update output) and a static ``start`` that runs it over a streaming ``Dataset<Row>``
with a ``foreachBatch`` sink writing to Spark's ``noop`` format, as the Python queries' sink
does. :func:`build_jar` compiles it at run time with ``javac`` against the jars of PySpark's
``jars/`` directory (the Spark the suite runs) into a jar in a scratch directory; the suite's
session gets it through ``spark.jars``. :func:`start_java` starts a query through py4j (with
the session's RocksDB settings, Spark's defaults, or with changelog checkpointing on) and
wraps the Java ``StreamingQuery`` in PySpark's, whose progress and ``stop`` the suite uses as
for every other query; :func:`java_checksum` reads a checked batch's output checksum, which
the Java sink computes instead of writing that batch.

Invariants:

* No JDK compiler (``javac`` neither in ``$JAVA_HOME/bin`` nor on ``PATH``): :func:`build_jar`
  returns the reason and the Java side is skipped, said in the log and in the published
  (skipped) rows; a compiler that fails on the source is an error, not a skip.
* The classes target Java 17 (``--release 17``, Spark 4's minimum), whichever JDK compiles
  them, so the JVM that runs Spark loads them.
* :func:`java_session` stops its SparkSession and removes its scratch directory on exit,
  whatever happened inside.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.common import REPO_ROOT, BenchContext
from bench.harness.processor_queries import Checksum
from bench.harness.spark import session
from devkit.spark_local import session_conf

JAVA_SOURCE = REPO_ROOT / "bench" / "java" / "RunningAgg.java"
JAVA_CLASS = "fsstate.bench.RunningAgg"
JAR_NAME = "fsstate-bench-jvm.jar"
# RocksDB's changelog checkpointing: each commit uploads the changed rows, snapshots go up in
# the background (what Spark's docs recommend for stateful queries; off by default)
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def javac() -> str | None:
    """The JDK compiler: ``$JAVA_HOME/bin/javac`` if present, else ``javac`` on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "javac", os.X_OK):
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def pyspark_jars() -> Path:
    """The ``jars/`` directory of the installed PySpark (the Spark the suite runs)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def build_jar(scratch: Path) -> Path | str:
    """Compile :data:`JAVA_SOURCE` into ``<scratch>/fsstate-bench-jvm.jar``.

    Returns:
        The jar's path, or why there is none (no JDK compiler here).

    Raises:
        RuntimeError: ``javac`` failed (the message has its output).
    """
    compiler = javac()
    if compiler is None:
        return (
            "no JDK compiler (javac is neither in $JAVA_HOME/bin nor on PATH; a JRE alone "
            "runs Spark but cannot build the Java processor)"
        )
    classes = scratch / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    cmd = [
        compiler,
        "--release",
        "17",
        "-nowarn",
        "-d",
        str(classes),
        "-cp",
        str(pyspark_jars() / "*"),
        str(JAVA_SOURCE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(
            f"javac failed on {JAVA_SOURCE.name} ({proc.returncode}): "
            f"{(proc.stdout + proc.stderr)[-3000:]}"
        )
    jar = scratch / JAR_NAME
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
        for path in sorted(classes.rglob("*.class")):
            z.write(path, path.relative_to(classes).as_posix())
    return jar


def _java_class(spark: Any) -> Any:
    """The py4j view of :data:`JAVA_CLASS` in ``spark``'s JVM."""
    view = spark.sparkContext._jvm
    for part in JAVA_CLASS.split("."):
        view = getattr(view, part)
    return view


def start_java(
    spark: Any,
    df: Any,
    checkpoint: Path,
    name: str,
    trigger: str,
    checked: set[int],
    changelog: bool = False,
) -> Any:
    """Start the Java running aggregate over the streaming DataFrame ``df``.

    Args:
        spark: the session (its ``spark.jars`` holds :func:`build_jar`'s jar).
        df: the input (columns ``k`` STRING and ``v`` BIGINT at least).
        checkpoint: the query's checkpoint location.
        name: the query's name (also the key of its checksums).
        trigger: the processing-time trigger's interval (``"500 milliseconds"``).
        checked: batch ids whose output checksum is kept instead of written.
        changelog: RocksDB's changelog checkpointing on for this query
            (:data:`CHANGELOG_CONF`, which a query reads when it starts; the session's own
            setting is put back after), else the session's setting (Spark's default: off).

    Returns:
        The started query, as PySpark's ``StreamingQuery``.
    """
    from pyspark.sql.streaming.query import StreamingQuery

    ids = ",".join(str(b) for b in sorted(checked))
    conf = {CHANGELOG_CONF: "true"} if changelog else {}
    with session_conf(spark, **conf):
        jq = _java_class(spark).start(df._jdf, str(checkpoint), name, trigger, ids)
    return StreamingQuery(jq)


def java_checksum(spark: Any, name: str, batch: int) -> Checksum | None:
    """(rows, sum n, sum s, sum crc32(k)) of checked batch ``batch`` of the Java query
    ``name``, or None when the sink did not see it."""
    text = _java_class(spark).checksum(name, batch)
    if text is None:
        return None
    a, b, c, d = (int(x) for x in str(text).split(","))
    return a, b, c, d


@dataclass
class JavaSession:
    """What :func:`java_session` yields: the session, a scratch directory for the suite's
    queries, and why there is no Java query (None when the jar was built)."""

    spark: Any
    scratch: Path
    java_skip: str | None

    @property
    def java(self) -> bool:
        """Whether the Java query can run (the jar is on the session's ``spark.jars``)."""
        return self.java_skip is None


@contextmanager
def java_session(
    ctx: BenchContext, suite: str, app: str, conf: Mapping[str, str] | None = None
) -> Iterator[JavaSession]:
    """A local SparkSession with :func:`build_jar`'s jar (when a JDK compiler exists: else the
    reason is logged and yielded), ``noDataMicroBatches`` off, and a scratch directory under
    the run's ``tmp_dir``; the session is stopped and the scratch removed on exit.

    Args:
        ctx: the run's context.
        suite: the suite's name (the scratch directory's prefix, the log line's).
        app: the Spark application's name.
        conf: more session settings of the suite (over ``conf/spark-defaults.conf``'s).
    """
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{suite}-", dir=ctx.tmp_dir))
    try:
        jar = build_jar(scratch / "java")
        skip = jar if isinstance(jar, str) else None
        if skip is not None:
            ctx.log(f"{suite}: the Java side is skipped: {skip}")
        jars = {} if isinstance(jar, str) else {"spark.jars": str(jar)}
        spark = session(
            ctx,
            app,
            **{"spark.sql.streaming.noDataMicroBatches.enabled": "false", **jars, **(conf or {})},
        )
        try:
            yield JavaSession(spark, scratch, skip)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
