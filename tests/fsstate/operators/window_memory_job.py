"""Subprocess job: a windowed aggregation whose state is 10x the engine's memory budget.

Run as ``python -m tests.fsstate.operators.window_memory_job <dir> <state_mib> <budget_mib>
[<open_windows>]``;
prints one JSON line with the peak memory and whether every window's result equals a
recomputation of that window with pyarrow; exits 1 if one differs.

The query (:class:`fsstate.operators.LocalQuery`, 2 partitions): one-minute tumbling windows
per key with ``count``, ``sum(v)`` and ``max(s)``, ``s`` a 1 KiB string, so each (window, key)
pane holds about 1 KiB; the watermark trails the event time by ``open_windows`` minutes
(default ``OPEN_WINDOWS``).
Window ``w``'s ``keys`` keys arrive over ``EPOCHS_PER_WINDOW`` epochs, two rows each; with
``keys`` chosen so that ``open_windows`` windows hold ``state_mib``, about that much state is
live at once while the watermark closes (emits and evicts) one window every
``EPOCHS_PER_WINDOW`` epochs. Tail epochs of one row each move the watermark on
until every window is out. The job keeps only a digest per window, so its own memory is one
input batch and one window's output.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.controller import configure
from fsstate.operators import Agg, LocalQuery, Stage, WatermarkSpec, Window, WindowAggregate

VALUE_BYTES = 1024
MINUTE_MS = 60_000
OPEN_WINDOWS = 10
EPOCHS_PER_WINDOW = 4  # a window's keys arrive over this many epochs


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _batch(window: int, part: int, keys: int, rng: np.random.Generator) -> pa.Table:
    """Two rows per key of part ``part`` of window ``window``'s keys (unique to the window)."""
    per = keys // EPOCHS_PER_WINDOW
    first = window * keys + part * per
    ids = np.repeat(np.arange(first, first + per, dtype=np.int64), 2)
    t_ms = window * MINUTE_MS + rng.integers(0, MINUTE_MS, len(ids), dtype=np.int64)
    prefix = pc.utf8_lpad(
        pc.cast(pa.array(rng.integers(0, 10**12, len(ids), dtype=np.int64)), pa.string()), 12, "0"
    )
    return pa.table(
        {
            "k": pa.array(ids),
            "t": pa.array(t_ms * 1000, pa.timestamp("us", "UTC")),
            "v": pa.array(rng.integers(0, 1000, len(ids), dtype=np.int64)),
            "s": pc.utf8_rpad(prefix, VALUE_BYTES, "x"),
        }
    )


def _digest(k: pa.Array, count: pa.Array, total: pa.Array, top: pa.Array) -> str:
    """A digest of one window's (key, count, sum, max) rows, in key order."""
    t = pa.table({"k": k, "n": count, "s": total, "m": pc.utf8_slice_codeunits(top, 0, 12)})
    t = t.sort_by("k")
    h = hashlib.sha256()
    for col in t.columns:
        h.update(repr(col.to_pylist()).encode())
    return h.hexdigest()


def _sample_anon() -> list[float]:
    """A one-element list holding the process's peak anonymous memory (MiB), sampled every
    10 ms by a daemon thread."""
    anon = [0.0]

    def sample() -> None:
        while True:
            anon[0] = max(anon[0], _status_mib("RssAnon"))
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()
    return anon


def _query(root: str, open_windows: int) -> LocalQuery:
    """The windowed count, sum and max on 2 partitions, the watermark ``open_windows`` behind."""
    op = WindowAggregate(
        "windows",
        keys=["k"],
        time="t",
        window=Window(size_ms=MINUTE_MS),
        aggs=[Agg("count"), Agg("sum", "v"), Agg("max", "s")],
    )
    return LocalQuery(
        root,
        [Stage(op, ["k"])],
        partitions=2,
        watermark=WatermarkSpec({"input": open_windows * MINUTE_MS}),
    )


