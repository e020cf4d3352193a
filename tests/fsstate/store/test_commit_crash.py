"""SIGKILL inside commits: a committing engine is killed at random moments, hundreds of times.

A child process (forked from a preloaded fork server, so a kill point costs milliseconds)
continues the store from its newest committed version, each batch ``v`` one epoch
(:mod:`fsstate.store.epoch`: acquired from the child's pool at ``v - 1``, committed as ``v``,
released for the next): it applies a deterministic, seeded set of operations (value, TTL
value, list and map tables, batched writes, clears), runs TTL cleanup and commits ``v``, under
a tiny memory budget (spills and compaction rounds happen while it runs). It reports when each
commit starts and ends; the parent kills it with SIGKILL at a random moment of a random commit
(uniform over the last commit's measured duration, so the kill lands while data files, index
files or the manifest are written or flushed), then:

The loop runs on local disk (200 kills inside commits) and on the S3 server (100).

* the newest committed version is at least the last commit the child reported done (nothing
  committed is lost) and at most the one it was killed in;
* that version, opened from storage, equals the reference model at that version in every key
  (complete, never torn), and so does the version before it (intact).

Reproduce a failure with ``FSSTATE_SEED=<seed> pytest tests/fsstate/store/test_commit_crash.py``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import random
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.controller import configure
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.epoch import StoreAddress, begin_epoch
from fsstate.store.pool import StorePool
from tests.support.model import LIST, MAP, VALUE, ModelStore
from tests.support.plugin import s3_options

OPERATOR = "crash"
T0_MS = 1_000_000
STEP_MS = 1_000
TTL_MS = 3_500  # values of table "vt" outlive three or four batches
KEYS = [(f"k{i}",) for i in range(40)]
UKEYS = [(f"u{i}",) for i in range(6)]
KEY = pa.schema([pa.field("k", pa.string())])
VAL = pa.schema([pa.field("n", pa.int64())])
UKEY = pa.schema([pa.field("u", pa.string())])
TABLES = [("v", VALUE, None), ("vt", VALUE, TTL_MS), ("l", LIST, None), ("m", MAP, None)]
KILLS_IN_COMMIT_MIN = 200
KILLS_IN_COMMIT_MIN_S3 = 100  # every request there costs a round trip: fewer, same checks
TRIALS_MAX = 700


def batch_ops(seed: int, version: int) -> list[tuple[Any, ...]]:
    """The operations of micro-batch ``version`` (the same whenever it is re-run)."""
    rng = random.Random(seed * 1_000_003 + version)
    ops: list[tuple[Any, ...]] = []
    for _ in range(rng.randint(20, 80)):
        r = rng.random()
        k = rng.choice(KEYS)
        n = rng.randrange(1_000_000)
        if r < 0.25:
            ops.append(("v.update", k, n))
        elif r < 0.3:
            ops.append(("v.clear", k))
        elif r < 0.45:
            ops.append(("vt.update", k, n))
        elif r < 0.6:
            ops.append(("l.append", k, n))
        elif r < 0.65:
            ops.append(("l.put", k, [n, n + 1]))
        elif r < 0.68:
            ops.append(("l.clear", k))
        elif r < 0.88:
            ops.append(("m.update", k, rng.choice(UKEYS), n))
        elif r < 0.95:
            ops.append(("m.remove", k, rng.choice(UKEYS)))
        else:
            ops.append(("m.clear", k))
    if rng.random() < 0.3:  # a batched write of many rows
        ops.append(("v.put_many", [(rng.choice(KEYS), rng.randrange(1000)) for _ in range(30)]))
    return ops


def apply_store(tables: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    """Apply a batch to the engine's tables."""
    v, vt, lst, m = tables["v"], tables["vt"], tables["l"], tables["m"]
    for op in ops:
        what = op[0]
        if what == "v.update":
            v.update(op[1], (op[2],))
        elif what == "v.clear":
            v.clear(op[1])
        elif what == "vt.update":
            vt.update(op[1], (op[2],))
        elif what == "l.append":
            lst.append(op[1], (op[2],))
        elif what == "l.put":
            lst.put(op[1], [(x,) for x in op[2]])
        elif what == "l.clear":
            lst.clear(op[1])
        elif what == "m.update":
            m.update(op[1], op[2], (op[3],))
        elif what == "m.remove":
            m.remove(op[1], op[2])
        elif what == "m.clear":
            m.clear(op[1])
        elif what == "v.put_many":
            keys = pa.table({"k": [k[0] for k, _ in op[1]]})
            vals = pa.table({"n": [n for _, n in op[1]]})
            v.put_many(keys, vals)


