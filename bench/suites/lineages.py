"""Lineages at scale: a commit's cost beside hundreds of lineages, and the collection over them.

Two questions of issue 66, on local disk (the collection's requests are the same on an object
store; its time there is theirs times the store's latency):

* **Commit p99 with many lineages.** Two stores of one operator, side by side: one holds only
  the lineage its writer commits on, the other 500 more (forks of it, each with a few
  versions of its own). Each writer commits rounds of batches (1,000 keys of a 10,000-key
  value table changed, a compaction every 10th batch so the commit's own retention deletes
  files and looks for forks), the stores taking turns batch by batch; the background
  collection runs every 50 commits as it does in a query (``orphan_scan_every_commits``),
  across all lineages, beside the commits. Per round, the 99th percentile of each side's
  commit times; a sample is their ratio (many lineages over one). Goal: <= 1.5.
* **``fsstate gc`` over many lineages.** One operator's store with 500 live lineages of 100
  retained versions each (50,000 manifests): the time and the requests of one collection
  (:func:`fsstate.store.gc.collect`, what ``fsstate gc`` runs per operator), cold (no
  manifest read before in the process) and warm (the manifests' file sets cached). Rows
  are informative.

Time: quick (40 lineages of 10 versions, 2 rounds of 60 commits) about a minute; full (500
lineages; 500 x 100 versions written by the engine's commits: most of the time) about 15
minutes on this 2-core machine.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.harness.common import BenchContext, Result, median, ratio_result, spread_text
from fsstate import PartitionStore, StoreConfig
from fsstate.storage.fileio import FileIO
from fsstate.store.collector import collector
from fsstate.store.gc import collect
from fsstate.store.lineage import fork_version

SUITE = "lineages"
KEYS = 10_000
CHANGED = 1_000
KEY = pa.schema([pa.field("k", pa.string())])
VAL = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])
OP = "bench"


def _batch(store: PartitionStore, rng: np.random.Generator, version: int) -> float:
    """Change ``CHANGED`` values and commit ``version``; the commit's milliseconds."""
    t = store.value_table("v", VAL, KEY)
    idx = rng.choice(KEYS, CHANGED, replace=False)
    keys = pa.table({"k": [f"key-{i:06d}" for i in idx]})
    t.put_many(keys, pa.table({"n": idx + version, "s": [f"v{version}"] * CHANGED}))
    t0 = time.perf_counter()
    store.commit(version)
    ms = (time.perf_counter() - t0) * 1000
    if version % 10 == 0:
        store.compact(force=True)
    return ms


def _writer(root: Path, lineages: int, versions: int, cfg: StoreConfig) -> PartitionStore:
    """A store whose writer's lineage (the trunk) has ``lineages`` forks of ``versions``
    versions each beside it; the writer's store, at its newest version."""
    fileio = FileIO(str(root))
    store = PartitionStore.open(fileio, OP, 0, None, cfg)
    rng = np.random.default_rng(1)
    for v in range(3):
        _batch(store, rng, v)
    for i in range(lineages):
        name = f"l{i:04d}"
        fork_version(fileio, f"{OP}/0", 2, branch=name)
        other = PartitionStore.open(fileio, OP, 0, 2, cfg, branch=name)
        for v in range(3, 3 + versions - 1):
            other.value_table("v", VAL, KEY).update((f"key-{i:06d}",), (v, name))
            other.commit(v)
        other.close()
    return store


def _commit_rows(ctx: BenchContext, scratch: Path) -> list[Result]:
    many = ctx.pick(40, 500)
    cfg = StoreConfig(retain_versions=20, orphan_scan_every_commits=50)
    stores = {
        "one": _writer(scratch / "one", 0, 2, cfg),
        "many": _writer(scratch / "many", many, 4, cfg),
    }
    rounds, per = ctx.pick((2, 60), (5, 200))
    version = {name: 3 for name in stores}
    ratios: list[float] = []
    p99s: dict[str, list[float]] = {"one": [], "many": []}
    rng = np.random.default_rng(7)
    for r in range(rounds):
        times: dict[str, list[float]] = {"one": [], "many": []}
        for i in range(per):
            order = ("one", "many") if (r + i) % 2 == 0 else ("many", "one")
            for name in order:
                times[name].append(_batch(stores[name], rng, version[name]))
                version[name] += 1
        for name in times:
            p99s[name].append(float(np.percentile(times[name], 99)))
        ratios.append(p99s["many"][-1] / p99s["one"][-1])
        p_one, p_many = p99s["one"][-1], p99s["many"][-1]
        ctx.log(f"  lineages: round {r + 1}/{rounds}: p99 {p_one:.1f} / {p_many:.1f} ms")
    collector().wait_idle(120)
    for s in stores.values():
        s.close()
    work = (
        f"{per} commits a round per store, {CHANGED} of {KEYS:,} values changed each, a "
        f"compaction every 10th; retain 20, the background collection every 50 commits"
    )
    rows = [
        Result(SUITE, "commit p99, 1 lineage", median(p99s["one"]), "ms",
               notes=f"per round ({spread_text(p99s['one'])}); {work}", samples=p99s["one"]),
        Result(SUITE, f"commit p99, {many} more lineages", median(p99s["many"]), "ms",
               notes=f"per round ({spread_text(p99s['many'])}); {work}", samples=p99s["many"]),
    ]  # fmt: skip
    rows.append(
        ratio_result(
            SUITE,
            f"commit p99 with {many} more lineages / with none",
            ratios,
            "p99 of the commit times of a round, over the same of the store alone",
            work,
            goal=1.5,
            goal_op="<=",
        )
    )
    return rows


def _gc_rows(ctx: BenchContext, scratch: Path) -> list[Result]:
    lineages, versions = ctx.pick((40, 10), (500, 100))
    cfg = StoreConfig(retain_versions=versions, orphan_scan_every_commits=1 << 30)
    t0 = time.perf_counter()
    _writer(scratch / "gc", lineages, versions, cfg).close()
    built = time.perf_counter() - t0
    fileio = FileIO(str(scratch / "gc"))
    out: list[Result] = []
    for label in ("cold", "warm"):
        before = fileio.stats.snapshot()
        t1 = time.perf_counter()
        done = collect(fileio, OP, retain=versions, grace_ms=0, abandoned_ms=0)
        secs = time.perf_counter() - t1
        after = fileio.stats.snapshot()
        reqs = {k: after[k] - before[k] for k in ("get", "list", "delete") if after[k] > before[k]}
        what = (
            f"{lineages} live lineages x {versions} retained versions ({done.manifests} "
            f"manifests deleted, {done.files} files); requests {reqs}; built in {built:.0f} s"
        )
        name = f"fsstate gc, {lineages} x {versions} versions, {label}"
        out.append(Result(SUITE, name, secs, "s", notes=what, samples=[secs]))
        count = float(sum(reqs.values()))
        name = f"fsstate gc requests, {label}"
        out.append(Result(SUITE, name, count, "requests", notes=what, samples=[count]))
    return out


def run(ctx: BenchContext) -> list[Result]:
    """Run the lineage benchmarks (see the module docstring)."""
    Path(ctx.tmp_dir).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    try:
        rows = _commit_rows(ctx, scratch) if ctx.wants("commit") else []
        if ctx.wants("gc"):
            rows += _gc_rows(ctx, scratch)
        return rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
