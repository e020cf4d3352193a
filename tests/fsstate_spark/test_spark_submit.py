"""``spark-submit --py-files`` with tiered state: SIGKILL mid-stream, restart, same sink.

``examples/recovery_job.py`` is run as a real application (its own JVM and Python driver) with
fsstate shipped as the zip built by :mod:`fsstate_spark.pyfiles`:

1. an uninterrupted run over six input files gives the reference sink;
2. two more runs in fresh directories are killed with SIGKILL (JVM, Python driver and Python
   workers: the whole process group) in the middle of a micro-batch whose output is not
   written yet and whose fsstate version is already committed by some but not all partitions
   ("early": partition 1's task sleeps before its commit) or by all of them ("late": the job sleeps
   in foreachBatch), then started again with the same command on the same checkpoint
   and state directories until they finish.

The union of the sink files of each killed and restarted run must equal the reference sink
exactly. A subprocess never outlives its timeout: on any failure its process group is killed.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.jobs import (
    BATCHES,
    KILL_POINTS,
    SLOW_MS,
    JobDirs,
    checkpoint_view,
    finish,
    kill_group,
    kill_mid_batch,
    module_origins,
    sink_batches,
    sink_rows,
    spark_log,
    start,
    state_versions,
    write_inputs,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_sigkill_and_restart_match_uninterrupted_run(pyfiles: Path, tmp_path: Path) -> None:
    """Kill -9 mid-stream, restart from the checkpoint: the sink equals an uninterrupted run.

    Two killed runs ("early": killed once some but not all partitions of a batch committed
    its fsstate version; "late": once all have, while neither the sink nor Spark's commit log
    has the batch) and the reference run are independent (own checkpoint, state
    and sink), so they run side by side to keep the test short.
    """
    began = time.monotonic()
    inputs = tmp_path / "input"
    write_inputs(inputs, BATCHES)
    ref = JobDirs(tmp_path / "reference", inputs, pyfiles)
    runs = {name: JobDirs(tmp_path / name, inputs, pyfiles) for name in KILL_POINTS}
    for dirs in (ref, *runs.values()):
        dirs.root.mkdir()

    # 1. the uninterrupted reference run and the runs to kill, side by side
    ref_proc = start(ref, ref.log)
    try:
        with ThreadPoolExecutor(len(runs)) as pool:
            pending = {
                name: pool.submit(kill_mid_batch, dirs, 2, KILL_POINTS[name])
                for name, dirs in runs.items()
            }
            kills = {name: (f.result(), checkpoint_view(runs[name])) for name, f in pending.items()}
        finish(ref_proc, ref.log)
    finally:
        kill_group(ref_proc)
    reference_s = time.monotonic() - began
    reference = _check_reference_run(ref, pyfiles)

    _check_killed_mid_batch(kills)

    # 2. restart the same command on the same checkpoint and state until every run finishes
    restarts = _restart_until_finished(runs)

    for name, dirs in runs.items():
        assert sink_rows(dirs.sink) == reference, name
        assert spark_log(dirs.checkpoint, "commits") == list(range(len(BATCHES))), name
        versions = state_versions(dirs.state)
        assert all(vs[-1] == len(BATCHES) - 1 for vs in versions.values()), (name, versions)
    print(
        f"\nreference done after {reference_s:.1f}s; kills (batch, view): {kills}; "
        f"restarts {restarts}; total {time.monotonic() - began:.1f}s"
    )


def _check_reference_run(ref: JobDirs, pyfiles: Path) -> list[tuple[Any, ...]]:
    """The reference run wrote every batch, one row per key and batch, with fsstate loaded from
    the zip in the driver and the workers; returns its sink rows."""
    reference = sink_rows(ref.sink)
    assert sorted(sink_batches(ref.sink)) == list(range(len(BATCHES)))
    assert len(reference) == sum(len({r["k"] for r in b}) for b in BATCHES)
    origins = module_origins(ref.log)
    assert all(p.startswith(str(pyfiles)) for p in origins["driver"]), origins
    assert origins["workers"] and all(
        f"{pyfiles.name}/fsstate/" in p for p in origins["workers"]
    ), origins
    return reference


def _check_killed_mid_batch(kills: dict[str, tuple[int, dict[str, Any]]]) -> None:
    """Each run was killed in the middle of a batch, at its kill point."""
    for name, (batch, view) in kills.items():
        # the interrupted batch is planned, not committed by Spark, and has no output yet ...
        assert batch in view["offsets"] and batch not in view["commits"], (name, view)
        assert batch not in view["sink"], (name, view)
        # ... while fsstate already committed its version in some (not all) or all partitions
        in_state = [batch in vs for vs in view["fsstate"].values()]
        partial = any(in_state) and not all(in_state)
        assert all(in_state) if KILL_POINTS[name] == "all" else partial, (name, view)


def _restart_until_finished(runs: dict[str, JobDirs]) -> dict[str, int]:
    """Restart each killed run's command on its checkpoint and state until it wrote every
    batch (at most 3 times); returns the restarts of each."""
    restarts = dict.fromkeys(runs, 0)
    todo = dict(runs)
    while todo:
        procs = {}
        for name, dirs in todo.items():
            restarts[name] += 1
            assert restarts[name] <= 3, f"{name}: still not finished after 3 restarts"
            with open(dirs.log, "a") as f:
                f.write(f"\n==== restart {restarts[name]} ====\n")
            procs[name] = start(dirs, dirs.log, SLOW_MS)
        try:
            for name, proc in procs.items():
                finish(proc, todo[name].log)
        finally:
            for proc in procs.values():
                kill_group(proc)
        todo = {
            name: dirs
            for name, dirs in todo.items()
            if sorted(sink_batches(dirs.sink)) != list(range(len(BATCHES)))
        }
    return restarts
