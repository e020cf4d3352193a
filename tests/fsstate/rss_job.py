"""Subprocess job for the larger-than-memory test: write ~1 GiB through a 64 MiB budget.

Run as ``python -m tests.fsstate.rss_job <dir> <total_mib> <budget_mib>``; prints one JSON line
with the peak RSS and counters. Exits non-zero if any value reads back wrong.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import pyarrow as pa

from fsstate import PartitionStore
from fsstate.controller import configure

KEY = pa.schema([pa.field("id", pa.int64())])
VAL = pa.schema([pa.field("blob", pa.string())])
ROW_BYTES = 16 * 1024


def value_of(store: int, i: int) -> str:
    """A deterministic 16 KiB value (compressible on disk, full size in memory)."""
    return (f"{store:02d}:{i:09d}|" * (ROW_BYTES // 13 + 1))[:ROW_BYTES]


def _mem_mib() -> tuple[float, float]:
    """(resident, resident file-backed and shared) MiB of this process, from statm."""
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    return int(fields[1]) * 4096 / 2**20, int(fields[2]) * 4096 / 2**20


def _peak_rss_mib() -> float:
    """This process image's peak RSS (VmHWM).

    Not ``getrusage().ru_maxrss``: Linux carries that over ``execve`` from the process that
    spawned us, so under pytest it reports the test runner's own peak (342 MiB seen in CI).
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _write(root: str, stores: int, rows_per_store: int, phase: list[str]) -> None:
    """Version 0 of ``stores`` stores, ``rows_per_store`` rows each: the even stores written in
    Arrow batches, the odd ones key by key; ``phase[0]`` names the step under way."""
    opened = [PartitionStore.open(root, "big", p) for p in range(stores)]
    for p, s in enumerate(opened):
        phase[0] = f"write-{p}"
        t = s.value_table("blobs", VAL, KEY)
        batch = 64
        for start in range(0, rows_per_store, batch):
            ids = list(range(start, min(start + batch, rows_per_store)))
            if p % 2 == 0:  # batched Arrow writes
                t.put_many(pa.table({"id": ids}), pa.table({"blob": [value_of(p, i) for i in ids]}))
            else:  # point writes through the hot tier
                for i in ids:
                    t.update((i,), (value_of(p, i),))
        phase[0] = f"commit-{p}"
        s.commit(0)
    for s in opened:
        s.close()


def _bad_rows(root: str, stores: int, rows_per_store: int, phase: list[str]) -> int:
    """The rows of version 0 that read back missing or different, each store reopened."""
    bad = 0
    for p in range(stores):
        phase[0] = f"read-{p}"
        s = PartitionStore.open(root, "big", p, 0)
        t = s.value_table("blobs", VAL, KEY)
        for i in range(rows_per_store):
            got = t.get((i,))
            if got is None or got[0] != value_of(p, i):
                bad += 1
        s.close()
    return bad


def main() -> None:
    root, total_mib, budget_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    phase = ["import"]
    peaks: dict[str, float] = {}
    anon = [0.0]  # peak of resident memory not backed by files (what the process allocated)

    def sample() -> None:
        while True:
            rss, shared = _mem_mib()
            peaks[phase[0]] = max(peaks.get(phase[0], 0.0), rss)
            anon[0] = max(anon[0], rss - shared)
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()
    ctl = configure(memory_limit=f"{budget_mib}MiB", check_every_growth=64)
    stores = 4
    rows_per_store = total_mib * 1024 * 1024 // ROW_BYTES // stores
    t0 = time.time()
    _write(root, stores, rows_per_store, phase)
    write_s = time.time() - t0
    bad = _bad_rows(root, stores, rows_per_store, phase)
    peak_mib = _peak_rss_mib()
    _, shared_mib = _mem_mib()
    stats = ctl.stats()
    print(
        json.dumps(
            {
                "peak_rss_mib": round(peak_mib, 1),
                # the exact peak less the file-backed pages (shared libraries: how many are
                # resident depends on the page cache, e.g. +30 MiB right after a pip install),
                # or the sampled anonymous peak if higher
                "peak_private_mib": round(max(peak_mib - shared_mib, anon[0]), 1),
                "shared_mib": round(shared_mib, 1),
                "budget_mib": budget_mib,
                "written_mib": rows_per_store * stores * ROW_BYTES / 2**20,
                "bad": bad,
                "spills": stats.spills,
                "bytes_spilled": stats.bytes_spilled,
                "compactions": stats.compactions,
                "write_s": round(write_s, 1),
                "total_s": round(time.time() - t0, 1),
                "phase_peaks_mib": {k: round(v) for k, v in peaks.items()},
            }
        )
    )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
