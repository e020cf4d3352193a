"""kill -9 a tiered() streaming application at random points, restart it, same final output
(``make crash-test``; not part of ``make test``).

What it checks: a Spark application whose state lives in fsstate through ``tiered()``
(:mod:`devkit.crash_job`: a running count, sum, last values and per-bucket counts per key,
written to a Parquet file sink) survives being killed with SIGKILL (the Python driver, the
JVM and the Python workers, all at once) at ``--kills`` random points and restarted from its
checkpoint each time: once it has run every micro-batch,

* the rows in its sink (the files the sink's ``_spark_metadata`` log commits, which is all a
  reader of the sink sees) equal those of an uninterrupted run over the same input, and both
  equal the aggregate computed in plain Python (:func:`devkit.crash_job.expected_rows`);
* its state read back with the ``fsstate`` command line (``fsstate show``) equals the
  uninterrupted run's and the model's (:func:`devkit.crash_job.expected_state`), and
  ``fsstate verify`` passes;
* Spark's offsets, commits and sink logs and every partition's fsstate state end at the last
  micro-batch;
* no start of the application failed, nor logged an error or a traceback before it was killed
  (a restart failing with a typed fsstate error is a failure, reported with its log's tail).

Kill points: each cycle starts the application and, by a seeded draw, kills it

* ``start-up``: at a uniform random time within the measured start-up (JVM and session start,
  the first micro-batch);
* ``mid-batch``: at a uniform random time within a measured micro-batch, once the k-th
  micro-batch of this start is planned (k small, drawn so the query does not run out of input
  before the last kill);
* ``commit``: within a fraction of a micro-batch after the first partition published that
  micro-batch's fsstate version (the window of the state commits, the sink's commit and
  Spark's commit log).

Where each kill landed is read back from disk (Spark's offsets and commits logs, the sink's
log, each partition's newest fsstate version) and tallied in the report. The whole set of
processes of a start (its session, plus any process carrying the run's marker in its
environment: PySpark's daemon moves itself and its workers into a process group of their own)
is killed at once, and the next start waits until none of them is left.

Usage::

    python -m devkit.crash_test [--kills 50] [--seed N] [--batches 150]
        [--rows-per-batch 100] [--keys 50] [--workdir build/crash-test]

Prints ``crash-test: 50 kills, 50 restarts, final output equal (seed 1234)`` and exits 0, or
exits 1 naming the seed and what differed or failed. A seed fixes the input and the kill plan;
where a kill lands also depends on timing, so a run is replayed only approximately.
Everything is kept under ``--workdir`` (recreated on every run): ``input/``, ``reference/``
(the uninterrupted run) and ``killed/`` (checkpoint, state, sink, and one log per start under
``logs/``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from devkit.crash_job import OPERATOR, Row, expected_rows, expected_state
from devkit.jobs import JobDirs
from devkit.repo import ROOT
from devkit.spark_local import read_conf, write_batches

MARKER_ENV = "FSSTATE_CRASH_TEST_RUN"  # in the environment of every process of a run
PARTITIONS = int(read_conf()["spark.sql.shuffle.partitions"])
MODES = ("start-up", "mid-batch", "commit")
MODE_WEIGHTS = (2, 5, 3)
POLL_S = 0.01
WAIT_TIMEOUT_S = 300.0  # for a start to reach its kill point (or a run to end by itself)
KILL_TIMEOUT_S = 30.0  # for every process of a start to be gone after SIGKILL
ERROR_LINE = re.compile(r"Traceback \(most recent call last\)|\bERROR\b|Exception\b")
SPARK_LOG_NAME = re.compile(r"(\d+)(\.compact)?")


class CrashTestError(Exception):
    """A failure the crash test reports (exit code 1): a mismatch, a failed start."""


@dataclass(frozen=True)
class View:
    """What a run's directories hold: the newest batch id of Spark's offsets and commits logs
    and of the sink's log (-1: none), each partition's newest fsstate version."""

    offsets: int
    commits: int
    sink: int
    state: tuple[int, ...]

    def landed(self, before: View, session_up: bool) -> str:
        """Where a kill that left this view (after ``before``) landed."""
        if not session_up:
            return "start-up (session not up)"
        if self == before:
            return "query start (nothing written yet)"
        batch = self.offsets
        if self.commits >= batch:
            return "between batches"
        if self.sink >= batch:
            return "sink committed, commit log not"
        committed = sum(1 for v in self.state if v >= batch)
        if committed == PARTITIONS:
            return "state committed, sink not"
        if committed:
            return "state committed by some partitions"
        return "batch running, no state committed"


def newest_id(directory: Path) -> int:
    """The largest batch id among a Spark log directory's entries (-1 when none)."""
    ids = [-1]
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            match = SPARK_LOG_NAME.fullmatch(name)
            if match:
                ids.append(int(match.group(1)))
    return max(ids)


