"""What fsstate's keyed loop gains on each PySpark minor: ``spark_jvm``'s 50k-rows, 4-partitions
cell run on PySpark 4.0, 4.1, 4.2 and 4.3, each in its own interpreter.

fsstate's keyed loop (:mod:`fsstate_spark.tiered.fast_loop`, the task set-up of each minor read
by :mod:`fsstate_spark.pyspark.worker`) runs ``tiered()`` on PySpark 4.1, 4.2 and 4.3; on 4.0
``tiered()`` runs on PySpark's own loop, and 4.0 has no Row ``transformWithState`` (pandas
only). Per minor (the minors of :data:`devkit.compat_matrix.MATRIX` and its ``DEFAULT``), this
suite runs ``python -m bench.run --suite spark_jvm --only "<cell>" --rows-to <file>`` with that
minor's interpreter:

* the ``DEFAULT`` minor (4.3) with the interpreter of this run (``make bench``: ``.venv``);
* every other minor with the virtualenv of its :data:`~devkit.compat_matrix.MATRIX` entry on
  ``DEFAULT``'s Python (``.venv-compat/pyspark4.1.4-py3.11``, fsstate installed editable from
  this checkout), used as it is when present (``make test-compat`` keeps it current) and made
  by :func:`devkit.compat_matrix.ensure_venv` when missing.

Each run is ``spark_jvm``'s cell as that suite measures it (its module docstring: the running
aggregate per flavour, every query side by side in one session, batch 0 warming up, each
timed batch's ratios paired, the outputs checked against the input, the fast-loop queries'
worker log checked) with the sides narrowed by
:data:`~bench.harness.processor_queries.JVM_SIDES_ENV` to ``fast,stock``: ``tiered()`` on
fsstate's loop and on PySpark's, per flavour (pandas and Row), and the Java processor
(``bench/java/RunningAgg.java``, compiled by that run with ``javac`` against that release's
jars) as the yardstick. ``--full``: 50k rows per batch over 25k keys, 4 shuffle partitions, 5
timed batches (``spark_jvm``'s ``--full`` cell); ``--quick``: 5k rows, 4 partitions, 2 timed
batches (``spark_jvm``'s ``--quick`` cell). Each minor's run starts its own JVM; they run one
after the other. Time, on this 2-core machine: a ``--quick`` run took 6.5 minutes (load
average 4 to 7); a ``--full`` one is estimated at about 30 minutes (7 batches of 50k rows per
minor, the slowest query pandas on PySpark's loop: ~1 ms per key on 4.1 to 4.3, ~3.5 ms on
4.0, whose loop takes one key per Arrow batch).

Rows, per minor (``PySpark <minor>, <flavour>, <R>k rows/batch, 4 partitions: <what>``), the
``spark_jvm`` rows of the run renamed, their samples, median and spread as measured, their
notes led by the release, the Python and the interpreter: ``stock loop / fast loop`` (what
fsstate's loop gains over PySpark's under ``tiered()``), ``tiered() fast loop / Java`` and
``tiered() stock loop / Java``; then ``PySpark <minor>, <R>k rows/batch, 4 partitions: <query>
batch time`` of the five queries. All informative (no goal: ``spark_jvm`` holds the goals on
the default PySpark), so the suite draws no chart (:mod:`bench.harness.chart`).

Invariants:

* A row here is a row of a ``spark_jvm`` run on that minor, renamed, its goal dropped: no
  figure is computed here.
* What a minor cannot run is published as skipped rows with the reason ``spark_jvm`` gives (on
  4.0: the Row flavour, and the fast loop side, whose place PySpark's loop takes); a minor
  whose interpreter is missing (no Python of the entry on this machine, or this run's
  interpreter not on the ``DEFAULT`` minor) has all its rows skipped with the reason.
* A minor whose run fails (``spark_jvm``'s checks included) gives one ``ERROR`` row, the run's
  log above it; the other minors' rows are still published, and the runner exits 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench.harness.common import REPO_ROOT, BenchContext, Result, skipped_result
from bench.harness.processor_queries import JVM_SIDES_ENV
from bench.harness.spark import require_pyspark
from devkit.compat_matrix import DEFAULT, MATRIX, VENVS, Entry, ensure_venv, find_python

SUITE = "spark_minors"
SOURCE = "spark_jvm"  # the suite each minor's run measures the cell with
SIDES = "fast,stock"  # spark_jvm's sides per flavour (JVM_SIDES_ENV); the Java query always runs
CELLS = {"full": (50_000, 4), "quick": (5_000, 4)}  # spark_jvm's cell of each mode: rows, parts
FLAVOURS = ("pandas", "Row")
RATIOS = ("stock loop / fast loop", "tiered() fast loop / Java", "tiered() stock loop / Java")
QUERIES = (
    "Java transformWithState",
    "pandas tiered() fast loop",
    "pandas tiered() stock loop",
    "Row tiered() fast loop",
    "Row tiered() stock loop",
)
PROBE = "import platform, pyspark; print(pyspark.__version__, platform.python_version())"


@dataclass(frozen=True)
class Minor:
    """One PySpark minor of the run: the compatibility matrix's entry measured for it."""

    entry: Entry

    @property
    def name(self) -> str:
        """``4.1``."""
        return self.entry.minor

    @property
    def here(self) -> bool:
        """Whether it runs in this run's interpreter (the ``DEFAULT`` minor)."""
        return self.entry.minor == DEFAULT.minor


