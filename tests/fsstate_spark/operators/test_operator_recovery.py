"""kill -9 of a whole-batch operator job mid-batch, restart, same sink as an uninterrupted run.

``tests/support/operator_job.py`` (a ``dedup`` stage, then a tumbling ``windows`` aggregation in
append mode, :mod:`fsstate_spark.operators`) is run as a real application (``python`` with its
own JVM and Python workers) over seeded micro-batches with out-of-order event times (windows
close at various batches, some rows arrive late) and duplicates:

1. an uninterrupted run gives the reference sink;
2. side by side, two runs are SIGKILLed (every process of the job's session: Python driver,
   JVM, Python workers) in micro-batches chosen by the seed, while that batch has no sink
   file, is not in Spark's commit log, and its fsstate versions are committed by

   * ``some``: some but not all partitions of the first stage (``dedup``), none of the second;
   * ``between``: every partition of ``dedup``, no partition of ``windows``;
   * ``all``: every partition of both stages (the job sleeps in the sink before writing).

   Each point is used once, in a seeded order: run ``twice`` is killed at one, started again
   and killed in that restart at another (in the same batch, re-run after the first kill, if
   its state can still get there, or a later one); run ``once`` at the third. Each is then
   started again with the same command on the same checkpoint and state directories and runs
   to its end.

The kill points are found by polling the state directory (the manifest of a version at
``<state>/<stage>/<partition>/manifests/<version:020d>.json`` is its commit) and the sink; the
job's ``--slow-ms`` holds each point for that long. The sink of every killed run must equal the
reference exactly, and every kill must have landed where intended (checked on Spark's
checkpoint and the state after the kill; a kill that lands past its point because the poller
was late is reported and tried again at a later batch). Failures name the seed
(``FSSTATE_RECOVERY_SEED`` overrides it) and the kill points. A subprocess never outlives its
timeout: on any failure every process of its session is killed.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devkit.jobs import JobDirs
from fsstate import PartitionStore
from fsstate.store.identity import store_dir_for
from tests.support import operator_job
from tests.support.jobs import (
    finish,
    kill_group,
    kill_now,
    sink_batches,
    spark_log,
    write_inputs,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(480)]

JOB = "tests.support.operator_job"  # run as a module from the repository root
SEED = int(os.environ.get("FSSTATE_RECOVERY_SEED", "20261123"))
N_BATCHES = 8
SLOW_MS = 500  # the length of each kill window (see the job's --slow-ms)
RUN_TIMEOUT_S = 240.0
POLL_S = 0.05
MISSES_MAX = 2  # kills that land past their point before the test gives up
STAGES = operator_job.STAGES
PARTITIONS = operator_job.PARTITIONS
PHASES = ("some", "between", "all")
KEYS = ["a", "b", "c", "d"]


def make_batches(seed: int) -> list[list[dict[str, Any]]]:
    """Seeded micro-batches: event times around ``1000 + 6 * batch`` s, up to 12 s early.

    With a 5 s watermark delay a row up to 12 s early is often late; with 10 s windows a
    window closes every one or two batches. Values are few (duplicates of ``(k, v)`` within
    the delay are common) and some rows repeat an earlier row exactly or at another time.
    """
    rng = random.Random(seed)
    out: list[list[dict[str, Any]]] = []
    earlier: list[dict[str, Any]] = []
    for b in range(N_BATCHES):
        rows = []
        for _ in range(rng.randint(6, 14)):
            if earlier and rng.random() < 0.25:
                row = dict(rng.choice(earlier[-20:]))
                if rng.random() < 0.5:
                    row["t"] += rng.randint(-3, 3)
            else:
                t = 1000 + 6 * b + rng.randint(-12, 4)
                row = {"k": rng.choice(KEYS), "t": t, "v": rng.randint(0, 5)}
            rows.append(row)
            earlier.append(row)
        out.append(rows)
    return out


@dataclass(frozen=True)
class Run(JobDirs):
    """Directories and command of one logical run of the job (shared by its restarts)."""

    processor: bool = False  # the job's second stage: a StatefulProcessor (--processor)

    @property
    def log(self) -> Path:
        """Output of every start of this run."""
        return self.root / "job.log"

    def command(self, slow_ms: int) -> list[str]:
        """The job's command line."""
        return [
            sys.executable,
            "-m",
            JOB,
            "--input",
            str(self.input),
            "--checkpoint",
            str(self.checkpoint),
            "--state-uri",
            str(self.state),
            "--sink",
            str(self.sink),
            "--slow-ms",
            str(slow_ms),
            *(["--processor"] if self.processor else []),
        ]

    def start(self, slow_ms: int, header: str) -> subprocess.Popen[bytes]:
        """Start the job in its own session (so all its processes can be killed); the workers
        run the suite's launcher of this interpreter (pyspark compiled)."""
        env = self.env(os.environ.get("PYSPARK_PYTHON"))
        return self.launch(self.command(slow_ms), self.log, env, header)

    def committed(self, stage: str, batch: int) -> list[int]:
        """Partitions of ``stage`` whose manifest of version ``batch`` is published."""
        name = f"{batch:020d}.json"
        return [
            p
            for p in range(PARTITIONS)
            if (self.state / store_dir_for(stage, p) / "manifests" / name).exists()
        ]

    def phase(self, batch: int) -> str:
        """Which kill point of :data:`PHASES` the fsstate state of ``batch`` is at."""
        first, second = (len(self.committed(s, batch)) for s in STAGES)
        if second == 0 and 0 < first < PARTITIONS:
            return "some"
        if second == 0 and first == PARTITIONS:
            return "between"
        if first == second == PARTITIONS:
            return "all"
        return "none" if first == second == 0 else f"other({first}, {second})"

    def written(self, batch: int) -> bool:
        """Whether the sink has ``batch``'s file."""
        return (self.sink / f"batch-{batch:05d}.json").exists()

    def view(self) -> dict[str, Any]:
        """What the sink, Spark's checkpoint and fsstate hold (after a kill)."""
        return {
            "sink": sorted(sink_batches(self.sink)),
            "offsets": spark_log(self.checkpoint, "offsets"),
            "commits": spark_log(self.checkpoint, "commits"),
            "fsstate": {
                s: [
                    PartitionStore.committed_versions(str(self.state), s, p)
                    for p in range(PARTITIONS)
                ]
                for s in STAGES
            },
        }