@dataclass(frozen=True)
class Run(JobDirs):
    """The directories and the command of one logical run of the application (its sink: a
    Parquet file sink)."""

    marker: str

    def log(self, start: int) -> Path:
        """The output of the ``start``-th start."""
        return self.root / "logs" / f"start-{start:03d}.log"

    def env(self, worker_python: str | None = None) -> dict[str, str]:
        """The application's environment (:meth:`devkit.jobs.JobDirs.env`) with the run's
        marker."""
        return {**super().env(worker_python), MARKER_ENV: self.marker}

    def start(self, start: int) -> subprocess.Popen[bytes]:
        """Start the application in a session of its own."""
        command = [sys.executable, "-m", "devkit.crash_job", "--input", str(self.input)]
        command += ["--checkpoint", str(self.checkpoint), "--state-uri", str(self.state)]
        command += ["--sink", str(self.sink)]
        return self.launch(command, self.log(start), self.env())

    def clear_scratch(self) -> None:
        """Delete what killed processes left in the scratch directories (Spark's block
        manager directories, extracted native libraries: about 20 MB a start)."""
        for scratch in (self.root / "spark-local", self.scratch):
            shutil.rmtree(scratch, ignore_errors=True)

    def view(self) -> View:
        """What the run's directories hold now."""
        state = [-1] * PARTITIONS
        queries = self.state.iterdir() if self.state.exists() else iter(())
        for query in queries:  # one query id (and fsstate's probe files)
            if query.name.startswith(".") or not query.is_dir():
                continue
            for p in range(PARTITIONS):
                manifests = query / OPERATOR / str(p) / "manifests"
                state[p] = max(state[p], newest_manifest(manifests))
        return View(
            offsets=newest_id(self.checkpoint / "offsets"),
            commits=newest_id(self.checkpoint / "commits"),
            sink=newest_id(self.sink / "_spark_metadata"),
            state=tuple(state),
        )


def newest_manifest(directory: Path) -> int:
    """The newest version published in a store's manifest directory (-1 when none)."""
    versions = [-1]
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for name in os.listdir(directory):
            stem, dot, ext = name.partition(".")
            if dot and ext == "json" and stem.isdigit():
                versions.append(int(stem))
    return max(versions)


# -- the processes of a start ---------------------------------------------------------------------


def run_pids(session: int, marker: str) -> list[int]:
    """Live (non-zombie) processes of session ``session`` or with ``marker`` in their
    environment (whatever their session or process group)."""
    tag = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
            if fields[0] in ("Z", "X"):
                continue
            if int(fields[3]) == session or tag in Path(entry.path, "environ").read_bytes().split(
                b"\0"
            ):
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # gone, or not ours to read
    return found


def kill_run(proc: subprocess.Popen[bytes], marker: str) -> int:
    """SIGKILL every process of a start at once and wait until none is left.

    Returns:
        How many processes were killed.

    Raises:
        CrashTestError: a process still runs :data:`KILL_TIMEOUT_S` after SIGKILL.
    """
    pids = run_pids(proc.pid, marker)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the JVM, atomically
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    killed = set(pids)
    deadline = time.monotonic() + KILL_TIMEOUT_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_TIMEOUT_S)
    while left := run_pids(proc.pid, marker):
        if time.monotonic() > deadline:
            raise CrashTestError(f"processes survived SIGKILL: {sorted(left)}")
        killed.update(left)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return len(killed)


def log_tail(log: Path, lines: int = 60) -> str:
    """The end of a start's log, for a failure report."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def log_errors(log: Path) -> list[str]:
    """The lines of a start's log that report an error (none in a healthy run)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if ERROR_LINE.search(line)]


def session_up(log: Path) -> bool:
    """Whether the start's SparkSession is up (the application printed so)."""
    with contextlib.suppress(FileNotFoundError):
        return "session started" in log.read_text(errors="replace")
    return False


@dataclass(frozen=True)
class Timing:
    """Measured on the uninterrupted run: seconds to its first committed micro-batch (JVM,
    session, query start and batch 0) and per micro-batch after that."""

    startup_s: float
    batch_s: float


