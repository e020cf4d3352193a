"""``make crash-test`` (:mod:`devkit.crash_test`): its parts, and a short whole run on request.

Invariants checked: a kill takes every process of a start, the one that moved to a process
group of its own (as PySpark's daemon does) and one that left the session (found by the run's
marker) included, and nothing is left after it; the sink is read through its metadata log only
(files outside it, temporary log files and deleted entries do not count); the differences name
missing and extra rows; kill points always leave input for the next kill; where a kill landed
is told from what the run's directories hold.

The whole run (``--kills 2`` over 8 micro-batches: an uninterrupted run, two killed starts and
the final one, about 70 s on two cores) is skipped unless
``FSSTATE_CRASH_TEST=1``: ``make test`` stays as long as it was; ``make crash-test`` is the
real test.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from devkit.crash_job import OUTPUT_SCHEMA, expected_rows, expected_state
from devkit.crash_test import (
    MARKER_ENV,
    PARTITIONS,
    Timing,
    View,
    differences,
    kill_run,
    plan_kill,
    run_pids,
    sink_rows,
)
from devkit.repo import ROOT

WHOLE_RUN_ENV = "FSSTATE_CRASH_TEST"

# a start's processes: this one (session leader), a child that moves to a process group of its
# own (as PySpark's daemon does) with a grandchild, and one that leaves the session (setsid)
TREE = textwrap.dedent(
    """
    import os, sys, time
    pids = [os.getpid()]
    for how in ("setpgid", "setsid"):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0) if how == "setpgid" else os.setsid()
            child = os.fork()
            if child == 0:
                time.sleep(600)
            os.write(w, f"{os.getpid()} {child}\\n".encode())
            time.sleep(600)
        pids += [int(p) for p in os.read(r, 100).split()]
    print(" ".join(map(str, pids)), flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def test_a_kill_takes_every_process_of_a_start() -> None:
    marker = f"test-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE],
        env={**os.environ, MARKER_ENV: marker},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 5 and all(_alive(p) for p in pids)
        assert sorted(run_pids(proc.pid, marker)) == sorted(pids)
        # the driver's process group alone misses four of them
        groups = {p: os.getpgid(p) for p in pids}
        assert [p for p in pids if groups[p] == proc.pid] == [proc.pid]
    finally:
        killed = kill_run(proc, marker)
    assert killed == 5
    assert run_pids(proc.pid, marker) == []
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # reparented orphans: reaped by init
    assert not any(_alive(p) for p in pids)


def _sink_file(sink: Path, name: str, rows: list[tuple[object, ...]]) -> Path:
    names = [f.split()[0] for f in OUTPUT_SCHEMA.split(", ")]
    path = sink / name
    pq.write_table(pa.Table.from_pylist([dict(zip(names, r)) for r in rows]), path)
    return path


def _log(sink: Path, name: str, entries: list[tuple[str, Path]]) -> None:
    lines = ["v1"] + [json.dumps({"path": f"file://{p}", "action": a}) for a, p in entries]
    (sink / "_spark_metadata" / name).write_text("\n".join(lines))


def test_the_sink_is_what_its_log_commits(tmp_path: Path) -> None:
    (tmp_path / "_spark_metadata").mkdir(parents=True)
    a = _sink_file(tmp_path, "part-a.parquet", [(0, "k1", 1, 5, "5", "1:1")])
    b = _sink_file(tmp_path, "part-b.parquet", [(1, "k1", 2, 7, "2,5", "1:1;2:1")])
    stray = _sink_file(tmp_path, "part-stray.parquet", [(1, "k9", 9, 9, "9", "1:9")])
    gone = _sink_file(tmp_path, "part-gone.parquet", [(0, "k8", 8, 8, "8", "0:8")])
    _log(tmp_path, "0", [("add", a), ("add", gone)])
    _log(tmp_path, "1.compact", [("add", a), ("add", gone), ("add", b), ("delete", gone)])
    _log(tmp_path, ".2.tmp", [("add", stray)])  # an unfinished log write
    assert sink_rows(tmp_path) == [(0, "k1", 1, 5, "5", "1:1"), (1, "k1", 2, 7, "2,5", "1:1;2:1")]


def test_differences_name_missing_and_extra_rows() -> None:
    assert differences("x", [(1, "a"), (2, "b")], [(1, "a"), (2, "b")]) == []
    [line] = differences("sink", [(1, "a"), (1, "a")], [(1, "a"), (2, "b")])
    assert line.startswith("sink: 2 rows, expected 2; 1 missing")
    assert "(2, 'b')" in line and "1 extra [\"(1, 'a')\"]" in line


def test_the_model() -> None:
    batches = [
        [{"b": 0, "k": "x", "v": 6}, {"b": 0, "k": "x", "v": 1}, {"b": 0, "k": "y", "v": 3}],
        [{"b": 1, "k": "x", "v": 2}, {"b": 1, "k": "x", "v": 7}],
    ]
    assert expected_rows(batches) == [
        (0, "x", 2, 7, "1,6", "1:1;2:1"),
        (0, "y", 1, 3, "3", "3:1"),
        (1, "x", 4, 16, "6,2,7", "1:1;2:2;3:1"),
    ]
    assert expected_state(batches) == {
        "stats": [("x", 4, 16), ("y", 1, 3)],
        "recent": [("x", [6, 2, 7]), ("y", [3])],
        "buckets": [("x", 1, 1), ("x", 2, 2), ("x", 3, 1), ("y", 3, 1)],
    }


@pytest.mark.parametrize("seed", range(5))
def test_kill_points_leave_input_for_every_kill(seed: int) -> None:
    rng = random.Random(seed)
    timing = Timing(startup_s=12.0, batch_s=0.5)
    batches, kills, commits = 150, 50, -1
    for n in range(kills):
        plan = plan_kill(
            rng, View(commits, commits, commits, (commits,) * 2), kills - n, batches, timing
        )
        assert commits < plan.target < batches - 1
        assert plan.delay <= (timing.startup_s if plan.mode == "start-up" else timing.batch_s)
        commits = plan.target  # at most the target's batch is committed by the kill
    assert commits < batches - 1


def test_where_a_kill_landed() -> None:
    before = View(offsets=4, commits=4, sink=4, state=(4,) * PARTITIONS)
    some = (5,) + (4,) * (PARTITIONS - 1)
    assert before.landed(before, session_up=False) == "start-up (session not up)"
    assert before.landed(before, session_up=True) == "query start (nothing written yet)"
    cases = {
        View(5, 4, 4, (4,) * PARTITIONS): "batch running, no state committed",
        View(5, 4, 4, some): "state committed by some partitions",
        View(5, 4, 4, (5,) * PARTITIONS): "state committed, sink not",
        View(5, 4, 5, (5,) * PARTITIONS): "sink committed, commit log not",
        View(5, 5, 5, (5,) * PARTITIONS): "between batches",
    }
    for view, where in cases.items():
        assert view.landed(before, session_up=True) == where


@pytest.mark.skipif(
    os.environ.get(WHOLE_RUN_ENV) != "1", reason=f"the whole run (~70 s): {WHOLE_RUN_ENV}=1"
)
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_short_whole_run(tmp_path: Path) -> None:
    args = ["--kills", "2", "--batches", "8", "--rows-per-batch", "20", "--keys", "8"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "devkit.crash_test",
            *args,
            "--seed",
            "3",
            "--workdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "crash-test: 2 kills, 2 restarts, final output equal (seed 3," in done.stdout
    assert sorted(p.name for p in (tmp_path / "killed" / "logs").iterdir()) == [
        "start-000.log",
        "start-001.log",
        "start-002.log",
    ]