@dataclass
class Kill:
    """One planned kill (phase, first batch to try) and where it landed."""

    phase: str
    target: int
    batch: int | None = None  # the batch interrupted (a later one if the target was missed)
    landed: str | None = None  # the phase of that batch's state after the kill
    view: dict[str, Any] = field(default_factory=dict)
    # kills that landed past the point (the job moved on between the poll and the kill):
    # (batch, phase after the kill, seconds since the poll before the one that saw the phase:
    # more than the window's SLOW_MS means a starved poller); the job was started again for the
    # next batch
    missed: list[tuple[int, str, float]] = field(default_factory=list)


def kill_at(run: Run, kill: Kill, header: str) -> None:
    """Start the job and SIGKILL all its processes inside a batch at ``kill.phase``.

    Waits for batch ``kill.target`` to have no sink file and its state at the phase, kills,
    and records where the kill landed in ``kill``. If the job went past the batch's kill window
    before the poller saw it (a starved poller), the next batch is taken; if the kill landed
    past the point, the job is started again (:data:`MISSES_MAX` times) for the next batch.
    """
    batch = kill.target
    while True:
        proc = run.start(SLOW_MS, header if not kill.missed else f"{header} (again)")
        deadline = time.monotonic() + RUN_TIMEOUT_S
        polled, gap_s = time.monotonic(), 0.0
        try:
            while True:
                now = time.monotonic()
                polled, gap_s = now, now - polled
                if proc.poll() is not None:
                    raise AssertionError(f"job ended (rc {proc.returncode}) before it was killed")
                if time.monotonic() > deadline:
                    raise AssertionError(f"batch {batch} never reached {kill.phase!r}")
                if run.written(batch):  # missed: take the next batch
                    batch += 1
                    if batch >= N_BATCHES:
                        raise AssertionError(f"no batch from {kill.target} on was seen in time")
                    continue
                if run.phase(batch) == kill.phase:
                    kill_now(proc)
                    break
                time.sleep(POLL_S)
        finally:
            kill_group(proc)
        landed = run.phase(batch)
        if landed == kill.phase and not run.written(batch):
            kill.batch, kill.landed, kill.view = batch, landed, run.view()
            return
        kill.missed.append((batch, landed, round(gap_s, 2)))
        batch += 1
        if len(kill.missed) > MISSES_MAX or batch >= N_BATCHES:
            raise AssertionError(f"kills landed past {kill.phase!r}: {kill.missed}")


def drive(run: Run, kills: list[Kill]) -> int:
    """Kill the job at each planned point in turn (each start resumes the previous one), then
    start it once more and let it finish; the seconds it took."""
    began = time.monotonic()
    for i, kill in enumerate(kills):
        kill_at(run, kill, "start" if i == 0 else f"restart {i}, to be killed")
    finish(run.start(SLOW_MS, f"restart {len(kills)}, to the end"), run.log, RUN_TIMEOUT_S)
    return round(time.monotonic() - began)


def plans(seed: int) -> dict[str, list[Kill]]:
    """The killed runs and their seeded kills: the three points of :data:`PHASES` in a seeded
    order, two for the run ``twice`` (early batches: its three starts are the test's longest
    path) and one for the run ``once``."""
    rng = random.Random(seed + 1)
    order = rng.sample(PHASES, len(PHASES))
    first = rng.randint(0, 2)
    return {
        "twice": [Kill(order[0], first), Kill(order[1], rng.randint(first, first + 2))],
        "once": [Kill(order[2], rng.randint(1, N_BATCHES - 2))],
    }