def finish(run: Run, start: int, timeout: float) -> tuple[float, Timing]:
    """Start the application and let it end by itself.

    Returns:
        The seconds it took, and its timing: from the start to its first micro-batch in Spark's
        commit log, and per micro-batch after that (watched as it runs: Spark's logs keep only
        the newest 100 entries).

    Raises:
        CrashTestError: it failed, logged an error or did not end within ``timeout``.
    """
    began = time.monotonic()
    seen = [newest_id(run.checkpoint / "commits")]
    times: list[float] = []
    proc = run.start(start)
    try:
        while (rc := proc.poll()) is None and time.monotonic() < began + timeout:
            newest = newest_id(run.checkpoint / "commits")
            if newest > seen[-1]:
                seen.append(newest)
                times.append(time.monotonic())
            time.sleep(0.05)
    finally:
        kill_run(proc, run.marker)
    log = run.log(start)
    if rc != 0 or log_errors(log):
        what = "timed out" if rc is None else f"ended with exit code {rc}"
        raise CrashTestError(f"start {start} {what}; {log}:\n{log_tail(log)}")
    first, last = (times[0], times[-1]) if times else (began, began)
    per_batch = (last - first) / max(1, seen[-1] - seen[1]) if len(seen) > 2 else 0.0
    return time.monotonic() - began, Timing(first - began, per_batch)


# -- kill plans --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Where to kill a start: ``mode`` (:data:`MODES`), the micro-batch ``target`` whose
    planning (``mid-batch``) or first state commit (``commit``) starts the clock, and the delay
    after that (after the start for ``start-up``)."""

    mode: str
    target: int
    delay: float

    def describe(self) -> str:
        """One line for the report."""
        if self.mode == "start-up":
            return f"start-up +{self.delay:.2f}s"
        return f"{self.mode} of batch {self.target} +{self.delay:.2f}s"


def plan_kill(rng: random.Random, before: View, kills_left: int, batches: int, t: Timing) -> Plan:
    """Draw the next kill point: a mode, then the k-th micro-batch of the start (k about the
    micro-batches left per kill left on average, so the kills spread over the whole query and
    every kill finds input) and a delay."""
    mode = rng.choices(MODES, MODE_WEIGHTS)[0]
    share = (batches - 3 - before.commits) // max(1, kills_left)  # batches left per kill left
    k = rng.randint(1, min(6, 2 * share)) if share > 0 else 1
    target = before.commits + k
    if mode == "start-up":
        return Plan(mode, target, rng.uniform(0.0, t.startup_s))
    if mode == "mid-batch":
        return Plan(mode, target, rng.uniform(0.0, t.batch_s))
    return Plan(mode, target, rng.uniform(0.0, t.batch_s / 4))


def reached(run: Run, plan: Plan) -> bool:
    """Whether a start whose session is up got to the point ``plan``'s delay counts from."""
    view = run.view()
    if plan.mode == "mid-batch":
        return view.offsets >= plan.target and view.commits >= plan.target - 1
    return any(v >= plan.target for v in view.state)


def kill_at(run: Run, start: int, plan: Plan) -> tuple[bool, int, float]:
    """Start the application and kill it at ``plan``'s point.

    Returns:
        Whether it was killed (False: it ended by itself first), how many processes were
        killed, and the seconds from the start to the kill.
    """
    began = time.monotonic()
    proc = run.start(start)
    try:
        deadline = began + WAIT_TIMEOUT_S
        up = plan.mode == "start-up"  # its delay counts from the start
        while not (up and (plan.mode == "start-up" or reached(run, plan))):
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise CrashTestError(f"start {start} never reached {plan.describe()}")
            up = up or session_up(run.log(start))
            time.sleep(POLL_S)
        else:
            time.sleep(plan.delay)
        alive = proc.poll() is None
    finally:
        processes = kill_run(proc, run.marker)
    return alive, processes, time.monotonic() - began


# -- what a run left ---------------------------------------------------------------------------


def sink_files(sink: Path) -> list[str]:
    """The files the sink's ``_spark_metadata`` log commits (all Spark's readers of the sink
    see; files of killed attempts are not in the log), sorted."""
    added: set[str] = set()
    deleted: set[str] = set()
    log = sink / "_spark_metadata"
    for entry in sorted(log.iterdir()) if log.exists() else []:
        if not SPARK_LOG_NAME.fullmatch(entry.name):
            continue  # a temporary file of an unfinished write
        lines = entry.read_text().splitlines()
        if not lines or lines[0] != "v1":
            raise CrashTestError(f"{entry}: not a version 1 file sink log entry")
        for line in lines[1:]:
            doc = json.loads(line)
            (added if doc["action"] == "add" else deleted).add(unquote(urlparse(doc["path"]).path))
    return sorted(added - deleted)