@dataclass(frozen=True)
class Ran:
    """A minor's interpreter and what it runs: ``PySpark 4.1.4, Python 3.11.7 (<path>)``."""

    python: str
    versions: str


def minors() -> list[Minor]:
    """Every minor of :data:`~devkit.compat_matrix.MATRIX` and ``DEFAULT``, oldest first: the
    ``DEFAULT`` entry for its minor, else the minor's entry on ``DEFAULT``'s Python (else its
    first)."""
    out: dict[str, Entry] = {DEFAULT.minor: DEFAULT}
    for e in MATRIX:
        mine = out.get(e.minor)
        if mine is None or (mine.python != DEFAULT.python and e.python == DEFAULT.python):
            out[e.minor] = e
    return [Minor(out[m]) for m in sorted(out, key=lambda m: tuple(map(int, m.split("."))))]


def cell_label(mode: str) -> str:
    """``50k rows/batch, 4 partitions``: the cell's label in ``spark_jvm`` (its ``--only``)."""
    rows, partitions = CELLS[mode]
    return f"{rows // 1000}k rows/batch, {partitions} partitions"


def row_names(minor: str, mode: str) -> Iterator[tuple[str, str, str]]:
    """``(this suite's row, spark_jvm's row, unit)`` of a minor, in the order published."""
    rows, partitions = CELLS[mode]
    label, column = cell_label(mode), f"{rows // 1000}k rows/batch"
    for flavour in FLAVOURS:
        for what in RATIOS:
            yield (
                f"PySpark {minor}, {flavour}, {label}: {what}",
                f"{flavour}, {partitions} partitions, {column}: {what}",
                "x",
            )
    for query in QUERIES:
        yield (
            f"PySpark {minor}, {label}: {query} batch time",
            f"{label}: {query} batch time",
            "ms",
        )


def republish(minor: str, mode: str, versions: str, doc: dict[str, Any]) -> list[Result]:
    """This suite's rows of a minor from the JSON of its ``spark_jvm`` run (``doc``).

    Raises:
        KeyError: a row of :func:`row_names` is not in ``doc``.
    """
    theirs = {r["name"]: Result.from_json(r) for r in doc["results"]}
    out = []
    for name, source, _unit in row_names(minor, mode):
        if source not in theirs:
            raise KeyError(f"{SOURCE}'s run on PySpark {minor} has no row {source!r}")
        r = theirs[source]
        if r.skipped:
            reason = r.notes.split(":", 1)[1].strip()
            out.append(skipped_result(SUITE, name, r.unit, f"{reason} ({versions})"))
            continue
        out.append(
            Result(
                suite=SUITE,
                name=name,
                value=r.value,
                unit=r.unit,
                notes=f"{versions}: {r.notes}",
                samples=list(r.samples),
                stat=r.stat,
            )
        )
    return out


