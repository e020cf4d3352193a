"""Driver side of the transformWithState benchmarks (``spark_e2e``, ``spark_storage``): input
batches, one query run per batch, and the figures the workers recorded
(:mod:`bench.harness.spark_procs`).

Invariants:

* Every query reads one Parquet file per micro-batch (``maxFilesPerTrigger=1``, distinct
  mtimes) with an ``availableNow`` trigger and a ``noop`` sink: one query run per batch, so a
  run's CPU time is the batch's.
* Wall times are Spark's own ``triggerExecution`` of each batch; worker figures are summed per
  batch over every task of a variant, in every worker process.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from bench.harness.datagen import key_strings
from bench.harness.spark_procs import INPUT_SCHEMA, OUTPUT_SCHEMA


@dataclass
class Variant:
    """One streaming query of the comparison."""

    kind: str
    mode: str  # "none", "native" or "tiered"
    processor: StatefulProcessor
    checkpoint: Path
    calls_per_key: int
    flavour: str = "pandas"  # "pandas" (transformWithStateInPandas) or "row" (transformWithState)
    wall_ms: dict[int, float] = field(default_factory=dict)  # batch id -> triggerExecution
    rows: dict[int, int] = field(default_factory=dict)
    run_s: list[float] = field(default_factory=list)
    cpu_s: dict[int, float] = field(default_factory=dict)  # batch id -> CPU s of the tree

    @property
    def tag(self) -> str:
        """``flavour/kind/mode``."""
        return variant_tag(self.flavour, self.kind, self.mode)


def variant_tag(flavour: str, kind: str, mode: str) -> str:
    """``flavour/kind/mode``: a variant's name in the stats lines and the logs."""
    return f"{flavour}/{kind}/{mode}"


@dataclass(frozen=True)
class Config:
    """One key-space size.

    Attributes:
        kinds: workloads of the pandas flavour (``no_state`` first: the baseline).
        row_kinds: workloads of the Row flavour (empty: none; ``no_state`` first).
        warm_batches: batches after the load batch that run like the others but are not
            measured (the Python workers meet the partitions they did not load).
    """

    label: str
    keys: int
    rows_per_batch: int
    measured_batches: int
    kinds: tuple[str, ...]
    row_kinds: tuple[str, ...] = ()
    warm_batches: int = 1

    def flavours(self) -> list[tuple[str, tuple[str, ...]]]:
        """``(flavour, kinds)`` of each flavour that runs."""
        return [(f, k) for f, k in (("pandas", self.kinds), ("row", self.row_kinds)) if k]


def write_batch(input_dir: Path, batch: int, ids: np.ndarray[Any, Any]) -> int:
    """Write micro-batch ``batch`` (one row per id) with a distinct, increasing mtime."""
    table = pa.table(
        {"k": key_strings(ids), "v": pa.array(ids.astype(np.int64) + batch, pa.int64())}
    )
    path = input_dir / f"batch-{batch:05d}.parquet"
    pq.write_table(table, path)
    t = 1_600_000_000 + 10 * batch
    os.utime(path, (t, t))
    return len(ids)


def run_once(spark: Any, variant: Variant, input_dir: Path) -> None:
    """Run ``variant``'s query until it has processed every file present; record progress."""
    frame = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(input_dir))
    )
    grouped = frame.groupBy("k")
    if variant.flavour == "row":
        out = grouped.transformWithState(variant.processor, OUTPUT_SCHEMA, "Update", "None")
    else:
        out = grouped.transformWithStateInPandas(variant.processor, OUTPUT_SCHEMA, "Update", "None")
    done = set(variant.wall_ms)
    c0 = _tree_cpu_s()
    t0 = time.perf_counter()
    query = (
        out.writeStream.format("noop")
        .option("checkpointLocation", str(variant.checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(900)
    finally:
        query.stop()
    variant.run_s.append(time.perf_counter() - t0)
    cpu = _tree_cpu_s() - c0
    exc = query.exception()
    if exc is not None:
        raise RuntimeError(f"query {variant.tag} failed: {exc}")
    for p in query.recentProgress:
        rows = int(p.get("numInputRows") or 0)
        if rows:
            variant.wall_ms[int(p["batchId"])] = float(p["durationMs"]["triggerExecution"])
            variant.rows[int(p["batchId"])] = rows
    new = [b for b in variant.wall_ms if b not in done]
    if len(new) == 1:  # one micro-batch per query run: the run's CPU time is the batch's
        variant.cpu_s[new[0]] = cpu


def _tree_cpu_s() -> float:
    """CPU seconds of this process's descendants (the JVM, Python daemon and workers)."""
    import psutil

    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def read_stats(stats_dir: Path) -> list[dict[str, Any]]:
    """Stats lines of every worker (one per task, see
    :class:`bench.harness.spark_procs.Recorder`)."""
    lines: list[dict[str, Any]] = []
    for p in stats_dir.glob("*.jsonl"):
        lines += [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    return lines


def check_loops(stats: list[dict[str, Any]], variants: list[Variant]) -> None:
    """Every task of a ``tiered`` variant ran fsstate's keyed loop (its stats lines say
    ``"loop": "fsstate"``).

    Raises:
        RuntimeError: naming the variants with tasks on PySpark's loop.
    """
    tiered = {v.tag for v in variants if v.mode == "tiered"}
    stock = sorted({x["tag"] for x in stats if x["tag"] in tiered and x.get("loop") != "fsstate"})
    if stock:
        raise RuntimeError(
            f"tiered() tasks of {stock} ran on PySpark's own keyed loop, not fsstate's: is "
            "spark.python.worker.module=pyspark_fsstate.worker in conf/spark-defaults.conf? "
            "(the worker log says why: bench/results/tmp/spark-jvm.log)"
        )


@dataclass
class BatchStats:
    """The tasks of one variant in one micro-batch, summed (from their stats lines)."""

    tasks: int = 0
    partitions: set[int] = field(default_factory=set)
    keys: int = 0
    state_s: float = 0.0
    acquire_s: float = 0.0
    finish_s: float = 0.0
    init_s: float = 0.0
    close_s: float = 0.0
    restored: int = 0

    @property
    def fsstate_s(self) -> float:
        """State calls + getting the stores + committing them (tiered; calls only if native)."""
        return self.state_s + self.acquire_s + self.finish_s


def batch_stats(
    stats: list[dict[str, Any]], tag: str, measured: list[int]
) -> dict[int, BatchStats]:
    """Per measured batch, the sums over every task of variant ``tag`` (all its processes)."""
    out: dict[int, BatchStats] = {}
    for x in stats:
        if x["tag"] != tag or x["batch"] not in measured:
            continue
        bs = out.setdefault(x["batch"], BatchStats())
        bs.tasks += 1
        bs.partitions.add(x["partition"])
        bs.keys += x["keys"]
        bs.state_s += x["state_s"]
        bs.acquire_s += x.get("acquire_s", 0.0)
        bs.finish_s += x.get("finish_s", 0.0)
        bs.init_s += x.get("init_s", 0.0)
        bs.close_s += x.get("close_s", 0.0)
        bs.restored += x.get("store") == "restored"
    return out


def paired(a: Variant, b: Variant, batches: list[int]) -> list[tuple[float, float, int]]:
    """(wall a, wall b, rows) in ms for the batches both measured."""
    return [
        (a.wall_ms[i], b.wall_ms[i], a.rows[i])
        for i in batches
        if i in a.wall_ms and i in b.wall_ms
    ]
