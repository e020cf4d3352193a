"""The compatibility matrix: fsstate's suites on every supported PySpark minor and Python.

``make test`` runs the whole suite on the default PySpark (pyproject's ``dev`` extra) and Python.
``make test-compat`` (``python -m devkit.compat_matrix``) runs each other :data:`MATRIX` entry
in a virtualenv of its own (``.venv-compat/<name>``, made and filled by this module from the
package registry: ``pyspark[connect]==<version>`` beside fsstate's ``spark``, ``cli`` and
``test`` extras), on the tests its pytest markers select (:data:`MARKERS`, :func:`selection`):
on another minor the ``compat`` tests, the conformance scenarios on that minor's ``tiered()``
way; on another Python the ``compat_python`` tests. Two entries run at once (``--lanes``), each
one pytest process (no pytest-xdist workers: ``--workers``), so that an entry starts one
SparkSession and the machine's two cores stay busy until the last entry ends, not only until
each entry's last test file does. ``--full`` (``make test-compat-full``, not
in CI: about 20 minutes a minor) runs every entry on every marked test, the conformance suite
every way. ``--reference write|check`` (``make conformance-reference[-check]``) makes, or
checks, the conformance suite's stored references of Spark's handles on every minor
(:data:`REFERENCE_JOB` in the default virtualenv and in one entry's of each other minor).

Invariants:

* One place says what is supported and tested: the supported minors are
  :data:`fsstate_spark.pyspark.SUPPORTED_MINORS` (the adapters of
  :mod:`fsstate_spark.pyspark.worker` read them too), tested by :data:`MATRIX` (here: an entry
  per minor at least, :func:`untested_minors`); the docs' support table is generated from them
  (:func:`support_table`) and a test holds the page to it.
* Each entry's virtualenv is its own (nothing shared with ``.venv``), rebuilt when its pins or
  the project's dependencies change (a stamp holds their hash); the run fails if any entry
  fails, and says which, after running every entry.
* An entry whose Python is not on this machine fails the run (CI must test what the table
  says), unless ``--allow-missing`` is given.
* Entries run side by side write their pytest output to ``build/compat/<entry>.log``; the run
  prints each entry's durations and summary as it ends (its log's last 150 lines if it failed).
* What an entry runs is what its markers select from the whole ``tests`` tree: a test is
  added to or left out of the matrix where it is defined, never by a path here.
* A minor's stored conformance references are made (or checked) by that minor's PySpark, in
  its virtualenv: the default minor's in the running interpreter (``.venv``), another minor's
  in its first :data:`MATRIX` entry's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from devkit.jvm_archive import OFF_ENV
from devkit.repo import ROOT

VENVS = ROOT / ".venv-compat"


@dataclass(frozen=True)
class Entry:
    """One PySpark release on one Python."""

    pyspark: str
    python: str  # major.minor

    @property
    def minor(self) -> str:
        return ".".join(self.pyspark.split(".")[:2])

    @property
    def name(self) -> str:
        return f"pyspark{self.pyspark}-py{self.python}"


DEFAULT = Entry("4.3.0", "3.11")
"""What ``make test`` runs (the ``dev`` extra's PySpark, the project's Python)."""

MATRIX = (
    Entry("4.0.5", "3.11"),
    Entry("4.1.4", "3.11"),
    Entry("4.2.1", "3.11"),
    Entry("4.3.0", "3.12"),
    Entry("4.3.0", "3.13"),
)
"""The latest patch of every other supported minor, and the default PySpark on the other
Pythons."""

CONFORMANCE_WAYS_ENV = "FSSTATE_CONFORMANCE_WAYS"  # tests.fsstate_spark.conformance.harness

MARKERS = {
    "compat": "runs on every other PySpark minor (make test-compat)",
    "compat_python": "runs on the default PySpark on the other Pythons (make test-compat)",
    "compat_full": "runs on every matrix entry with --full (make test-compat-full)",
}
"""The pytest markers that select what each entry runs (registered in pyproject.toml; a test
holds the registration to this). ``compat``: on another minor, the UDF-safety test,
``tiered()`` equivalence on both loops (against Spark's handles), the flow driver's (against
Spark's operator), the state sources, state that follows its checkpoint (a copied checkpoint; a
fork and a roll-back cut of Spark's checkpoint files, equal to a copy with Spark's handles: the
lineage reads PySpark's state-server client, and the cut knows each release's file names),
``tiered()``'s figures on the keyed loop, which come back to the driver through Spark's
accumulator (each minor's task-side accumulator updates differ), and Spark's
transformWithState scenarios that cross the task's protocol (input batches, timers, initial
state) on the way that minor's ``tiered()`` takes with the worker module (fsstate's loop where
the minor has an adapter), without their ``slow`` variants (``make test`` runs those on the
default minor). ``compat_python``: what the default PySpark runs on another Python (the same
release's protocol as ``make test``'s: the worker module, both loops and the UDFs).
``compat_full``: what ``--full`` adds (the rest of the conformance suite, rescaling, the
whole-batch operators, the demo and its CLI, Spark Connect, the engine's command line)."""

TESTS = "tests"
"""Where every entry collects from (its markers select)."""

ALL_WAYS = ("tiered-fast", "tiered-stock", "driver")
"""Every way of the conformance suite (``--full`` runs every scenario in each)."""

REFERENCE_JOB = "tests/fsstate_spark/conformance/make_reference.py"
REFERENCE_MODE_ENV = "FSSTATE_CONFORMANCE_REFERENCE"  # tests.fsstate_spark.conformance.reference


def selection(entry: Entry, full: bool) -> tuple[list[str], dict[str, str]]:
    """The entry's pytest arguments and environment: the tests marked ``compat`` without the
    ``slow`` ones on another minor (the conformance scenarios on the minor's ``tiered()``
    way), ``compat_python`` on the default minor; with ``full``, every marked test and every
    way of the conformance suite."""
    if full:
        marks = " or ".join(MARKERS)
        return [TESTS, "-m", marks], {CONFORMANCE_WAYS_ENV: ",".join(ALL_WAYS)}
    if entry.minor == DEFAULT.minor:
        return [TESTS, "-m", "compat_python"], {}
    from fsstate_spark.pyspark.worker import ADAPTERS

    fast = tuple(map(int, entry.minor.split("."))) in ADAPTERS
    way = "tiered-fast" if fast else "tiered-stock"
    return [TESTS, "-m", "compat and not slow"], {CONFORMANCE_WAYS_ENV: way}


def pinned_releases() -> dict[str, str]:
    """The PySpark release pinned per minor: pyproject's ``dev`` extra's for the minor ``make
    test`` runs, the matrix's for the others."""
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    dev = project["optional-dependencies"]["dev"]
    pins = [m.group(1) for d in dev if (m := re.fullmatch(r"pyspark(?:\[\w+\])?==(\S+)", d))]
    out = {e.minor: e.pyspark for e in MATRIX}
    for pin in pins:
        out[".".join(pin.split(".")[:2])] = pin
    return out


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` (``3.12``) that runs: pyenv's installed one, else
    ``python3.12`` on PATH (a pyenv shim of a version not selected fails, so each candidate is
    tried)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [
        str(p / "bin" / "python") for p in sorted(root.glob(f"{version}.*"), reverse=True)
    ]
    found = shutil.which(f"python{version}")
    if found:
        candidates.append(found)
    for exe in candidates:
        try:
            done = subprocess.run([exe, "-c", "import sys, venv; print(sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == str(tuple(map(int, version.split(".")))):
            return exe
    return None


def _stamp(entry: Entry) -> str:
    """What the entry's virtualenv was filled from: its name and the project's dependencies
    (pyproject's ``[project]`` table; lint or test settings do not remake it)."""
    import json
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    req = (ROOT / "requirements" / "s3-server.txt").read_text("utf-8")
    pins = json.dumps([entry.name, project, req], sort_keys=True).encode()
    return hashlib.sha256(pins).hexdigest()


def ensure_venv(entry: Entry, python: str) -> Path:
    """The entry's virtualenv, made (or remade when pyproject.toml changed) and filled."""
    venv = VENVS / entry.name
    stamp = venv / ".installed"
    if stamp.exists() and stamp.read_text() == _stamp(entry):
        return venv / "bin" / "python"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    # not byte-compiled: a test process compiles what it imports, once (most of pyspark, pandas
    # and the Connect client's modules are never imported; compiling them was half of pip's CPU)
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, f"pyspark[connect]=={entry.pyspark}", "-e", ".[spark,cli,test]"],
                   check=True, cwd=ROOT)  # fmt: skip
    req = ROOT / "requirements" / "s3-server.txt"
    subprocess.run([*pip, "--require-hashes", "--no-deps", "-r", str(req)], check=True)
    stamp.write_text(_stamp(entry))
    return Path(py)


def prepare(entry: Entry) -> Path | None:
    """The entry's virtualenv, made and filled if needed (None: its Python is missing)."""
    python = find_python(entry.python)
    return None if python is None else ensure_venv(entry, python)


def prepare_all(entries: list[Entry]) -> dict[str, Future[Path | None]]:
    """Fill the entries' virtualenvs one after the other in one background thread (pip's
    downloads and unpacking overlap the tests of the entries before): entry name -> its
    :func:`prepare`."""
    builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compat-venv")
    futures = {e.name: builder.submit(prepare, e) for e in entries}
    builder.shutdown(wait=False)
    return futures


LOGS = ROOT / "build" / "compat"
"""Where an entry's pytest output goes when entries run side by side (``<entry name>.log``)."""


def run_entry(
    entry: Entry, allow_missing: bool, workers: int, full: bool, venv: Future[Path | None],
    log: Path | None = None,
) -> tuple[str, float]:  # fmt: skip
    """Run the entry's :func:`selection` in its virtualenv (``venv``: made by
    :func:`prepare_all`; output to ``log`` if given): ``(outcome, seconds)``, the seconds
    counted from when the virtualenv was ready."""
    py = venv.result()
    start = time.monotonic()
    if py is None:
        return ("skipped: no Python " + entry.python if allow_missing else "no Python"), 0.0
    args, extra = selection(entry, full)
    dist = ["--dist", "loadfile", "--no-loadscope-reorder"]
    code = _pytest(entry, py, [*args, "--durations=10"], extra, workers, dist, log)
    outcome = "passed" if code == 0 else f"failed (pytest exit {code})"
    return outcome, time.monotonic() - start


def _pytest(
    entry: Entry,
    py: Path,
    args: list[str],
    extra: dict[str, str],
    workers: int,
    dist: list[str],
    log: Path | None = None,
) -> int:
    """Run pytest with ``args`` in ``py``'s virtualenv (``extra`` added to the environment;
    more than one worker: that many pytest-xdist workers distributed by ``dist``; output to
    ``log`` if given, else to this process's): its exit status."""
    env = dict(os.environ, PYSPARK_PYTHON=str(py), PYSPARK_DRIVER_PYTHON=str(py), **extra)
    if entry != DEFAULT:  # an entry's few applications would not earn back building an archive
        env[OFF_ENV] = "1"
    cmd = [str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    if workers > 1:
        cmd += ["-n", str(workers), *dist]
    said = " ".join(f"{k}={v}" for k, v in extra.items())
    print(f"== {entry.name}: {said} {' '.join(cmd[1:])}", flush=True)
    if log is None:
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    lines = log.read_text(errors="replace").splitlines()
    shown = lines[-150:] if code.returncode else lines[-16:]  # its durations and summary
    print(f"== {entry.name} ({log}):\n" + "\n".join(shown), flush=True)
    return code.returncode


def run_entries(
    entries: list[Entry], lanes: int, workers: int, allow_missing: bool, full: bool
) -> list[tuple[Entry, str, float]]:
    """Every entry, ``lanes`` of them at a time in :data:`MATRIX` order (its longest
    first): ``(entry, outcome, seconds)`` in that order."""
    venvs = prepare_all(entries)
    logs = {e.name: LOGS / f"{e.name}.log" if lanes > 1 else None for e in entries}
    with ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="compat-lane") as pool:
        runs = {
            e.name: pool.submit(
                run_entry, e, allow_missing, workers, full, venvs[e.name], logs[e.name]
            )
            for e in entries
        }
        return [(e, *runs[e.name].result()) for e in entries]


def reference_entries() -> list[Entry]:
    """One entry per minor, oldest first: :data:`DEFAULT` for its minor, the first
    :data:`MATRIX` entry of each other minor."""
    out = {DEFAULT.minor: DEFAULT}
    for e in MATRIX:
        out.setdefault(e.minor, e)
    return sorted(out.values(), key=lambda e: tuple(map(int, e.minor.split("."))))


def run_reference(mode: str, only: list[str] | None, workers: int) -> int:
    """Make (``write``) or check (``check``) the stored conformance references of every minor
    (``only``: minors such as ``4.1``), each with that minor's PySpark: 1 if any failed."""
    failed = []
    for entry in reference_entries():
        if only and entry.minor not in only:
            continue
        py = Path(sys.executable) if entry == DEFAULT else prepare(entry)
        if py is None:
            failed.append(f"{entry.minor} (no Python {entry.python})")
            continue
        extra = {REFERENCE_MODE_ENV: mode}
        if _pytest(entry, py, [REFERENCE_JOB], extra, workers, ["--dist", "load"]) != 0:
            failed.append(entry.minor)
    said = f"failed on {', '.join(failed)}" if failed else "ok"
    print(f"conformance references ({mode}): {said}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Run the matrix (``--only`` entries by name); exit 1 if any entry failed."""
    parser = argparse.ArgumentParser(prog="python -m devkit.compat_matrix")
    parser.add_argument("--only", nargs="*", help="entry names (default: all)")
    parser.add_argument("--allow-missing", action="store_true")
    parser.add_argument(
        "--lanes", type=int, default=2, help="entries run at once (each its own pytest)"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="pytest-xdist workers of each entry (1: none)"
    )
    parser.add_argument("--full", action="store_true", help="every suite, the whole conformance")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only make and fill the virtualenvs (CI runs it in the background during make test)",
    )
    parser.add_argument(
        "--reference",
        choices=("write", "check"),
        help="make or check the conformance suite's stored references of Spark's handles on "
        "every minor (--only: minors, e.g. 4.1)",
    )
    args = parser.parse_args(argv)
    if args.reference:
        return run_reference(args.reference, args.only, max(args.workers, args.lanes))
    entries = [e for e in MATRIX if not args.only or e.name in args.only]
    if args.prepare:
        ready = {e.name: prepare(e) for e in entries}
        missing = [n for n, py in ready.items() if py is None and not args.allow_missing]
        print(f"compat: {len(ready) - len(missing)} virtualenvs ready, missing: {missing}")
        return 1 if missing else 0
    results = run_entries(entries, args.lanes, args.workers, args.allow_missing, args.full)
    print("\ncompatibility matrix:")
    for entry, outcome, seconds in results:
        print(f"  {entry.name:<24} {outcome} ({seconds:.0f} s)")
    failed = [e.name for e, outcome, _ in results if outcome.startswith(("failed", "no Python"))]
    print(f"compat: {len(results) - len(failed)} passed, {len(failed)} failed")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


MINOR_NOTES = {
    "4.0": 'no Row `transformWithState` in Spark 4.0; `format("fsstate")` reads without filter '
    "pushdown (Python data sources take filters from 4.1); 4.0's tasks do not carry the state "
    "store's partition count, so `tiered()` does not check it against its state there; "
    "rescaling a `tiered()` query needs 4.2+ (Spark's offline repartition of a checkpoint)",
    "4.1": "rescaling a `tiered()` query needs 4.2+ (Spark's offline repartition of a checkpoint)",
}
"""What a minor lacks, said in the support table."""


def untested_minors() -> tuple[list[str], list[str]]:
    """(supported minors no entry tests, entries' minors that are not supported): both empty
    when the matrix tests exactly :data:`fsstate_spark.pyspark.SUPPORTED_MINORS`."""
    from fsstate_spark.pyspark import SUPPORTED_MINORS

    supported = [f"{a}.{b}" for a, b in SUPPORTED_MINORS]
    tested = {e.minor for e in (DEFAULT, *MATRIX)}
    return [m for m in supported if m not in tested], sorted(tested - set(supported))


def support_table() -> str:
    """The docs' support table (Markdown): per supported PySpark minor, the tested release,
    the tested Pythons, which loop ``tiered()`` runs on and what the minor lacks."""
    from fsstate_spark.pyspark import SUPPORTED_MINORS
    from fsstate_spark.pyspark.worker import ADAPTERS, STOCK_ONLY

    entries = [DEFAULT, *MATRIX]
    minors = [f"{a}.{b}" for a, b in SUPPORTED_MINORS]
    lines = [
        "| PySpark | tested release | Python (tested) | `tiered()` pandas / Row | "
        '`tiered()` loop with the worker module | flow driver and `format("fsstate")` | notes |',
        "|---|---|---|---|---|---|---|",
    ]
    for minor in minors:
        mine = [e for e in entries if e.minor == minor]
        releases = sorted({e.pyspark for e in mine})
        pythons = sorted({e.python for e in mine}, key=lambda p: tuple(map(int, p.split("."))))
        key = tuple(map(int, minor.split(".")))
        loop = "fsstate's keyed loop" if key in ADAPTERS else "PySpark's own loop"
        if key in STOCK_ONLY:
            loop += " (see notes)"
        row = "yes / yes" if key >= (4, 1) else "yes / —"
        note = MINOR_NOTES.get(minor, "")
        if key in STOCK_ONLY:
            note = (note + "; " if note else "") + STOCK_ONLY[key]
        lines.append(
            f"| {minor} | {', '.join(releases)} | {', '.join(pythons)} | {row} | {loop} | yes "
            f"| {note} |"
        )
    return "\n".join(lines)