def apply_model(model: ModelStore, ops: list[tuple[Any, ...]]) -> None:
    """Apply a batch to the reference model."""
    for op in ops:
        what = op[0]
        if what in ("v.update", "vt.update"):
            model.value_update(what[:-7], op[1], (op[2],))
        elif what == "v.clear":
            model.clear("v", op[1])
        elif what == "l.append":
            model.list_extend("l", op[1], [(op[2],)])
        elif what == "l.put":
            model.list_put("l", op[1], [(x,) for x in op[2]])
        elif what == "l.clear":
            model.clear("l", op[1])
        elif what == "m.update":
            model.map_update("m", op[1], op[2], (op[3],))
        elif what == "m.remove":
            model.map_remove("m", op[1], op[2])
        elif what == "m.clear":
            model.clear("m", op[1])
        elif what == "v.put_many":
            for k, n in op[1]:
                model.value_update("v", k, (n,))


def declare(store: PartitionStore) -> dict[str, Any]:
    """The four tables of the workload."""
    return {
        "v": store.value_table("v", VAL, KEY),
        "vt": store.value_table("vt", VAL, KEY, ttl_ms=TTL_MS),
        "l": store.list_table("l", VAL, KEY),
        "m": store.map_table("m", UKEY, VAL, KEY),
    }


def child(root: str | Location, seed: int, conn: Connection) -> None:
    """Continue the store from its newest version, batch after batch, until killed."""
    configure(
        memory_limit=8 * 1024 * 1024,
        high_watermark=0.05,
        low_watermark=0.03,
        check_every_growth=16,
        compaction_max_runs=3,
    )
    versions = PartitionStore.committed_versions(root, OPERATOR, 0)
    latest = versions[-1] if versions else None
    version = 0 if latest is None else latest + 1
    address = StoreAddress(FileIO(root), OPERATOR, 0)
    pool = StorePool()  # each batch one epoch: the committed store is reused by the next
    while True:
        run = begin_epoch(
            address,
            version,
            config=StoreConfig(retain_versions=20),
            now_ms=T0_MS + version * STEP_MS,
            pool=pool,
        )
        with run:
            apply_store(declare(run.store), batch_ops(seed, version))
            run.store.expire()
            conn.send(("start", version, time.monotonic()))
            run.commit()
        conn.send(("done", version, time.monotonic()))
        version += 1


