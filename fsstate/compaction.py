"""Compaction: merge runs of a table, dropping shadowed and tombstoned rows, in the background.

A table is due when more than ``compaction_max_runs`` of its runs may hold one key (its read
depth, :func:`fsstate.storage.depth.read_depth`, from the runs' first-key-field spans), or when
it has more than ``RUNS_PER_DEPTH_MAX`` times that many runs in all
(:func:`fsstate.storage.depth.needs_merge`). Time-prefixed state (window panes keyed by their
start) writes runs of disjoint spans: a point read looks in one of them, and the runs of a
closed window are dropped whole at commit (:meth:`fsstate.tables.base.TableBase.drop_dead_runs`),
so merging them would be work thrown away.

Window choice is size-tiered: starting from the newest written run, older runs join the window
while each is at most twice the size of everything newer in it, and the window stays within
``compaction_bytes_per_round``. That keeps the number of runs logarithmic in the state size and
bounds the work of one round. When no window fits that bound while the table is due (state far
beyond the memory budget: every run is larger than a round may hold), the few adjacent runs of
smallest total size are merged by
:func:`merge_stream` instead, a few row groups at a time into a file written row group by row
group (:func:`fsstate.storage.runs.write_run_stream`): its memory depends on the row-group size and
the number of runs merged, not on their size, so the run count stays bounded.

Merging is vectorized with Arrow compute: rows are sorted by (key, ukey, seq); per grouping key
the newest clear (or covering range tombstone) sets a floor; below it rows are shadowed; per
(key, ukey) only the newest row survives. When the window starts at the oldest run ("bottom"),
tombstones themselves are dropped too, since nothing older remains for them to shadow, except
those at or above the store's tombstone horizon (``PartitionStore.tombstone_horizon_seq``): a
clean copy of an older version of the lineage catches up by reading the rows newer than its
version, so a deletion made after it must stay visible as a row. The merged file records that
horizon (``FileRef.tombstones_from_seq``); older tombstones go at a later bottom merge. Expired
rows are kept: TTL cleanup removes them together with their index entries.

Invariants:

* A merged run answers every read exactly as the runs it replaces did.
* Only runs already written to storage are merged; the merged run is written before it
  replaces them, under the table's lock, and only if the window is unchanged; otherwise the
  work is discarded (its file becomes an orphan for the store's garbage collection).
* Compaction deletes no file: files leave when no retained manifest references them.
* The background thread takes tables from a bounded queue, does one bounded round per table
  and never lets an exception escape (it is counted in ``errors`` and logged). A round of an
  idle copy whose files another process has already retired (a copy older than the retained
  versions, which will be reopened, never advanced) is counted in ``stale_skips`` and logged at
  INFO without a traceback; so is a round that fails because its store was closed meanwhile
  (counted in ``abandoned``: its directory may be gone, its output is an orphan anyway).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import queue
import threading
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from fsstate.config import EngineConfig
from fsstate.errors import FsStateError
from fsstate.format.schema import OP, OP_CLEAR, OP_DELETE, SEQ, TableSpec
from fsstate.format.segment import Segment, same_as_next, sort_batch
from fsstate.format.tombstones import RangeTombstones
from fsstate.osmem import return_memory_to_os
from fsstate.storage.depth import needs_merge
from fsstate.storage.runfile import RunContext
from fsstate.storage.runs import Run, write_run_stream
from fsstate.tables.base import TableBase

log = logging.getLogger("fsstate.compaction")


class RoundBudget(Protocol):
    """What the compactor uses of the memory controller (:mod:`fsstate.controller`)."""

    config: EngineConfig

    def reserved(self, nbytes: int) -> AbstractContextManager[None]:
        """Count ``nbytes`` of working memory in the budget while the block runs."""


def pick_window(
    runs: list[Run], max_runs: int, bytes_max: int, force: bool = False
) -> tuple[int, int] | None:
    """The ``[i, j)`` range of runs to merge next, or None if the table needs no merge.

    Among the written runs, the window is the longest contiguous range (at least two runs)
    whose decoded size fits in ``bytes_max``; ties go to the newest. Small runs therefore merge
    first and one round's work stays bounded.
    """
    w = 0
    while w < len(runs) and runs[w].ref is not None:
        w += 1
    if w < 2 or (not force and not needs_merge(runs, max_runs)):
        return None
    sizes = [r.ref.decoded_bytes if r.ref is not None else 0 for r in runs[:w]]
    best: tuple[int, int] | None = None
    j = w
    total = 0
    # sliding window from the newest end: for each end j, the smallest start i that fits
    i = w
    for j in range(w, 1, -1):
        if i > j:
            i = j
            total = 0
        if i == j:
            total = 0
        while i > 0 and total + sizes[i - 1] <= bytes_max:
            i -= 1
            total += sizes[i]
        if j - i >= 2 and (best is None or j - i > best[1] - best[0]):
            best = (i, j)
        if i < j:
            total -= sizes[j - 1]
    return best


def _same_as_prev(arrays: list[pa.Array]) -> np.ndarray:
    """Boolean array: row r equals row r-1 on every array (nulls equal nulls); row 0 False."""
    same_next = same_as_next(arrays)  # row r equals row r+1: shifted by one row
    return np.concatenate([np.zeros(min(len(same_next), 1), dtype=bool), same_next[:-1]])


def merge_segments(
    spec: TableSpec,
    segments: list[Segment],
    ranges: RangeTombstones,
    bottom: bool,
    horizon_seq: int | None = None,
) -> pa.RecordBatch:
    """Merge op rows of consecutive runs into one sorted batch (see the module docstring).

    Args:
        spec: the table's spec.
        segments: the runs' segments, oldest run first.
        ranges: the table's range tombstones.
        bottom: the window starts at the table's oldest run (tombstones may be dropped).
        horizon_seq: in a bottom merge, tombstones with ``seq >= horizon_seq`` are kept
            (None: every tombstone goes).
    """
    schema = spec.row_schema()
    batches = [s.batch for s in segments if s.num_rows]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(batches) == 1:
        batch = batches[0]
    else:
        batch = sort_batch(spec, pa.concat_batches(batches))
    n = batch.num_rows
    key_cols = batch.column("key").flatten()
    same_key = _same_as_prev(key_cols)
    starts = np.flatnonzero(~same_key)
    group = np.cumsum(~same_key) - 1
    seq = batch.column(SEQ).to_numpy()
    op = batch.column(OP).to_numpy()
    clear_seq = np.where(op == OP_CLEAR, seq, -1)
    floor = np.maximum.reduceat(clear_seq, starts)
    if ranges:
        first_keys = [c.take(pa.array(starts)) for c in key_cols]
        floor = np.maximum(floor, ranges.floor_array(first_keys))
    row_floor = floor[group]
    if spec.ukey_schema is not None:
        same_entry = same_key & _same_as_prev(batch.column("ukey").flatten())
    else:
        same_entry = same_key
    last_of_entry = np.concatenate([~same_entry[1:], np.ones(min(n, 1), dtype=bool)])
    is_clear = op == OP_CLEAR
    keep = np.where(is_clear, seq == row_floor, last_of_entry & (seq > row_floor))
    if bottom:
        tombstone = is_clear | (op == OP_DELETE)
        if horizon_seq is not None:
            tombstone &= seq < horizon_seq
        keep &= ~tombstone
    return batch.filter(pa.array(keep))


def pick_stream_window(runs: list[Run], width: int) -> tuple[int, int] | None:
    """The ``[i, j)`` range of ``width`` written runs (at least two) with the smallest decoded
    total: merged by :func:`merge_stream` when no window fits a round's byte bound."""
    w = 0
    while w < len(runs) and runs[w].ref is not None:
        w += 1
    width = min(width, w)
    if width < 2:
        return None
    sizes = [r.ref.decoded_bytes if r.ref is not None else 0 for r in runs[:w]]
    totals = [sum(sizes[i : i + width]) for i in range(w - width + 1)]
    i = min(range(len(totals)), key=lambda x: (totals[x], -x))  # ties: the newest
    return i, i + width