def skipped_minor(minor: str, mode: str, reason: str) -> list[Result]:
    """Every row of a minor that could not run, with the reason."""
    return [skipped_result(SUITE, name, unit, reason) for name, _, unit in row_names(minor, mode)]


def _interpreter(ctx: BenchContext, minor: Minor) -> Ran | str:
    """The minor's interpreter and its versions, or why there is none (module docstring)."""
    if minor.here:
        python = sys.executable
    else:
        venv_python = VENVS / minor.entry.name / "bin" / "python"
        if venv_python.exists():
            python = str(venv_python)
        else:
            base = find_python(minor.entry.python)
            if base is None:
                return f"no Python {minor.entry.python} on this machine for {minor.entry.name}"
            ctx.log(f"{SUITE}: making {venv_python.parent.parent} (devkit.compat_matrix)")
            python = str(ensure_venv(minor.entry, base))
    probe = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        raise RuntimeError(f"{python} does not import pyspark: {probe.stderr[-2000:]}")
    pyspark, py = probe.stdout.split()
    where = os.path.relpath(python, REPO_ROOT)
    if ".".join(pyspark.split(".")[:2]) != minor.name:
        return f"the interpreter of this run ({where}) has PySpark {pyspark}, not {minor.name}"
    return Ran(python, f"PySpark {pyspark}, Python {py} ({where})")


def _run_minor(ctx: BenchContext, minor: Minor, ran: Ran) -> list[Result]:
    """``spark_jvm``'s cell on the minor's interpreter; its rows, republished."""
    rows_file = ctx.tmp_dir / f"{SUITE}-{minor.entry.name}.json"
    rows_file.unlink(missing_ok=True)
    cmd = [ran.python, "-m", "bench.run", f"--{ctx.mode}", "--suite", SOURCE]
    cmd += ["--only", cell_label(ctx.mode), "--results-dir", str(ctx.results_dir)]
    cmd += ["--rows-to", str(rows_file)] + ([] if ctx.verbose else ["-q"])
    env = dict(os.environ, PYSPARK_PYTHON=ran.python, PYSPARK_DRIVER_PYTHON=ran.python)
    env[JVM_SIDES_ENV] = SIDES
    ctx.log(f"{SUITE}: PySpark {minor.name}: {ran.versions}")
    # the run's progress and table go to stderr: this run's stdout is its own table
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=sys.stderr)
    if done.returncode != 0 or not rows_file.exists():
        raise RuntimeError(
            f"{SOURCE} on {ran.versions} exited {done.returncode} (its log is above)"
        )
    doc = json.loads(rows_file.read_text(encoding="utf-8"))
    rows_file.unlink()
    return republish(minor.name, ctx.mode, ran.versions, doc)


def run(ctx: BenchContext) -> list[Result]:
    """Each minor's run of the cell, one after the other."""
    require_pyspark()
    out: list[Result] = []
    for minor in minors():
        label = f"PySpark {minor.name}, {cell_label(ctx.mode)}"
        if not ctx.wants(label):
            continue
        try:
            ran = _interpreter(ctx, minor)
            if isinstance(ran, str):
                ctx.log(f"{SUITE}: PySpark {minor.name} skipped: {ran}")
                out += skipped_minor(minor.name, ctx.mode, ran)
                continue
            out += _run_minor(ctx, minor, ran)
        except Exception as exc:
            ctx.log(f"{SUITE}: PySpark {minor.name} failed: {exc!r}")
            out.append(Result(SUITE, label, 0.0, "", passed=False, notes=f"ERROR: {exc!r}"))
    return out
