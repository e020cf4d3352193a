"""The memory-bounded Spark run: state far beyond the budget, against the same query without
state (part of the ``spark_e2e`` suite in full mode).

Invariants:

* Each query runs from a fresh SparkSession, so its Python workers start clean and their
  ``ru_maxrss`` covers that query only.
* The goal is stated per worker: peak RSS against the budget, and against the no-state worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from bench.harness.common import BenchContext, Result, median
from bench.harness.spark import session
from bench.harness.spark_procs import BenchProcessor, BigValue, NoState, recorder
from bench.harness.spark_runner import Variant, read_stats, run_once, write_batch

SUITE = "spark_e2e"
MIB = 1024 * 1024
RSS_SLACK_MIB = 200.0  # worker peak RSS <= memory_limit + this
RSS_NET_SLACK_MIB = 64.0  # worker peak RSS - no-state worker peak RSS <= memory_limit + this


def _memory_query(
    ctx: BenchContext,
    root: Path,
    bench: BenchProcessor,
    proc: StatefulProcessor,
    keys: int,
    batches: int,
) -> tuple[Variant, list[dict[str, Any]]]:
    """Run ``proc`` over ``keys`` new keys in ``batches`` batches from a fresh SparkSession
    (new Python workers, so their ``ru_maxrss`` covers this query only); returns the variant
    and the stats lines of its tasks. ``bench`` is the processor that writes the lines (its
    ``stats_dir`` must be ``root / "stats"``)."""
    input_dir = root / "input"
    for d in (input_dir, root / "stats"):
        d.mkdir(parents=True, exist_ok=True)
    mode = "none" if proc is bench else "tiered"
    kind = bench.tag.rpartition("/")[2]
    variant = Variant(kind, mode, recorder(proc, bench), root / "checkpoint", bench.calls_per_key)
    per = keys // batches
    spark = session(ctx, f"fsstate-bench-{bench.tag.replace('/', '-')}")
    try:
        for b in range(batches):
            rows = write_batch(input_dir, b, np.arange(b * per, (b + 1) * per))
            run_once(spark, variant, input_dir)
            ms = variant.wall_ms.get(b, float("nan"))
            ctx.log(f"  {bench.tag} batch {b}: {rows:,} new keys, {ms / 1000:.2f} s")
    finally:
        spark.stop()
    return variant, read_stats(root / "stats")


def _state_by_worker(
    stats: list[dict[str, Any]], value_bytes: int
) -> tuple[dict[int, int], dict[int, int]]:
    """Logical state bytes (keys x ``value_bytes``; every batch brings new keys) of each
    partition at the end, and of each worker process: the sum over the partitions it served of
    their state at the last version it served (what its stores held, at most)."""
    keys: dict[tuple[int, int], int] = {}
    for x in stats:
        k = (x["partition"], x["batch"])
        keys[k] = keys.get(k, 0) + x["keys"]
    by_part: dict[int, int] = {}
    for (p, _), n in keys.items():
        by_part[p] = by_part.get(p, 0) + n * value_bytes
    last: dict[tuple[int, int], int] = {}  # (pid, partition) -> last batch served
    for x in stats:
        k = (x["pid"], x["partition"])
        last[k] = max(last.get(k, -1), x["batch"])
    by_worker: dict[int, int] = {}
    for (pid, p), b in last.items():
        held = sum(n for (q, c), n in keys.items() if q == p and c <= b) * value_bytes
        by_worker[pid] = by_worker.get(pid, 0) + held
    return by_part, by_worker


def _peaks_mib(stats: list[dict[str, Any]]) -> dict[int, float]:
    """Peak RSS of each worker process, MiB (the largest ``ru_maxrss`` of its lines)."""
    out: dict[int, float] = {}
    for x in stats:
        out[x["pid"]] = max(out.get(x["pid"], 0.0), x["maxrss_kib"] / 1024)
    return out


def memory_bounded(
    ctx: BenchContext, root: Path, limit_mib: int, keys: int, batches: int
) -> list[Result]:
    """``tiered(BigValue(), memory_limit=...)`` over ``keys`` new keys in ``batches`` batches,
    and the same query with the ``no_state`` processor, each from a fresh SparkSession."""
    from fsstate_spark import tiered

    # the same query without state: what a worker's RSS is without fsstate or its data
    base_dir = root / "no_state"
    base_bench = NoState("memory/no_state", str(base_dir / "stats"))
    _, base_stats = _memory_query(ctx, base_dir, base_bench, base_bench, keys, batches)

    tie_dir = root / "tiered"
    bench = BigValue("memory/tiered", str(tie_dir / "stats"))
    proc = tiered(
        bench,
        state_uri=str(tie_dir / "state"),
        memory_limit=f"{limit_mib}MiB",
        name="big",
    )
    variant, stats = _memory_query(ctx, tie_dir, bench, proc, keys, batches)
    on_disk = sum(p.stat().st_size for p in (tie_dir / "state").rglob("*") if p.is_file())
    return _memory_rows(MemoryRun(limit_mib, keys, batches, variant, stats, base_stats, on_disk))


@dataclass
class MemoryRun:
    """What the two memory-bounded queries left: the tiered one's progress, both queries'
    stats lines and the tiered state's bytes on disk."""

    limit_mib: int
    keys: int
    batches: int
    variant: Variant
    stats: list[dict[str, Any]]
    base_stats: list[dict[str, Any]]
    on_disk: int

    @property
    def logical(self) -> int:
        """Bytes of state the keys hold (keys x value size)."""
        return self.keys * BigValue.value_bytes


