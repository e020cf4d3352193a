"""A streaming job run as a real application for a recovery check: its directories, its
environment and its start in a session of its own (killed and restarted by the caller), and the
command line every such job takes (:func:`job_arguments`).

Used by the crash test (:mod:`devkit.crash_test`) and the suite's recovery tests
(``tests/support/jobs.py``, the operator recovery test), each with a job of its own.

Invariants:

* Every directory of a run is under its ``root``, so the run's restarts share its checkpoint,
  state and sink, and what a killed process leaves (Spark's scratch space, temporary files)
  stays there too.
* A job is started in a new session, its output appended to a log, so every process of it can
  be killed at once (by session) and its log outlives it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devkit.repo import ROOT

JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # faster start of a short-lived JVM


@dataclass(frozen=True)
class JobDirs:
    """The directories of one logical run of a job (shared by its restarts): ``root`` holds
    them, ``input`` is the input directory (shared by the runs of a check)."""

    root: Path
    input: Path

    @property
    def checkpoint(self) -> Path:
        """Spark's checkpoint."""
        return self.root / "checkpoint"

    @property
    def state(self) -> Path:
        """fsstate's state URI."""
        return self.root / "state"

    @property
    def sink(self) -> Path:
        """The job's sink directory."""
        return self.root / "sink"

    @property
    def scratch(self) -> Path:
        """Spark's scratch space and the job's temporary files (a killed job cannot clean
        them up)."""
        return self.root / "tmp"

    def env(self, worker_python: str | None = None) -> dict[str, str]:
        """The environment of a job started as ``python -m <module>``: this interpreter (the
        workers' ``worker_python`` when given), the repository root importable and nothing else
        of ``PYTHONPATH``, Spark's local directories and temporary files in the run's
        directory."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        tmp = self.scratch
        java = f"{JAVA_OPTIONS} -Djava.io.tmpdir={tmp}"
        env.update(
            PYTHONPATH=str(ROOT),
            PYSPARK_PYTHON=worker_python or sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=str(self.root / "spark-local"),
            TMPDIR=str(tmp),
            PYSPARK_SUBMIT_ARGS=f"--driver-java-options '{java}' pyspark-shell",
        )
        return env

    def launch(
        self,
        command: Sequence[str],
        log: Path,
        env: dict[str, str],
        header: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` in the run's directory, in a session of its own, its output
        appended to ``log`` (after a ``header`` line when given)."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
            if header is not None:
                out.write(f"\n==== {header} ====\n".encode())
                out.flush()
            return subprocess.Popen(
                list(command),
                cwd=self.root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def job_arguments(description: str, sink: str) -> argparse.ArgumentParser:
    """The arguments of a recovery job's command line (``--input``, ``--checkpoint``,
    ``--state-uri``, ``--sink``, the sink being ``sink``); the job adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--input", required=True, help="directory of JSON-lines input files")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--state-uri", required=True, help="fsstate state directory or URI")
    parser.add_argument("--sink", required=True, help=sink)
    return parser
