"""The cells of ``spark_matrix`` and the suites measured on them (``spark_floor``,
``spark_breakdown``): shapes, input batches and a running query's progress.

A cell is a query group (:data:`GROUPS`: the queries of :mod:`bench.harness.operator_queries`)
x a partition count x rows per key per batch (:data:`PER_KEY`); :func:`shapes` gives each rows
per key its batch size and key count, :func:`matrix_table` a batch, :class:`Job` one running
query of a cell and :func:`wait_batch` waits for one of its batches.

Invariants:

* Every key of a shape appears exactly ``per_key`` times in every batch (a seeded permutation,
  so the same batch on every side), with event times of batch ``b`` in ``[10 b, 10 b + 10)``
  seconds.
* :func:`wait_batch` records a batch only once its input rows are checked (and, for the
  built-in, its shuffle partitions).
* The epoch log (:data:`EPOCH_LOG_ENV`, one JSON line per committed epoch) is read as the
  workers wrote it: :func:`read_epoch_log` adds nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness.common import BenchContext
from bench.harness.datagen import key_strings
from bench.harness.operator_queries import WINDOW_MS
from bench.harness.spark import batch_progress

PER_KEY = (2, 20)
GROUPS = {"window": "windowed count", "running": "running aggregate"}
TRIGGER = "500 milliseconds"
EPOCH_LOG_ENV = "FSSTATE_EPOCH_LOG"  # fsstate.operators.runner.EPOCH_LOG_ENV


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix."""

    group: str
    partitions: int
    per_key: int

    @property
    def title(self) -> str:
        """``windowed count, 200 partitions, 20 rows/key``: the start of the cell's rows."""
        return f"{GROUPS[self.group]}, {self.partitions} partitions, {self.per_key} rows/key"

    @property
    def tag(self) -> str:
        """A short name (directories, operator names)."""
        return f"{self.group}_p{self.partitions}_r{self.per_key}"


@dataclass
class Job:
    """One running query of a cell and its progress per batch."""

    cell: Cell
    side: str
    input_dir: Path
    checkpoint: Path
    query: Any = None
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The query's name, also its fsstate operator's name (the epoch log's key)."""
        return f"{self.cell.tag}_{self.side}"

    def wall_ms(self, batch: int) -> float:
        """Spark's ``triggerExecution`` of ``batch``."""
        return float(self.progress[batch]["durationMs"]["triggerExecution"])


def shapes(ctx: BenchContext) -> dict[int, tuple[int, int]]:
    """rows per key -> (rows per batch, keys)."""
    if ctx.mode == "full":
        return {2: (100_000, 50_000), 20: (400_000, 20_000)}
    return {2: (20_000, 10_000), 20: (80_000, 4_000)}


def matrix_table(batch: int, keys: int, per_key: int) -> pa.Table:
    """Micro-batch ``batch``: every key ``per_key`` times in a seeded order, event times in
    ``[10 batch, 10 batch + 10)`` seconds."""
    rng = np.random.default_rng([batch, per_key])
    ids = rng.permutation(np.repeat(np.arange(keys, dtype=np.int64), per_key))
    rows = len(ids)
    t_ms = batch * WINDOW_MS + rng.integers(0, WINDOW_MS, rows, dtype=np.int64)
    return pa.table(
        {
            "k": key_strings(ids),
            "v": pa.array(rng.integers(0, 100, rows, dtype=np.int64)),
            "t": pa.array(t_ms * 1000, pa.timestamp("us", "UTC")),
        }
    )


def wait_batch(job: Job, batch: int, rows: int, timeout_s: float = 1800) -> None:
    """Wait for ``job``'s progress of ``batch`` and check its input rows and partitions."""
    p = batch_progress(job.query, batch, job.name, timeout_s)
    got = int(p["numInputRows"])
    if got != rows:
        raise RuntimeError(f"{job.name}: batch {batch} read {got} rows, not {rows}")
    ops = [dict(o) for o in (p["stateOperators"] or [])]
    job.progress[batch] = {"durationMs": dict(p["durationMs"]), "ops": ops}
    if job.side == "builtin":
        parts = {int(o["numShufflePartitions"]) for o in ops}
        if parts != {job.cell.partitions}:
            raise RuntimeError(f"{job.name}: {parts} shuffle partitions")


def read_epoch_log(path: Path) -> list[dict[str, Any]]:
    """The epoch lines the workers appended (:mod:`fsstate.operators.runner`)."""
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