def sink_rows(sink: Path) -> list[Row]:
    """The rows of the files the sink's log commits, sorted."""
    import pyarrow.parquet as pq

    rows: list[Row] = []
    for path in sink_files(sink):
        rows.extend(tuple(r.values()) for r in pq.read_table(path).to_pylist())
    return sorted(rows)


def fsstate_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the ``fsstate`` command line (``python -m fsstate --json ...``)."""
    return subprocess.run(
        [sys.executable, "-m", "fsstate", "--json", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def stored_state(state: Path) -> dict[str, list[Any]]:
    """The newest state of the run's operator read with ``fsstate show``, shaped as
    :func:`devkit.crash_job.expected_state`; ``fsstate verify`` must pass.

    Raises:
        CrashTestError: a command failed (its output is in the message).
    """
    verify = fsstate_cli("verify", str(state))
    if verify.returncode != 0:
        raise CrashTestError(f"fsstate verify {state}: exit {verify.returncode}\n{verify.stdout}")
    tables = {}
    for name in ("stats", "recent", "buckets"):
        out = fsstate_cli("show", str(state), OPERATOR, name, "-n", "-1")
        if out.returncode != 0:
            raise CrashTestError(f"fsstate show {state} {name}: {out.stderr.strip()}")
        tables[name] = json.loads(out.stdout)["shown"]
    recent: dict[str, list[int]] = {}
    for r in tables["recent"]:  # a key's elements in list order
        recent.setdefault(r["k"], []).append(r["v"])
    return {
        "stats": sorted((r["k"], r["count"], r["total"]) for r in tables["stats"]),
        "recent": sorted(recent.items()),
        "buckets": sorted((r["k"], r["bucket"], r["n"]) for r in tables["buckets"]),
    }


def differences(name: str, got: Sequence[Any], want: Sequence[Any], shown: int = 5) -> list[str]:
    """What differs between two sorted lists of rows (as multisets), or nothing."""
    if list(got) == list(want):
        return []
    missing = Counter(map(repr, want)) - Counter(map(repr, got))
    extra = Counter(map(repr, got)) - Counter(map(repr, want))
    return [
        f"{name}: {len(got)} rows, expected {len(want)}; {sum(missing.values())} missing "
        f"{sorted(missing)[:shown]}, {sum(extra.values())} extra {sorted(extra)[:shown]}"
    ]


def compare(killed: Run, reference: Run, batches: list[list[dict[str, Any]]]) -> list[str]:
    """Every way the killed run's results differ from the reference's and the model's."""
    want_rows = expected_rows(batches)
    want_state = expected_state(batches)
    ref_rows, ref_state = sink_rows(reference.sink), stored_state(reference.state)
    rows, state = sink_rows(killed.sink), stored_state(killed.state)
    problems = differences("reference sink vs model", ref_rows, want_rows)
    problems += differences("killed sink vs reference sink", rows, ref_rows)
    for table in want_state:
        problems += differences(
            f"reference state {table} vs model", ref_state[table], want_state[table]
        )
        problems += differences(
            f"killed state {table} vs reference", state[table], ref_state[table]
        )
    view = killed.view()
    newest = len(batches) - 1
    if (view.offsets, view.commits, view.sink) != (newest, newest, newest):
        problems.append(f"Spark's logs end at {view}, expected batch {newest}")
    if view.state != (newest,) * PARTITIONS:
        problems.append(f"fsstate's newest versions are {view.state}, expected {newest}")
    return problems


# -- the test ----------------------------------------------------------------------------------


def make_batches(seed: int, batches: int, rows: int, keys: int) -> list[list[dict[str, Any]]]:
    """Seeded input: ``batches`` files of ``rows`` rows ``{"b", "k", "v"}`` over ``keys`` keys."""
    rng = random.Random(seed)
    return [
        [
            {"b": b, "k": f"k{rng.randrange(keys):03d}", "v": rng.randrange(1000)}
            for _ in range(rows)
        ]
        for b in range(batches)
    ]


@dataclass
class Outcome:
    """What the kill cycles did."""

    kills: int = 0
    restarts: int = 0
    processes: int = 0  # killed, over all kills
    landed: Counter[str] = field(default_factory=Counter)  # where the kills landed