def merge_stream(
    spec: TableSpec,
    ctx: RunContext,
    runs: list[Run],
    ranges: RangeTombstones,
    bottom: bool,
    horizon_seq: int | None = None,
    stop: threading.Event | None = None,
) -> Iterator[pa.RecordBatch]:
    """Merge runs as :func:`merge_segments` does, a few row groups at a time, in key order.

    ``stop`` (the compactor's shutdown) is checked between steps: :class:`_Stopped` then
    abandons the merge, and the unpublished output file is discarded.

    Each run is read segment by segment (row groups of a large file). Every round sorts what
    is buffered together with one marker row per unfinished run: a copy of the last row that
    run has delivered (its frontier). Keys before the first marker's key are complete (no run
    can deliver more of them) and are merged and yielded; the rest stays buffered, and the
    runs whose frontier is that key deliver their next segment. A yielded part holds all rows
    of its keys, parts come in key order, and memory holds about two segments per run.
    """
    sources = [iter(run.segments(spec, ctx)) for run in runs]
    frontier: dict[int, pa.RecordBatch] = {}
    fresh: list[pa.RecordBatch] = []

    def pull(i: int) -> None:
        for seg in sources[i]:
            batch = seg.batch
            if batch.num_rows:
                fresh.append(batch)
                frontier[i] = batch.slice(batch.num_rows - 1, 1)
                return
        frontier.pop(i, None)  # the run is exhausted

    for i in range(len(sources)):
        pull(i)
    carry: pa.RecordBatch | None = None
    while True:
        if stop is not None and stop.is_set():
            raise _Stopped
        parts = ([carry] if carry is not None else []) + fresh
        fresh = []
        if not parts:
            return
        if not frontier:  # every run delivered everything: the rest is complete
            segments = [Segment(spec, p) for p in parts]  # several: merged and sorted
            yield merge_segments(spec, segments, ranges, bottom, horizon_seq)
            return
        owners = list(frontier)
        rows = pa.concat_batches(parts + [frontier[i] for i in owners])
        n_real = rows.num_rows - len(owners)
        mark = np.full(rows.num_rows, -1, dtype=np.int64)
        mark[n_real:] = owners
        rows = rows.append_column("_mark", pa.array(mark))
        rows = sort_batch(spec, rows)
        mark = rows.column("_mark").to_numpy()
        first_marker = int(np.flatnonzero(mark >= 0)[0])
        starts = np.flatnonzero(~_same_as_prev(rows.column("key").flatten()))
        g = int(np.searchsorted(starts, first_marker, side="right")) - 1
        q = int(starts[g])
        end = int(starts[g + 1]) if g + 1 < len(starts) else rows.num_rows
        bound_owners = [int(x) for x in mark[q:end] if x >= 0]
        body = rows.drop_columns(["_mark"])
        if q:
            done = body.slice(0, q)
            yield merge_segments(spec, [Segment(spec, done)], ranges, bottom, horizon_seq)
        rest = body.slice(q).filter(pa.array(mark[q:] < 0))
        carry = rest if rest.num_rows else None
        for i in bound_owners:
            pull(i)


