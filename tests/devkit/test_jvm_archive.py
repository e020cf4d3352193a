"""The test suite's class-data archive of Spark's driver JVM (:mod:`devkit.jvm_archive`): the
suite's environment names it, and a driver JVM started as the suite starts them (a session
from ``conf/spark-defaults.conf``; ``spark-submit`` of a job) maps it. ``-Xshare:on`` turns a
JVM that cannot use the archive into one that does not start, so these tests fail if the
archive is there but of no use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devkit.jvm_archive import OFF_ENV, USE_OPTION
from devkit.repo import ROOT
from tests.support.jobs import spark_submit

pytestmark = pytest.mark.skipif(
    os.environ.get(OFF_ENV, "").strip().lower() in ("1", "true"), reason=f"{OFF_ENV} is set"
)

JOB = """
import sys
from devkit.spark_local import local_session
spark = local_session("archive-check", **{"spark.driver.extraJavaOptions": "-Xshare:on"})
print("ROWS", spark.range(5).selectExpr("sum(id)").first()[0])
spark.stop()
"""


def test_the_suites_jvm_options_name_a_built_archive() -> None:
    options = os.environ.get("JDK_JAVA_OPTIONS", "")
    named = [o.split("=", 1)[1] for o in options.split() if o.startswith(f"{USE_OPTION}=")]
    assert len(named) == 1, options
    assert Path(named[0]).stat().st_size > 10_000_000, named  # Spark's classes, not a stub


def test_a_session_driver_maps_the_archive() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", JOB], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert "ROWS 10" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


def test_a_spark_submit_driver_maps_the_archive(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB.replace('**{"spark.driver.extraJavaOptions": "-Xshare:on"}', ""))
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME",)}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [str(spark_submit()), "--master", "local[1]", "--driver-java-options", "-Xshare:on",
         str(script)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert "ROWS 10" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