def _state_text(run: MemoryRun) -> str:
    """The state per partition and per worker against the budget (the notes of the RSS row)."""
    by_part, by_worker = _state_by_worker(run.stats, BigValue.value_bytes)
    budget, logical, workers = run.limit_mib * MIB, run.logical, len(by_worker)
    parts_txt = ", ".join(
        f"partition {p} {n / MIB:,.0f} MiB ({n / budget:.1f}x)" for p, n in sorted(by_part.items())
    )
    workers_txt = ", ".join(
        f"{n / MIB:,.0f} MiB ({n / budget:.1f}x)" for n in sorted(by_worker.values(), reverse=True)
    )
    return (
        f"state per worker (memory_limit {run.limit_mib} MiB is per worker process): by "
        f"partition at the end {parts_txt}; the most each of the {workers} workers' stores held "
        f"(the partitions it served, each at the last version it served): {workers_txt}; in "
        f"total {logical / MIB:,.0f} MiB = "
        f"{logical / budget:.1f}x one worker's budget, "
        f"{logical / (workers * budget):.1f}x the {workers} workers' budgets together"
    )


def _memory_rows(run: MemoryRun) -> list[Result]:
    """Throughput of the tiered query, both queries' worker peak RSS and their difference."""
    limit_mib, variant = run.limit_mib, run.variant
    peaks, base_peaks = _peaks_mib(run.stats), _peaks_mib(run.base_stats)
    peak, base_peak = max(peaks.values()), max(base_peaks.values())
    measured = list(range(1, run.batches))
    rates = [variant.rows[i] / variant.wall_ms[i] * 1000 for i in measured if i in variant.wall_ms]
    peaks_txt = ", ".join(f"{x:,.0f}" for x in sorted(peaks.values(), reverse=True))
    base_txt = ", ".join(f"{x:,.0f}" for x in sorted(base_peaks.values(), reverse=True))
    run_txt = (
        f"{run.keys:,} keys x {BigValue.value_bytes} B values in {run.batches} batches of "
        f"{run.keys // run.batches:,} new keys, transformWithStateInPandas, "
        f"{run.logical / MIB:,.0f} MiB of state ({run.on_disk / MIB:,.0f} MiB on disk)"
    )
    return [
        Result(
            SUITE,
            "memory-bounded tiered",
            median(rates),
            "rows/s",
            notes=f"tiered(..., memory_limit={limit_mib}MiB), {run_txt}; median of the "
            "batches after the first",
            samples=rates,
        ),
        Result(
            SUITE,
            "memory-bounded worker peak RSS",
            peak,
            "MiB",
            goal=limit_mib + RSS_SLACK_MIB,
            goal_op="<=",
            notes=f"largest ru_maxrss (taken after each task's commit) over the Python workers "
            f"of the tiered query, fresh SparkSession; per worker {peaks_txt} MiB; goal: "
            f"budget {limit_mib} MiB + {RSS_SLACK_MIB:.0f} MiB; {_state_text(run)}",
            samples=sorted(peaks.values()),
            stat="max",
        ),
        Result(
            SUITE,
            "memory-bounded no-state worker peak RSS",
            base_peak,
            "MiB",
            notes=f"the same query (same input batches, same output) with the no_state "
            f"processor, from its own fresh SparkSession: largest ru_maxrss over its Python "
            f"workers; per worker {base_txt} MiB",
            samples=sorted(base_peaks.values()),
            stat="max",
        ),
        _net_peak_row(limit_mib, peak, base_peak),
    ]


def _net_peak_row(limit_mib: int, peak: float, base_peak: float) -> Result:
    """The tiered workers' peak RSS minus the no-state workers': what state adds to a worker."""
    return Result(
        SUITE,
        "memory-bounded peak RSS over no-state",
        peak - base_peak,
        "MiB",
        goal=limit_mib + RSS_NET_SLACK_MIB,
        goal_op="<=",
        notes=f"worker peak RSS of the tiered query ({peak:,.0f} MiB) minus that of the "
        f"no-state query ({base_peak:,.0f} MiB), the largest worker of each: what state "
        f"adds to a worker; goal: budget {limit_mib} MiB + {RSS_NET_SLACK_MIB:.0f} MiB "
        "(fsstate's code, Arrow/Parquet buffers and allocator slack outside the budget)",
        stat="derived",
    )