class _Stopped(Exception):
    """The compactor is shutting down (the interpreter exits): the round is abandoned."""


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """The runs one compaction round merges, and the working memory it holds meanwhile.

    Attributes:
        i: first run of the window (index into the table's runs when planned).
        j: end of the window (exclusive).
        streamed: merged by :func:`merge_stream` (no in-memory window fits the round's bound).
        working_bytes: the round's transient memory, from the chosen runs' decoded sizes: an
            in-memory merge holds its window about three times (input, sorted, filtered); a
            streamed one about two segments per run, three times over, a segment being at most
            a row group (``row_group_bytes``) and at most the run.
    """

    i: int
    j: int
    streamed: bool
    working_bytes: int


def plan_round(
    runs: list[Run],
    bytes_max: int,
    max_runs: int,
    force: bool = False,
    stream_width: int = 2,
    row_group_bytes: int = 1024 * 1024,
) -> RoundPlan | None:
    """The next round of a table with ``runs``, or None if it needs none (see
    :func:`compact_table`)."""
    window = pick_window(runs, max_runs, bytes_max, force)
    streamed = window is None and needs_merge(runs, max_runs)
    if streamed:
        window = pick_stream_window(runs, stream_width)
    if window is None:
        return None
    i, j = window
    sizes = [r.ref.decoded_bytes if r.ref is not None else 0 for r in runs[i:j]]
    if streamed:
        working = 3 * sum(min(size, 2 * row_group_bytes) for size in sizes)
    else:
        working = 3 * sum(sizes)
    return RoundPlan(i, j, streamed, working)


