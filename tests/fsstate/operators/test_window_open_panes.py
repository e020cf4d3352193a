"""The window operator's open-panes summary (``open_panes_us`` in every version's meta).

Invariants checked: after every epoch the summary is exactly the set of panes with live rows
(read back through the engine's reader), for tumbling and sliding windows, in append and update
mode, over seeded random batches in which partitions often get no input; the outputs equal the
same epochs run with the summary dropped (the scanning path), so skipping a scan never changes
what is emitted. A store written without the summary keeps scanning and stays correct.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate.inspect.snapshot import read_table
from fsstate.operators import Agg, Window, WindowAggregate, run_epoch
from fsstate.operators.windows import OPEN_PANES_META, PANE
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.store.identity import store_dir_for
from fsstate.store.partition import PartitionStore
from fsstate.store.pool import StorePool

SCHEMA = pa.schema([("k", pa.int64()), ("t", pa.timestamp("us")), ("v", pa.int64())])
SEEDS = [3, 17, 2024]


def _batches(rng: random.Random, epochs: int) -> list[list[dict[str, Any]]]:
    out, base = [], 100
    for _ in range(epochs):
        n = rng.choice([0, 0, 0, 1, 3, 8])  # most epochs of a partition see nothing
        out.append(
            [
                {"k": rng.randrange(4), "t": (base + rng.randrange(-8, 12)) * 1_000_000, "v": 1}
                for _ in range(n)
            ]
        )
        base += rng.randrange(0, 7)
    return out


class _NoSummary(WindowAggregate):
    """The operator over state written before the summary existed (the key absent)."""

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        super().declare(store, input_schema)
        store.meta.pop(OPEN_PANES_META, None)

    def _note_panes(self, panes: pa.ChunkedArray) -> None:
        pass


def _run(
    root: Path, window: Window, mode: str, batches: list[list[dict[str, Any]]], summary: bool
) -> list[list[str]]:
    aggs = [Agg("count", None, "n"), Agg("sum", "v", "s")]
    kind = WindowAggregate if summary else _NoSummary
    op = kind("w", keys=["k"], time="t", window=window, aggs=aggs, mode=mode)
    fileio, pool = FileIO(str(root)), StorePool(max_idle=4)
    outs, top = [], 0
    for epoch, rows in enumerate(batches):
        late = max(0, top - 5_000)
        top = max([top, *(r["t"] // 1000 for r in rows)])
        evict = max(0, top - 5_000)
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        res = run_epoch(op, fileio, 0, epoch, table, late_ms=late, evict_ms=evict, pool=pool)
        outs.append(sorted(repr(r) for r in res.output.to_pylist()))
        meta = read_manifest(fileio, store_dir_for("w", 0), epoch).meta
        live = read_table(fileio, "w", 0, "panes", epoch).column(PANE).to_pylist()
        if summary:
            assert meta[OPEN_PANES_META] == sorted(set(live)), (epoch, meta, live)
        else:
            assert OPEN_PANES_META not in meta
    return outs


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["append", "update"])
@pytest.mark.parametrize("window", [Window(10_000), Window(10_000, 4_000)], ids=["tumble", "slide"])
def test_summary_is_the_live_panes_and_changes_no_output(
    tmp_path: Path, seed: int, mode: str, window: Window
) -> None:
    rng = random.Random(seed)
    batches = _batches(rng, 40)
    with_summary = _run(tmp_path / "a", window, mode, batches, summary=True)
    scanning = _run(tmp_path / "b", window, mode, batches, summary=False)
    assert with_summary == scanning, f"seed {seed}"
    assert any(with_summary), f"seed {seed}: nothing emitted, the test shows nothing"
