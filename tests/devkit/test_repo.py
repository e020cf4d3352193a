"""The test suite's worker launcher (:data:`devkit.repo.WORKER_LAUNCHER`): the interpreter it
runs imports the installed pyspark and py4j, not Spark's zips; every other entry of
``PYTHONPATH`` stays, in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from devkit.repo import WORKER_LAUNCHER, WORKER_PYTHON_ENV

LIB = Path(pyspark.__file__).parent / "python" / "lib"
PROBE = (
    "import json, os, sys, pyspark, py4j; print(json.dumps({'path': os.environ['PYTHONPATH'], "
    "'pyspark': pyspark.__file__, 'py4j': py4j.__file__, 'exe': sys.executable}))"
)


def _launch(pythonpath: list[str]) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    env[WORKER_PYTHON_ENV] = sys.executable
    out = subprocess.run(
        [str(WORKER_LAUNCHER), "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_the_launcher_drops_the_zips_of_an_installed_pyspark(tmp_path: Path) -> None:
    zips = sorted(str(p) for p in LIB.glob("*.zip"))
    assert any(z.endswith("pyspark.zip") for z in zips) and len(zips) == 2, zips
    other = tmp_path / "x" / "python" / "lib" / "pyspark.zip"  # no package beside it: kept
    got = _launch(["/first", zips[0], "/a dir/*", zips[1], str(other)])
    assert got["path"] == os.pathsep.join(["/first", "/a dir/*", str(other)])
    installed = Path(pyspark.__file__).resolve()
    assert Path(got["pyspark"]).resolve() == installed  # the package itself, not the zip
    assert ".zip" not in got["py4j"]
    assert Path(got["exe"]).resolve() == Path(sys.executable).resolve()


def test_the_launcher_refuses_to_run_without_an_interpreter() -> None:
    env = {k: v for k, v in os.environ.items() if k != WORKER_PYTHON_ENV}
    proc = subprocess.run(
        [str(WORKER_LAUNCHER), "-c", "pass"], env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0 and WORKER_PYTHON_ENV in proc.stderr