class Reference:
    """The model at every version (batches are deterministic, so versions never change)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.model = ModelStore(retain_versions=10**9, now=T0_MS)
        for name, kind, ttl in TABLES:
            self.model.declare(name, kind, ttl)
        self.built = -1

    def at(self, version: int) -> ModelStore:
        """The model opened at ``version``."""
        if self.built < version:
            if self.built >= 0:
                self.model.open(self.built)
            while self.built < version:
                self.built += 1
                self.model.set_time(T0_MS + self.built * STEP_MS)
                apply_model(self.model, batch_ops(self.seed, self.built))
                self.model.expire()
                self.model.commit(self.built)
        self.model.open(version)
        self.model.set_time(T0_MS + version * STEP_MS)
        return self.model


def compare(root: str | Location, version: int, model: ModelStore, what: str) -> None:
    """Open ``version`` from storage and compare every key with the model."""
    store = PartitionStore.open(root, OPERATOR, 0, version)
    try:
        store.set_time(T0_MS + version * STEP_MS)
        t = declare(store)
        for k in KEYS:
            got = (t["v"].get(k), t["vt"].get(k), t["l"].get(k), list(t["m"].items(k)))
            want = (
                model.value_get("v", k),
                model.value_get("vt", k),
                model.list_get("l", k),
                model.map_items("m", k),
            )
            assert got == want, f"{what}: version {version}, key {k}: engine {got} model {want}"
    finally:
        store.close()


def _drain(conn: Connection) -> list[tuple[str, int, float]]:
    """Events still in the pipe of a killed child (a message cut by the kill is dropped)."""
    out = []
    try:
        while conn.poll():
            out.append(conn.recv())
    except (EOFError, OSError, pickle.UnpicklingError):
        pass
    return out


def _seed() -> int:
    return int(os.environ.get("FSSTATE_SEED", "4242"))


def _kill_in_a_commit(
    ctx: mp.context.ForkServerContext,
    root: str | Location,
    seed: int,
    trial: int,
    rng: random.Random,
    durations: list[float],
) -> tuple[int, int]:
    """A child started from ``ctx`` and killed at a random moment of its 1st to 3rd commit
    (uniform over the median commit duration, which ``durations`` collects): the last version
    it reported committed and the one it was killed in."""
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child, args=(root, seed, theirs), daemon=True)
    proc.start()
    theirs.close()
    target = rng.randint(1, 3)  # kill during the target-th commit of this child
    starts, done, killed_in = 0, -1, -1
    started_at = 0.0
    deadline = time.monotonic() + 60
    while starts < target:
        assert time.monotonic() < deadline, f"seed={seed} trial={trial}: child stalled"
        if not ours.poll(0.5):
            assert proc.is_alive(), f"seed={seed} trial={trial}: child died ({proc.exitcode})"
            continue
        event, version, at = ours.recv()
        if event == "start":
            starts += 1
            killed_in, started_at = version, at
        else:
            done = version
            durations.append(at - started_at)
    window = sorted(durations)[len(durations) // 2] if durations else 0.01
    time.sleep(rng.uniform(0, 1.1 * window))
    proc.kill()
    proc.join(10)
    for event, version, _at in _drain(ours):  # events sent before the kill
        if event == "start":
            killed_in = version
        else:
            done = version
    ours.close()
    return done, killed_in


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_sigkill_inside_commits_leaves_complete_versions(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    seed = _seed()
    rng = random.Random(seed)
    root: str | Location = str(tmp_path / "state")
    kills_min = KILLS_IN_COMMIT_MIN
    if backend == "s3":
        info = request.getfixturevalue("s3_server")
        root = Location.parse(request.getfixturevalue("s3_uri"), s3_options(info))
        kills_min = KILLS_IN_COMMIT_MIN_S3
    ctx = mp.get_context("forkserver")
    # pandas too: pyarrow imports it at its first pa.array of a list (0.45 s), which would
    # otherwise happen inside each child's first commit, where most kills then landed
    ctx.set_forkserver_preload(["pandas", "pyarrow", "fsstate", __name__])
    ref = Reference(seed)
    durations: list[float] = []
    in_commit = after_commit = 0
    outcomes = {"absent": 0, "published": 0}  # of the kills inside a commit: was it visible?
    for trial in range(TRIALS_MAX):
        if in_commit >= kills_min:
            break
        done, killed_in = _kill_in_a_commit(ctx, root, seed, trial, rng, durations)
        if done == killed_in:
            after_commit += 1
        else:
            in_commit += 1
        versions = PartitionStore.committed_versions(root, OPERATOR, 0)
        latest = versions[-1]
        ctx_msg = f"seed={seed} trial={trial} killed in commit {killed_in}, last done {done}"
        assert done <= latest <= killed_in, f"{ctx_msg}: newest version on storage {latest}"
        if done != killed_in:
            outcomes["published" if latest == killed_in else "absent"] += 1
        compare(root, latest, ref.at(latest), ctx_msg)
        if latest > 0 and latest - 1 in versions:
            compare(root, latest - 1, ref.at(latest - 1), ctx_msg + " (previous version)")
    summary = f"{in_commit} kills inside a commit {outcomes}, {after_commit} right after one"
    assert in_commit >= kills_min, f"seed={seed}: only {summary}"
    # both sides of the commit point were hit: before the manifest was published (the version
    # is absent) and after it (present, though the child never reported it)
    assert min(outcomes.values()) > 0, f"seed={seed}: {summary}"
    print(f"seed={seed}: {summary}")