def check_reference(ref: Run, batches: list[list[dict[str, Any]]]) -> dict[int, list[list[Any]]]:
    """The reference sink, checked to be complete and to make the kills telling: windows are
    output at several batches, and deduplication or lateness dropped rows from some."""
    got = sink_batches(ref.sink)
    assert sorted(got) == list(range(N_BATCHES)), sorted(got)
    emitting = [b for b, rows in got.items() if rows]
    assert len(emitting) >= 3, got
    size_s = operator_job.WINDOW_MS // 1000
    raw = Counter((r["k"], r["t"] - r["t"] % size_s) for rows in batches for r in rows)
    counts = {(k, start): n for rows in got.values() for k, start, _end, n, _sum in rows}
    assert all(n <= raw[w] for w, n in counts.items()), (counts, raw)
    assert any(n < raw[w] for w, n in counts.items()), (counts, raw)
    return got


def kills_context(kills: dict[str, list[Kill]], tmp_path: Path) -> str:
    """The seed, the kills (planned and landed) and where the logs are: for failure messages."""
    points = {
        name: [(k.phase, k.target, k.batch, k.landed, k.missed) for k in ks]
        for name, ks in kills.items()
    }
    return (
        f"seed {SEED} (FSSTATE_RECOVERY_SEED); kills (phase, target, batch, landed, missed): "
        f"{points}; logs under {tmp_path}"
    )


def run_side_by_side(
    ref: Run,
    runs: dict[str, Run],
    kills: dict[str, list[Kill]],
    began: float,
    context: Callable[[], str],
) -> tuple[int, dict[str, int]]:
    """The reference run and the runs to kill (:func:`drive`), side by side; the seconds the
    reference took (since ``began``) and each killed run's."""
    ref_proc = ref.start(0, "reference")
    try:
        with ThreadPoolExecutor(len(runs)) as pool:
            pending: dict[str, Future[int]] = {
                name: pool.submit(drive, runs[name], kills[name]) for name in runs
            }
            finish(ref_proc, ref.log, RUN_TIMEOUT_S)
            reference_s = round(time.monotonic() - began)
            took = {}
            for name, fut in pending.items():
                try:
                    took[name] = fut.result()
                except Exception as exc:
                    raise AssertionError(f"run {name!r}: {exc}\n{context()}") from exc
    finally:
        kill_group(ref_proc)
    return reference_s, took


def check_killed_run(
    name: str,
    run: Run,
    kills: list[Kill],
    reference: dict[int, list[list[Any]]],
    context: Callable[[], str],
) -> None:
    """Each of the run's kills landed at its point; its sink equals the reference, Spark
    committed every batch and every stage's partitions have the last batch's version."""
    for kill in kills:
        # the kill landed at its point: the batch is planned, not committed by Spark, has
        # no output yet (all earlier batches have), and its state is as the phase says
        where = f"run {name!r}, {kill}: {context()}"
        assert kill.batch is not None and kill.landed == kill.phase, where
        assert kill.batch in kill.view["offsets"], where
        assert kill.batch not in kill.view["commits"], where
        assert kill.view["sink"] == list(range(kill.batch)), where
    got = sink_batches(run.sink)
    diff = {
        b: {"got": got.get(b), "reference": reference.get(b)}
        for b in sorted(set(got) | set(reference))
        if got.get(b) != reference.get(b)
    }
    assert not diff, f"run {name!r}: batches that differ from the reference {diff}; {context()}"
    commits = spark_log(run.checkpoint, "commits")
    assert commits == list(range(N_BATCHES)), f"run {name!r}: commits {commits}; {context()}"
    for stage in STAGES:
        for p in range(PARTITIONS):
            versions = PartitionStore.committed_versions(str(run.state), stage, p)
            assert versions[-1] == N_BATCHES - 1, (
                f"run {name!r}: {stage}/{p} has versions {versions}; {context()}"
            )


@pytest.mark.parametrize("second", ["window_aggregate", "transform_with_state"])
def test_kill_and_restart_operator_job_match_uninterrupted_run(tmp_path: Path, second: str) -> None:
    """SIGKILL mid-batch at seeded batches and kill points, restart: the sink equals the
    uninterrupted run's (see the module docstring). The job's second stage is the windowed
    aggregation, or the same windows counted by an unchanged StatefulProcessor with event-time
    timers run by the flow driver."""
    began = time.monotonic()
    batches = make_batches(SEED)
    inputs = tmp_path / "input"
    write_inputs(inputs, batches)
    processor = second == "transform_with_state"
    ref = Run(tmp_path / "reference", inputs, processor)
    kills = plans(SEED)
    runs = {name: Run(tmp_path / name, inputs, processor) for name in kills}
    for run in (ref, *runs.values()):
        run.root.mkdir()

    def context() -> str:
        return kills_context(kills, tmp_path)

    # the reference run and the runs to kill, side by side
    reference_s, took = run_side_by_side(ref, runs, kills, began, context)
    reference = check_reference(ref, batches)

    for name, run in runs.items():
        check_killed_run(name, run, kills[name], reference, context)
    print(
        f"\n{context()}\nreference {reference_s}s; killed runs {took}s; "
        f"total {time.monotonic() - began:.0f}s"
    )