def compact_table(
    table: TableBase,
    bytes_max: int,
    max_runs: int,
    force: bool = False,
    stream_width: int = 2,
    stop: threading.Event | None = None,
    plan: RoundPlan | None = None,
) -> int:
    """One bounded compaction round of ``table``; returns the bytes written (0: nothing done).

    A window that fits ``bytes_max`` is merged in memory; when none does while the table is
    due (:func:`fsstate.storage.depth.needs_merge`: state far beyond the budget), the
    ``stream_width`` adjacent
    runs of smallest size are merged by :func:`merge_stream`, whose memory does not depend on
    their size, so the run count stays bounded whatever the state size. ``plan`` (from
    :func:`plan_round` on the table's runs) is the round to do, if already chosen; if the
    table's runs changed since, the merge is discarded at the end as for any concurrent change.
    """
    runs = table.runs
    if plan is None:
        plan = plan_round(
            runs, bytes_max, max_runs, force, stream_width, table.ctx.config.row_group_bytes
        )
    if plan is None or plan.j > len(runs):
        return 0
    i, j, streamed = plan.i, plan.j, plan.streamed
    chosen = runs[i:j]
    if any(r.ref is None for r in chosen):  # planned on runs another round has changed since
        return 0
    spec, ctx = table.spec, table.ctx
    bottom = i == 0
    # read before the window: the store may commit meanwhile, which only raises the horizon
    horizon = table.tombstone_horizon_seq() if bottom else None
    run: Run | None
    if streamed:
        parts = merge_stream(spec, ctx, chosen, table.ranges, bottom, horizon, stop)
        run = write_run_stream(spec, ctx, table.file_prefix, parts)
    else:
        segments = [seg for run in chosen for seg in run.segments(spec, ctx)]
        merged = merge_segments(spec, segments, table.ranges, bottom, horizon)
        run = Run(Segment(spec, merged), None) if merged.num_rows else None
    refs = [r.ref for r in chosen if r.ref is not None]
    dropped = bottom or any(r.drops_tombstones for r in refs)
    # the output keeps the tombstones every input and this merge kept: the highest horizon;
    # unknown if an input dropped tombstones without recording from where (older writers)
    unknown = any(r.drops_tombstones and r.tombstones_from_seq is None for r in refs)
    horizons = [h for h in (*(r.tombstones_from_seq for r in refs), horizon) if h is not None]
    new_runs: list[Run] = []
    written = 0
    if run is not None:
        run.replaces = tuple(r.ref.path for r in chosen if r.ref is not None)
        ref = run.write(spec, ctx, table.file_prefix)
        if dropped:  # tombstones below the horizon are gone (catch-up must know)
            ref = run.ref = dataclasses.replace(
                ref,
                drops_tombstones=True,
                tombstones_from_seq=None if unknown or not horizons else max(horizons),
            )
        run.release()
        new_runs.append(run)
        written = ref.size_bytes
    with table.lock:
        current = table.runs
        if len(current) >= j and all(a is b for a, b in zip(current[i:j], chosen)):
            table.runs = current[:i] + new_runs + current[j:]
            table.compactions += 1
            return max(written, 1)
    return 0


def _retired_elsewhere(table: TableBase) -> bool:
    """Whether a run file of ``table`` that is not held in memory is gone from storage (False
    when storage cannot say: the failure is then reported as an error)."""
    fileio, store_dir = table.ctx.fileio, table.ctx.store_dir
    for run in table.runs:
        ref = run.ref
        if ref is None or run.in_memory:
            continue
        try:
            if not fileio.exists(f"{store_dir}/{ref.path}"):
                return True
        except FsStateError:
            return False
    return False


