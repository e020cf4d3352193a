"""Watermark cleanup of the whole-batch operators, without Spark: what expiring 1% costs.

Workload (one partition, :func:`fsstate.operators.run_epoch` on local disk): a
:class:`fsstate.operators.Deduplicate` holding ``LIVE_KEYS`` live keys (1,000,000 in full mode),
loaded by one first epoch with the keys' event times spread over 100 one-second slots. Every
later epoch brings ``ROWS_PER_EPOCH`` rows (100,000): the keys of one new slot (1% of the live
keys) and duplicates of live keys, and its watermark expires the oldest slot, 1% of the state.

Two stores run the same epochs, interleaved epoch by epoch (the first of the two alternating):
``expiring``, with the watermark above, and ``kept``, whose watermark never reaches a key.
Rows:

* ``cleanup share (in the operator)``: per epoch, the time of the operator's eviction step
  (index range read, lookups, deletes, the range tombstone) over the epoch's whole time
  (acquire, operator, commit); goal <= 5%. The delete rows the eviction makes are written by
  the commit: in the denominator, not in the numerator.

``kept`` checks the output and keeps the comparison honest about order effects; it is not
subtracted from ``expiring`` (an earlier "paired epochs" row did that, but the kept store never
loses keys, so the two stores do not do the same work: dropped).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.harness.common import BenchContext, Result, median, spread_text
from bench.harness.datagen import key_strings

SUITE = "operators"
GOAL_CLEANUP_SHARE = 0.05
SLOTS = 100  # live slots; one expires per epoch
SLOT_MS = 1_000
BASE_MS = 1_000_000  # event time of slot 0 (above the initial watermark 0)


def _sizes(ctx: BenchContext) -> tuple[int, int, int]:
    """(live keys, rows per epoch, measured epochs)."""
    if ctx.mode == "full":
        return 1_000_000, 100_000, 8
    return 200_000, 20_000, 4


def _epoch_rows(epoch: int, live: int, rows: int, rng: np.random.Generator) -> pa.Table:
    """Epoch ``epoch >= 1``: the keys of slot ``SLOTS - 1 + epoch`` and duplicates of live keys."""
    per_slot = live // SLOTS
    slot = SLOTS - 1 + epoch
    new_ids = np.arange(slot * per_slot, (slot + 1) * per_slot, dtype=np.int64)
    lo = epoch * per_slot  # the live slots are epoch .. slot
    dups = rng.integers(lo, slot * per_slot, rows - per_slot, dtype=np.int64)
    ids = np.concatenate([new_ids, dups])
    t = np.full(len(ids), (BASE_MS + slot * SLOT_MS) * 1000, dtype=np.int64)  # never late
    return pa.table({"k": key_strings(ids), "t": pa.array(t, pa.timestamp("us", "UTC"))})


def _first_rows(live: int) -> pa.Table:
    per_slot = live // SLOTS
    ids = np.arange(live, dtype=np.int64)
    t = (BASE_MS + (ids // per_slot) * SLOT_MS) * 1000
    return pa.table({"k": key_strings(ids), "t": pa.array(t, pa.timestamp("us", "UTC"))})


class _Variant:
    """One store and its timings."""

    def __init__(self, root: Path, expiring: bool) -> None:
        from fsstate.operators import Deduplicate
        from fsstate.storage.fileio import FileIO

        self.expiring = expiring
        self.fileio = FileIO(str(root))
        self.op = Deduplicate("dedup", keys=["k"], time="t", delay_ms=SLOTS * SLOT_MS)
        self.evict_s = 0.0
        inner = self.op._evict

        def timed(through_us: int) -> None:
            t0 = time.perf_counter()
            inner(through_us)
            self.evict_s += time.perf_counter() - t0

        self.op._evict = timed  # type: ignore[method-assign]
        self.epoch_s: dict[int, float] = {}
        self.evict_by_epoch: dict[int, float] = {}
        self.emitted: dict[int, int] = {}

    def run(self, epoch: int, batch: pa.Table) -> None:
        from fsstate.operators import run_epoch

        # epoch e expires slot e - 1: keys with t + delay <= evict
        delay_ms = SLOTS * SLOT_MS
        evict_ms = BASE_MS + (epoch - 1) * SLOT_MS + delay_ms if self.expiring and epoch else 0
        late_ms = BASE_MS + (epoch - 2) * SLOT_MS + delay_ms if self.expiring and epoch > 1 else 0
        self.evict_s = 0.0
        t0 = time.perf_counter()
        result = run_epoch(
            self.op, self.fileio, 0, epoch, batch, late_ms=late_ms, evict_ms=evict_ms
        )
        self.epoch_s[epoch] = time.perf_counter() - t0
        self.evict_by_epoch[epoch] = self.evict_s
        self.emitted[epoch] = result.output.num_rows

    def check(self, live: int, last_epoch: int) -> None:
        """Raise unless the state holds exactly the keys it should: the expiring store lost
        slots ``0 .. last_epoch - 1`` and kept the others; the kept store lost none."""
        per_slot = live // SLOTS
        slots = SLOTS + last_epoch
        found = self.op.seen.get_many(
            pa.table({"k": key_strings(np.arange(slots * per_slot, dtype=np.int64))})
        ).column("_found")
        got = np.asarray(found.to_numpy(zero_copy_only=False), bool).reshape(slots, per_slot)
        gone = last_epoch if self.expiring else 0
        want = np.arange(slots)[:, None] >= gone
        if not (got == want).all():
            raise AssertionError(
                f"dedup state of {'expiring' if self.expiring else 'kept'} "
                f"is wrong after epoch {last_epoch}"
            )


def run(ctx: BenchContext) -> list[Result]:
    """Measure the cleanup share of a dedup epoch with 1% of the keys expiring."""
    from fsstate.store.pool import store_pool

    live, rows, epochs = _sizes(ctx)
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    rng = np.random.default_rng(7)
    try:
        variants = [_Variant(scratch / "expiring", True), _Variant(scratch / "kept", False)]
        first = _first_rows(live)
        for v in variants:
            v.run(0, first)
        ctx.log(f"  loaded {live:,} keys in each store")
        for e in range(1, epochs + 2):  # epoch 1 is a warm-up
            batch = _epoch_rows(e, live, rows, rng)
            order = variants if e % 2 else variants[::-1]
            for v in order:
                v.run(e, batch)
            exp, kept = variants
            if exp.emitted[e] != live // SLOTS or kept.emitted[e] != live // SLOTS:
                raise AssertionError(f"epoch {e}: the new keys are not exactly the output")
            ctx.log(
                f"  epoch {e}: expiring {exp.epoch_s[e]:.3f} s (evict {exp.evict_by_epoch[e]:.3f}"
                f" s), kept {kept.epoch_s[e]:.3f} s"
            )
        for v in variants:
            v.check(live, epochs + 1)
        store_pool().clear()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _results(variants, live, rows, epochs)


def _results(variants: list[_Variant], live: int, rows: int, epochs: int) -> list[Result]:
    exp = variants[0]
    measured = list(range(2, epochs + 2))
    share = [exp.evict_by_epoch[e] / exp.epoch_s[e] for e in measured]
    notes = (
        f"Deduplicate on one partition, {live:,} live keys, {rows:,} rows per epoch, "
        f"{live // SLOTS:,} keys (1%) expiring per epoch (checked: exactly those are gone); "
        f"median of {len(measured)} epochs ({spread_text(share, lambda x: f'{100 * x:.1f}%')}); "
        f"epoch = acquire + operator + commit; the tombstones the eviction makes are written "
        f"by the commit (in the epoch, not in the share) "
        f"({median([exp.epoch_s[e] for e in measured]):.3f} s median)"
    )
    return [
        Result(
            suite=SUITE,
            name="cleanup share (in the operator)",
            value=median(share),
            unit="fraction",
            goal=GOAL_CLEANUP_SHARE,
            goal_op="<=",
            notes=notes,
            samples=share,
        ),
        Result(
            suite=SUITE,
            name="dedup epoch rows/s (1% expiring)",
            value=median([rows / exp.epoch_s[e] for e in measured]),
            unit="rows/s",
            notes=f"{rows:,} rows per epoch against {live:,} live keys, commit included",
            samples=[rows / exp.epoch_s[e] for e in measured],
        ),
    ]
