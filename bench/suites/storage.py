"""Storage backends side by side: requests, bytes and time of commits, opens and catch-ups on
local disk and on an S3 server on loopback (SeaweedFS ``weed mini``, started and stopped here).

Both backends hold the same store (a value table of 100,000 keys and a map table of 10,000
entries) and get the same operations, round by round, the backend that goes first alternating:

* commit with 1,000 changed values, and an unchanged commit;
* open the newest version in a fresh FileIO and read 200 random keys (what a worker's first
  visit to a partition costs);
* catch a copy one version behind up (``refresh``), as a worker does when its partition comes
  back after another worker committed.

Requests are counted by FileIO (one per GET, PUT, HEAD, LIST or DELETE; on a local disk, one
per file opened, written, listed or deleted). Both stores run on the same two cores as the
server, so the S3 figures include the server's own work.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness.common import BenchContext, Result, median, spread_text
from bench.harness.s3 import s3_options, s3_server
from fsstate import PartitionStore, StoreConfig
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location

SUITE = "storage"
KEYS = 100_000
MAP_KEYS = 10_000
CHANGED = 1_000
READS = 200
KEY = pa.schema([pa.field("k", pa.string())])
VAL = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])
UKEY = pa.schema([pa.field("u", pa.string())])
KINDS = ("get", "put", "head", "list", "delete")


def _key(i: int) -> tuple[str]:
    return (f"key-{i:08d}",)


class Backend:
    """One backend's store and the figures of its operations."""

    def __init__(self, name: str, location: Location) -> None:
        self.name = name
        self.location = location
        self.config = StoreConfig(orphan_scan_every_commits=1_000_000)  # no listing GC here
        self.store = PartitionStore.open(location, "bench", 0, None, self.config)
        self.figures: dict[str, list[tuple[float, dict[str, int]]]] = {}

    def load(self, rng: np.random.Generator) -> None:
        """Write and commit the store's first version (value table and map table)."""
        v = self.store.value_table("v", VAL, KEY)
        keys = pa.table({"k": [f"key-{i:08d}" for i in range(KEYS)]})
        vals = pa.table({"n": np.arange(KEYS), "s": [f"value-{i:08d}" for i in range(KEYS)]})
        v.put_many(keys, vals)
        m = self.store.map_table("m", UKEY, VAL, KEY)
        for i in range(MAP_KEYS):
            m.update(_key(i % 1000), (f"u{i // 1000}",), (i, "m"))
        self.store.commit(0)
        self.store.fileio.check_conditional_writes()

    def measure(self, what: str, fileio: FileIO, fn: Callable[[], Any]) -> None:
        """Time ``fn`` and count the requests and bytes ``fileio`` saw meanwhile."""
        before = fileio.stats.snapshot()
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1000
        after = fileio.stats.snapshot()
        self.figures.setdefault(what, []).append(
            (ms, {k: after[k] - before[k] for k in (*KINDS, "bytes_read", "bytes_written")})
        )

    def round(self, version: int, rng: np.random.Generator) -> None:
        """One round: two commits, an open with reads, and a catch-up of a lagging copy."""
        store, fileio = self.store, self.store.fileio
        v = store.value_table("v", VAL, KEY)
        lagging = PartitionStore.open(self.location, "bench", 0, version - 1, self.config)
        lagging.value_table("v", VAL, KEY).get(_key(0))  # a copy with a view, one version old
        for i in rng.choice(KEYS, size=CHANGED, replace=False).tolist():
            v.update(_key(i), (version, f"changed-{version}"))
        self.measure("commit 1k changed keys", fileio, lambda: store.commit(version))
        self.measure("commit unchanged", fileio, lambda: store.commit(version + 1))
        fresh_io = FileIO(self.location)
        picks = rng.choice(KEYS, size=READS, replace=False).tolist()

        def open_and_read() -> None:
            s = PartitionStore.open(fresh_io, "bench", 0, version + 1, self.config)
            t = s.value_table("v", VAL, KEY)
            for i in picks:
                t.get(_key(i))
            s.close()

        store.controller.cache.shrink_to(0)  # a worker that never read these files
        self.measure("open + 200 reads", fresh_io, open_and_read)
        self.measure("catch-up 2 versions", lagging.fileio, lambda: lagging.refresh(version + 1))
        lagging.close()


def run(ctx: BenchContext) -> list[Result]:
    """Run the storage comparison."""
    server = s3_server(ctx)
    info = server.start()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    try:
        opts = s3_options(info)
        backends = [
            Backend("local", Location.parse(str(scratch / "state"))),
            Backend("s3", Location.parse(f"s3://{info.bucket}/bench-storage", opts)),
        ]
        rng = np.random.default_rng(7)
        for b in backends:
            b.load(rng)
        rounds = ctx.pick(5, 15)
        for r in range(rounds):
            version = 1 + 2 * r
            order = backends if r % 2 == 0 else backends[::-1]
            for b in order:
                b.round(version, np.random.default_rng(100 + r))
            ctx.log(f"  storage round {r + 1}/{rounds}")
        return _results(backends, rounds)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _results(backends: list[Backend], rounds: int) -> list[Result]:
    out: list[Result] = []
    by_name = {b.name: b for b in backends}
    for what in by_name["local"].figures:
        for b in backends:
            figs = b.figures[what]
            times = [ms for ms, _ in figs]
            reqs = {k: median([float(c[k]) for _, c in figs]) for k in KINDS}
            req_txt = ", ".join(f"{v:g} {k.upper()}" for k, v in reqs.items() if v) or "none"
            read = median([float(c["bytes_read"]) for _, c in figs])
            written = median([float(c["bytes_written"]) for _, c in figs])
            total = [float(sum(c[k] for k in KINDS)) for _, c in figs]
            out.append(
                Result(
                    SUITE,
                    f"{what}, {b.name}: requests",
                    median(total),
                    "requests",
                    notes=(
                        f"median of {rounds} rounds: {req_txt}; {written:,.0f} B written, "
                        f"{read:,.0f} B read; {KEYS:,}-key value table and {MAP_KEYS:,} map "
                        "entries"
                    ),
                    samples=total,
                )
            )
            out.append(
                Result(
                    SUITE,
                    f"{what}, {b.name}: time",
                    median(times),
                    "ms",
                    notes=f"median of {rounds} rounds, {spread_text(times)} ms",
                    samples=times,
                )
            )
        local = [ms for ms, _ in by_name["local"].figures[what]]
        s3 = [ms for ms, _ in by_name["s3"].figures[what]]
        ratios = [a / b for a, b in zip(s3, local, strict=True) if b > 0]
        out.append(
            Result(
                SUITE,
                f"{what}: s3/local time",
                median(ratios),
                "x",
                notes=(
                    f"paired by round (the backend going first alternates); {spread_text(ratios)}"
                ),
                samples=ratios,
            )
        )
    return out