class Compactor:
    """The background compaction thread of a process (bounded queue, bounded rounds)."""

    def __init__(self, controller: RoundBudget) -> None:
        self._ctl = controller
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=controller.config.compaction_queue_max)
        self._queued: set[int] = set()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.rounds = 0
        self.bytes_written = 0
        self.errors = 0
        self.stale_skips = 0  # rounds given up because the copy's files were retired elsewhere
        self.abandoned = 0  # rounds that failed because their store was closed meanwhile

    def request(self, table: TableBase) -> bool:
        """Queue a table for a background round; False if not queued (full or disabled)."""
        if not self._ctl.config.background_compaction:
            return False
        with self._lock:
            if id(table) in self._queued:
                return False
            try:
                self._queue.put_nowait(weakref.ref(table))
            except queue.Full:
                return False
            self._queued.add(id(table))
            if self._thread is None or not self._thread.is_alive():
                if self._stopping.is_set():
                    return False  # the interpreter is exiting
                self._thread = threading.Thread(
                    target=self._loop, name="fsstate-compaction", daemon=True
                )
                self._thread.start()
                atexit.register(self.stop)
        return True

    def run_once(self, table: TableBase, force: bool = False) -> int:
        """A synchronous round (tests, explicit requests); returns the bytes written.

        The round is planned first and reserves the working memory of the runs it chose
        (:class:`RoundPlan`), not a worst case: a round of two small runs must not make the
        epoch beside it spill.
        """
        cfg = self._ctl.config
        rg_bytes = table.ctx.config.row_group_bytes
        # an in-memory round holds its window about three times: keep that transient within a
        # small share of the budget
        per_round = min(cfg.compaction_bytes_per_round, cfg.memory_limit_bytes // 16)
        # a streamed merge holds about two row groups per input run, three times over
        width = per_round // (6 * rg_bytes)
        width = max(2, min(cfg.compaction_max_runs, width))
        plan = plan_round(table.runs, per_round, cfg.compaction_max_runs, force, width, rg_bytes)
        if plan is None:
            return 0
        try:
            with self._ctl.reserved(plan.working_bytes):
                written = compact_table(
                    table, per_round, cfg.compaction_max_runs, force, width, self._stopping, plan
                )
        except _Stopped:
            return 0
        if written:
            self.rounds += 1
            self.bytes_written += written
            return_memory_to_os()
        return written

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Block until the queue is drained (tests)."""
        done = threading.Event()

        def waiter() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        done.wait(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the background thread (registered with ``atexit``): a streamed merge in
        progress is abandoned, an in-memory round finishes; queued requests are dropped."""
        self._stopping.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            ref = self._queue.get()
            if ref is None or self._stopping.is_set():
                self._queue.task_done()
                return
            table = ref()
            try:
                if table is not None:
                    with self._lock:
                        self._queued.discard(id(table))
                if table is not None and not table.closed:
                    cfg = self._ctl.config
                    if needs_merge(table.runs, cfg.compaction_max_runs):
                        progressed = self.run_once(table)
                        if progressed and needs_merge(table.runs, cfg.compaction_max_runs):
                            self.request(table)  # more to do; no progress waits for a commit
            except FsStateError as exc:
                if table is not None and table.closed:
                    # closed during the round (an evicted copy, a dropped scratch store): its
                    # files may be gone and nothing will read the merged run
                    self.abandoned += 1
                    log.info(
                        "fsstate compaction of %r abandoned: store closed (%s)", table.name, exc
                    )
                elif table is not None and _retired_elsewhere(table):
                    # an idle copy older than the retained versions: another process deleted
                    # its files; reading fails as expected and the copy will be reopened
                    self.stale_skips += 1
                    log.info("fsstate compaction skipped a stale copy of %r (%s)", table.name, exc)
                else:
                    self.errors += 1
                    log.exception("fsstate compaction round failed")
            except Exception:  # never let the thread die; count and log
                self.errors += 1
                log.exception("fsstate compaction round failed")
            finally:
                self._queue.task_done()