def kill_cycles(run: Run, args: argparse.Namespace, rng: random.Random, t: Timing) -> Outcome:
    """Start the application and kill it ``args.kills`` times, then let it finish.

    Raises:
        CrashTestError: a start failed or logged an error, or the input ran out first.
    """
    out = Outcome()
    for n in range(args.kills):
        before = run.view()
        if before.commits >= args.batches - 1:
            raise CrashTestError(
                f"every micro-batch ran after {n} kills: raise --batches (now {args.batches})"
            )
        plan = plan_kill(rng, before, args.kills - n, args.batches, t)
        killed, processes, seconds = kill_at(run, n, plan)
        log = run.log(n)
        if not killed or log_errors(log):
            what = "ended by itself" if not killed else "logged an error"
            raise CrashTestError(
                f"start {n} ({plan.describe()}, batches committed before it: "
                f"0..{before.commits}) {what}; {log}:\n{log_tail(log)}"
            )
        run.clear_scratch()  # no process of the start is left
        after = run.view()
        where = after.landed(before, session_up(log))
        out.landed[where] += 1
        out.kills += 1
        out.processes += processes
        print(
            f"kill {n + 1}/{args.kills}: {plan.describe()}, after {seconds:.1f}s, "
            f"{processes} processes; landed: {where} (offsets log at {after.offsets}, "
            f"commits at {after.commits}, fsstate at {list(after.state)})",
            flush=True,
        )
    out.restarts = args.kills
    seconds, _ = finish(run, args.kills, timeout=WAIT_TIMEOUT_S + args.batches * 10 * t.batch_s)
    print(f"final start: ran to the end in {seconds:.1f}s", flush=True)
    return out


def crash_test(args: argparse.Namespace, seed: int) -> Outcome:
    """The whole test: input, the uninterrupted run, the killed runs, the comparison.

    Raises:
        CrashTestError: what failed or differed.
    """
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    batches = make_batches(seed, args.batches, args.rows_per_batch, args.keys)
    write_batches(work / "input", batches)
    marker = f"{work}:{os.getpid()}"
    reference = Run(work / "reference", work / "input", marker)
    killed = Run(work / "killed", work / "input", marker)

    seconds, timing = finish(reference, 0, timeout=WAIT_TIMEOUT_S + args.batches * 5)
    print(
        f"uninterrupted run: {args.batches} micro-batches in {seconds:.1f}s (start-up and "
        f"batch 0 {timing.startup_s:.1f}s, then {timing.batch_s:.2f}s a micro-batch)",
        flush=True,
    )
    outcome = kill_cycles(killed, args, random.Random(seed), timing)
    problems = compare(killed, reference, batches)
    if problems:
        raise CrashTestError("final output differs:\n  " + "\n  ".join(problems))
    if left := run_pids(-1, marker):
        raise CrashTestError(f"processes of the runs still alive: {left}")
    committed = len(sink_files(killed.sink))
    stray = len(list(killed.sink.glob("*.parquet"))) - committed
    print(
        f"final output equal: {len(batches)} micro-batches, sink files {committed} committed "
        f"(and {stray} of killed attempts, not in the sink's log), state equal",
        flush=True,
    )
    return outcome


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="kill -9's (default 50)")
    parser.add_argument("--seed", type=int, default=None, help="default: drawn and printed")
    parser.add_argument("--batches", type=int, default=150, help="input files = micro-batches")
    parser.add_argument("--rows-per-batch", type=int, default=100)
    parser.add_argument("--keys", type=int, default=50, help="distinct keys in the input")
    parser.add_argument(
        "--workdir", default=str(ROOT / "build" / "crash-test"), help="recreated on every run"
    )
    args = parser.parse_args(argv)
    if args.kills < 0 or args.batches < 2 or args.rows_per_batch < 1 or args.keys < 1:
        parser.error("--kills >= 0, --batches >= 2, --rows-per-batch and --keys >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the crash test; 0 when the final output is equal, 1 otherwise."""
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    began = time.monotonic()
    print(
        f"crash-test: seed {seed}, {args.kills} kills over {args.batches} micro-batches of "
        f"{args.rows_per_batch} rows ({args.keys} keys), workdir {args.workdir}",
        flush=True,
    )
    try:
        outcome = crash_test(args, seed)
    except CrashTestError as e:
        print(f"crash-test: FAILED (seed {seed}): {e}", flush=True)
        return 1
    minutes = (time.monotonic() - began) / 60
    landed = ", ".join(f"{where}: {n}" for where, n in outcome.landed.most_common())
    print(f"kills landed: {landed}; {outcome.processes} processes killed in all")
    print(
        f"crash-test: {outcome.kills} kills, {outcome.restarts} restarts, final output equal "
        f"(seed {seed}, {minutes:.1f} min)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