def _tail_batch(e: int, w: int) -> pa.Table:
    """Epoch ``e``'s one row, in window ``w``, far from the data's keys: moves the watermark on."""
    return pa.table(
        {
            "k": pa.array([-1 - e], pa.int64()),
            "t": pa.array([w * MINUTE_MS * 1000], pa.timestamp("us", "UTC")),
            "v": pa.array([0], pa.int64()),
            "s": pa.array([""]),
        }
    )


def _emitted(out: pa.Table, keys: int, got: dict[int, str]) -> None:
    """Add the digest of each window ``out`` emits to ``got`` (each window once).

    Each emitted window is read in key order, a slice at a time: no copy of the whole output,
    so the process's peak is the query's, not the check's.
    """
    starts = pc.struct_field(out["window"], "start").cast(pa.int64()).to_numpy()
    ids = out["k"].to_numpy()
    order = np.lexsort((ids, starts))
    order = order[ids[order] >= 0]
    sorted_starts = starts[order]
    per = keys // EPOCHS_PER_WINDOW
    for start in np.unique(sorted_starts):
        w = int(start) // (MINUTE_MS * 1000)
        assert w not in got, f"window {w} emitted twice"
        idx = order[sorted_starts == start]
        slices = (
            out.take(pa.array(idx[i * per : (i + 1) * per])) for i in range(EPOCHS_PER_WINDOW)
        )
        got[w] = hashlib.sha256(
            "".join(_digest(c["k"], c["count"], c["sum(v)"], c["max(s)"]) for c in slices).encode()
        ).hexdigest()


def main() -> None:
    root, state_mib, budget_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    open_windows = int(sys.argv[4]) if len(sys.argv) > 4 else OPEN_WINDOWS
    data_windows = open_windows + 4
    anon = _sample_anon()
    ctl = configure(memory_limit=f"{budget_mib}MiB")
    query = _query(root, open_windows)
    keys = state_mib * 2**20 // (open_windows * VALUE_BYTES)
    rng = np.random.default_rng(5)
    want: dict[int, str] = {}
    got: dict[int, str] = {}
    peak_disk = peak_engine = 0
    t0 = time.time()
    data_epochs = data_windows * EPOCHS_PER_WINDOW
    epochs = data_epochs + open_windows + 2
    parts: list[str] = []
    for e in range(epochs):
        if e < data_epochs:
            w, part = divmod(e, EPOCHS_PER_WINDOW)
            batch = _batch(w, part, keys, rng)
            agg = batch.group_by("k").aggregate([("v", "count"), ("v", "sum"), ("s", "max")])
            parts.append(_digest(agg["k"], agg["v_count"], agg["v_sum"], agg["s_max"]))
            del agg
            if part == EPOCHS_PER_WINDOW - 1:
                want[w] = hashlib.sha256("".join(parts).encode()).hexdigest()
                parts = []
        else:
            batch = _tail_batch(e, data_windows + e - data_epochs)
        out = query.run(e, batch)
        del batch
        _emitted(out, keys, got)
        del out
        now = ctl.stats()
        peak_disk = max(peak_disk, now.disk_bytes)
        peak_engine = max(peak_engine, now.memory_bytes)
    stats = ctl.stats()
    exact = got == want
    print(
        json.dumps(
            {
                "peak_rss_mib": round(_status_mib("VmHWM"), 1),
                "peak_anon_mib": round(anon[0], 1),
                "budget_mib": budget_mib,
                "live_state_mib": round(keys * open_windows * VALUE_BYTES / 2**20, 1),
                "window_mib": round(keys * VALUE_BYTES / 2**20, 1),
                "windows": len(want),
                "windows_out": len(got),
                "exact": exact,
                "spills": stats.spills,
                "compactions": stats.compactions,
                "peak_disk_mib": round(peak_disk / 2**20, 1),
                "peak_engine_mib": round(peak_engine / 2**20, 1),
                "total_s": round(time.time() - t0, 1),
            }
        )
    )
    sys.exit(0 if exact else 1)


if __name__ == "__main__":
    main()
