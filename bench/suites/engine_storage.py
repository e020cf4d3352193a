"""Engine benchmarks that go through storage: commits, write amplification, opening a large
store, and a partition moving between workers (the ``commit``, ``write_amp``, ``open`` and
``move`` groups of the engine suite; :mod:`bench.suites.engine` runs them, this module does not).

Invariants:

* This module imports no other module of the suite: :mod:`bench.suites.engine` imports the
  group functions, it and :mod:`bench.suites.engine_batch` the shared pieces (``SUITE``,
  ``OPERATOR``, ``VALUE_WIDTH``, :class:`KeyCell`, :class:`Scratch`, :func:`rate_result`)
  from here, so the imports only go one way.
* Every result row carries ``SUITE`` (``"engine"``): these rows belong to the engine suite's
  file, in the order :func:`bench.suites.engine.run` calls the groups.
* Each group builds its stores under the ``Scratch`` root it is given (removed by the
  caller at the end), except the large store of ``open``, which is cached under
  ``<tmp_dir>/store-<size>`` with a ``bench_meta.json`` and rebuilt whenever its format
  (``BIG_STORE_FORMAT``), its size or the fsstate sources (:func:`engine_fingerprint`) change.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import json
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness.common import (
    BenchContext,
    Result,
    median,
    percentile,
    rates,
    sample,
    stopwatch,
    time_call,
)
from bench.harness.datagen import (
    KEY_SCHEMA,
    VALUE_SCHEMA,
    key_of,
    key_table,
    python_keys,
    python_values,
    value_table,
)
from fsstate import FsStateError, PartitionStore, StoreConfig

SUITE = "engine"
OPERATOR = "bench"
VALUE_WIDTH = 32  # characters of the string value field in the micro-benchmarks

# goals (see docs/benchmarks.md)
GOAL_COMMIT_MS = 2.0
GOAL_WRITE_AMP = 1.5
GOAL_OPEN_MS = 50.0

# the cached large store: bump when the layout of the generated data changes
BIG_STORE_FORMAT = 1
BIG_VALUE_WIDTH = 96
MIB = 1024 * 1024


def rate_result(
    name: str,
    count: int,
    eng: list[float],
    base: list[float] | None,
    goal: float | None,
    unit: str,
    notes: str,
) -> Result:
    """A throughput row: ``count`` operations per second for each engine sample, against
    the baseline's median rate (None without a baseline)."""
    vals = rates(count, eng)
    return Result(
        SUITE,
        name,
        median(vals),
        unit,
        goal=goal,
        goal_op=">=",
        baseline_value=median(rates(count, base)) if base else None,
        notes=notes,
        samples=vals,
    )


class KeyCell:
    """A current-key cell, as the Spark adapter's key binding (the key-cursor accessors'
    ``cursor``)."""

    key: Any = None


class Scratch:
    """Fresh store directories under one scratch root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)

    def store(self) -> PartitionStore:
        """A new store in a directory of its own."""
        self.count += 1
        return PartitionStore.open(str(self.root / f"s{self.count}"), OPERATOR, 0)

    def cleanup(self) -> None:
        """Remove the scratch root."""
        shutil.rmtree(self.root, ignore_errors=True)


# -- commit ---------------------------------------------------------------------------------------
def bench_commit(ctx: BenchContext, scratch: Scratch, rng: np.random.Generator) -> list[Result]:
    """Median latency of committing a store in which nothing changed, durable (fsync, the
    default) and with ``StoreConfig(fsync=False)``, the two stores taking turns."""
    n = 100_000
    commits = ctx.pick(150, 300)
    stores = [_committed_store(scratch, rng, n, fsync) for fsync in (True, False)]
    times: list[list[float]] = [[], []]
    for v in range(2, 2 + commits):
        order = (0, 1) if v % 2 else (1, 0)
        for i in order:
            st = stores[i]
            times[i].append(time_call(lambda st=st, v=v: st.commit(v), collect=False) * 1000)  # type: ignore[misc]
    for st in stores:
        st.close()
    what = (
        f"{commits} commits of a store with 3 tables ({n:,} value rows, 10k list and 10k map "
        "entries), nothing changed"
    )
    durable, scratch_times = times
    return [
        Result(
            SUITE,
            "commit untouched",
            median(durable),
            "ms",
            goal=GOAL_COMMIT_MS,
            goal_op="<=",
            notes=(
                f"{what}; durable (fsync of the manifest and its directory); p95 "
                f"{percentile(durable, 0.95):.2f} ms, max {max(durable):.2f} ms (old versions "
                "are pruned past 100 retained)"
            ),
            samples=durable,
        ),
        Result(
            SUITE,
            "commit untouched, fsync off",
            median(scratch_times),
            "ms",
            notes=(
                f"{what}; StoreConfig(fsync=False), commits alternating with the durable "
                f"store's; p95 {percentile(scratch_times, 0.95):.2f} ms"
            ),
            samples=scratch_times,
        ),
    ]


def _committed_store(
    scratch: Scratch, rng: np.random.Generator, n: int, fsync: bool
) -> PartitionStore:
    """A store of 3 tables (``n`` value rows, 10k list and 10k map entries) committed at
    version 1, with clean views loaded by reads (they must not cost a commit anything)."""
    count = scratch.count = scratch.count + 1
    st = PartitionStore.open(
        str(scratch.root / f"s{count}"), OPERATOR, 0, None, StoreConfig(fsync=fsync)
    )
    vt = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    vt.put_many(key_table(range(n)), value_table(rng, n, VALUE_WIDTH))
    lt = st.list_table("l", pa.schema([pa.field("x", pa.int64())]), KEY_SCHEMA)
    mt = st.map_table(
        "m",
        pa.schema([pa.field("u", pa.string())]),
        pa.schema([pa.field("x", pa.int64())]),
        KEY_SCHEMA,
    )
    for i in range(1000):
        k = key_of(i)
        for j in range(10):
            lt.append(k, (j,))
            mt.update(k, (f"u{j}",), (j,))
    st.commit(1)
    for i in range(0, n, 10):  # clean views loaded by reads must not cost anything either
        vt.get(key_of(i))
    return st


# -- write amplification ------------------------------------------------------------------------
def bench_write_amp(ctx: BenchContext, scratch: Scratch, rng: np.random.Generator) -> list[Result]:
    """Bytes written per commit over the Arrow bytes of the rows changed since the last one."""
    base_rows = 200_000
    repeat = ctx.pick(2, 3)
    comp_before = _compaction_bytes()
    st = scratch.store()
    vt = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    vt.put_many(key_table(range(base_rows)), value_table(rng, base_rows, VALUE_WIDTH))
    st.commit(1)
    version = 1
    out: list[Result] = []
    for n, path in ((1_000, "update"), (100_000, "update"), (100_000, "put_many")):
        ratios = []
        written = changed = files = 0
        for _ in range(repeat):
            kt = key_table(rng.choice(base_rows, size=n, replace=False))
            vtab = value_table(rng, n, VALUE_WIDTH)
            if path == "update":
                for k, v in zip(python_keys(kt), python_values(vtab), strict=True):
                    vt.update(k, v)
            else:
                vt.put_many(kt, vtab)
            version += 1
            info = st.commit(version)
            changed = kt.nbytes + vtab.nbytes
            written, files = info.bytes_written, info.files_written
            ratios.append(written / changed)
        out.append(
            Result(
                SUITE,
                f"write_amp {n // 1000}k rows ({path})",
                median(ratios),
                "x",
                goal=GOAL_WRITE_AMP,
                goal_op="<=",
                notes=(
                    f"{n:,} of {base_rows:,} keys changed by {path} then commit; last sample: "
                    f"{written:,} B in {files} file(s) for {changed:,} B of Arrow key+value "
                    "data; manifest bytes not counted"
                ),
                samples=ratios,
            )
        )
    comp = _compaction_bytes() - comp_before
    for r in out:
        r.notes += f"; background compaction wrote {comp:,} B during the whole group"
    st.close()
    return out


def _compaction_bytes() -> int:
    """Bytes written by the process's background compactor so far (0 if unknown)."""
    try:
        from fsstate.controller import get_controller
    except ImportError:
        return 0
    return int(get_controller().stats().compaction_bytes_written)


# -- opening a large store ----------------------------------------------------------------------
def _size_label(nbytes: int) -> str:
    if nbytes % (1024 * MIB) == 0:
        return f"{nbytes // (1024 * MIB)}GiB"
    return f"{nbytes // MIB}MiB"


def open_big(path: Path, version: int) -> tuple[PartitionStore, Any]:
    """Open the cached large store at ``version``: the store and its value table."""
    st = PartitionStore.open(str(path), OPERATOR, 0, version)
    return st, st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)


def engine_fingerprint() -> str:
    """Hash of the fsstate sources: a cached store is rebuilt whenever the engine changes."""
    import fsstate

    h = hashlib.sha256()
    root = Path(fsstate.__file__).resolve().parent
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def load_big_meta(path: Path, target: int) -> dict[str, Any] | None:
    """The ``bench_meta.json`` of the store cached at ``path`` if it can be reused (same
    format, size ``target`` and engine sources, and it opens and reads), else None."""
    meta_file = path / "bench_meta.json"
    try:
        meta: dict[str, Any] = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        meta.get("format") != BIG_STORE_FORMAT
        or meta.get("target_bytes") != target
        or meta.get("engine") != engine_fingerprint()
    ):
        return None
    try:  # the engine may have changed its format since the cache was built
        st, vt = open_big(path, int(meta["version"]))
        probe = vt.get(key_of(int(meta["rows"]) - 1))
        st.close()
    except (FsStateError, KeyError, ValueError, OSError):
        return None
    return meta if probe is not None else None


def build_big_store(ctx: BenchContext, target: int, batch_rows: int) -> dict[str, Any]:
    """Build (or reuse) a store whose data files total at least ``target`` bytes.

    Rows are written with ``put_many`` in batches of ``batch_rows`` keys, one commit per batch,
    so the store holds one Parquet run per batch. The directory is cached under
    ``<tmp_dir>/store-<size>`` with a ``bench_meta.json`` describing it, and rebuilt when the
    fsstate sources change (:func:`engine_fingerprint`), so figures always reflect the current
    file format. Any compaction the engine wants is run before the last commit.
    """
    path = ctx.tmp_dir / f"store-{_size_label(target)}"
    meta = load_big_meta(path, target)
    if meta is not None:
        meta["cached"] = True
        ctx.log(f"  reusing cached {_size_label(target)} store at {path}")
        return meta
    shutil.rmtree(path, ignore_errors=True)
    ctx.log(f"  building a {_size_label(target)} store at {path} (cached for later runs)")
    rng = np.random.default_rng(12345)
    st = PartitionStore.open(str(path), OPERATOR, 0)
    vt = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    disk = logical = rows = 0
    batches = 0
    with stopwatch() as total:
        while disk < target:
            kt = key_table(range(rows, rows + batch_rows))
            vtab = value_table(rng, batch_rows, BIG_VALUE_WIDTH)
            vt.put_many(kt, vtab)
            batches += 1
            info = st.commit(batches)
            disk += info.bytes_written
            logical += kt.nbytes + vtab.nbytes
            rows += batch_rows
            del kt, vtab
        runs_before = len(vt.runs)
        if hasattr(st, "compact") and st.compact():
            batches += 1
            st.commit(batches)
    stats = st.stats()
    st.close()
    meta = {
        "format": BIG_STORE_FORMAT,
        "engine": engine_fingerprint(),
        "target_bytes": target,
        "version": batches,
        "batches": batches,
        "batch_rows": batch_rows,
        "rows": rows,
        "disk_bytes": stats.disk_bytes,
        "runs_before_compaction": runs_before,
        "runs": stats.tables["v"].runs if "v" in stats.tables else runs_before,
        "logical_bytes": logical,
        "build_seconds": total[0],
        "built_at": datetime.datetime.now().isoformat(timespec="seconds"),
        "cached": False,
    }
    (path / "bench_meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    ctx.log(f"  built {rows:,} rows, {stats.disk_bytes / MIB:,.0f} MiB in {total[0]:.1f} s")
    return meta


def bench_open(ctx: BenchContext, scratch: Scratch, rng: np.random.Generator) -> list[Result]:
    """Open time of a large store, and the latency of the first read of a cold key."""
    target = ctx.pick(100 * MIB, 1024 * MIB)
    batch_rows = ctx.pick(250_000, 1_000_000)
    label = _size_label(target)
    meta = build_big_store(ctx, target, batch_rows)
    path = ctx.tmp_dir / f"store-{label}"
    version = int(meta["version"])
    size = f"{meta['disk_bytes'] / MIB:,.0f} MiB on disk, {meta['rows']:,} rows, "
    size += f"{meta.get('runs', meta['batches'])} runs"
    out = [
        Result(
            SUITE,
            f"open build {label} store",
            float(meta["build_seconds"]),
            "s",
            notes=(
                f"put_many of {meta['batch_rows']:,} rows + commit per run; {size}; logical "
                f"Arrow bytes {meta['logical_bytes'] / MIB:,.0f} MiB"
                + (f"; cached, built {meta['built_at']}" if meta.get("cached") else "")
            ),
        )
    ]

    def open_and_declare() -> None:
        st, _ = open_big(path, version)
        st.close()

    times = [t * 1000 for t in sample(open_and_declare, repeat=ctx.pick(10, 20), warmup=2)]
    out.append(
        Result(
            SUITE,
            f"open {label} store",
            median(times),
            "ms",
            goal=GOAL_OPEN_MS,
            goal_op="<=",
            notes=f"PartitionStore.open(version) + value_table declaration; {size}",
            samples=times,
        )
    )
    return out + _first_get_rows(ctx, path, version, meta)


def _first_get_rows(
    ctx: BenchContext, path: Path, version: int, meta: dict[str, Any]
) -> list[Result]:
    """The first ``get`` after opening the large store, of a key in its newest run and of one
    in its oldest."""
    out = []
    cases = (
        ("newest run", int(meta["rows"]) - 7, ctx.pick(3, 3)),
        ("oldest run", 7, ctx.pick(2, 1)),
    )
    for where, key_id, reps in cases:
        times = []
        for _ in range(reps):
            st, vt = open_big(path, version)
            key = key_of(key_id)
            times.append(time_call(lambda vt=vt, key=key: vt.get(key)) * 1000)  # type: ignore[misc]
            st.close()
            del st, vt
            gc.collect()
        out.append(
            Result(
                SUITE,
                f"open first get, key in {where}",
                median(times),
                "ms",
                notes=(
                    f"first ValueTable.get after open, key in the {where} of "
                    f"{meta.get('runs', meta['batches'])}; "
                    "OS page cache warm"
                ),
                samples=times,
            )
        )
    return out


# -- a partition moving between workers ------------------------------------------------------
MOVE_MODES = ("reopen", "refresh")


def bench_move(ctx: BenchContext, scratch: Scratch, rng: np.random.Generator) -> list[Result]:
    """A Spark-like batch on a store whose partition comes back from another worker.

    Two store objects of one partition play two Python workers taking turns (what Spark does
    with a partition almost every micro-batch). Each batch gets its store (``reopen``: open
    the previous version from storage, the only way before catch-up; ``refresh``: advance the
    worker's own older copy with :meth:`PartitionStore.refresh`), does ``get`` + ``update`` on
    ``touched`` random keys and commits. Both variants run on the same store, batch by batch.
    """
    out: list[Result] = []
    touched = 2_500
    for n in ctx.pick((20_000, 100_000), (20_000, 200_000)):
        move = _Move(scratch, value_table(rng, n, VALUE_WIDTH), n)
        for b in range(1, 1 + ctx.pick(8, 16)):
            worker = b % 2
            keys = [key_of(int(i)) for i in rng.choice(n, size=touched, replace=False)]
            for mode in MOVE_MODES if b % 2 else MOVE_MODES[::-1]:
                seconds = time_call(partial(move.batch, mode, worker, keys), collect=False)
                if b > 2:  # each worker's first batch opens from storage in both variants
                    move.per_call[mode].append(seconds * 1e6 / (2 * touched))
        move.close()
        out += _move_rows(n, touched, move.per_call)
    return out


class _Move:
    """One partition's store per variant (same content), and the copies two workers hold."""

    def __init__(self, scratch: Scratch, values: pa.Table, n: int) -> None:
        self.roots: dict[str, Any] = {}
        for mode in MOVE_MODES:  # one store per variant, same content
            st = scratch.store()
            st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA).put_many(key_table(range(n)), values)
            st.commit(0)
            st.close()
            self.roots[mode] = st.fileio
        self.versions = dict.fromkeys(MOVE_MODES, 0)
        self.copies: dict[str, list[PartitionStore | None]] = {m: [None, None] for m in MOVE_MODES}
        self.per_call: dict[str, list[float]] = {m: [] for m in MOVE_MODES}

    def batch(self, mode: str, worker: int, keys: list[Any]) -> None:
        """One batch of ``worker`` in variant ``mode``: get the store, the calls, commit."""
        version = self.versions[mode]
        mine = self.copies[mode][worker]
        if mine is None or mode == "reopen" or not mine.refresh(version):
            if mine is not None:
                mine.close()
            mine = PartitionStore.open(self.roots[mode], OPERATOR, 0, version)
        t = mine.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
        for k in keys:
            old = t.get(k)
            t.update(k, ((old[0] if old else 0) + 1, "x"))
        mine.commit(version + 1)
        self.versions[mode] = version + 1
        self.copies[mode][worker] = mine

    def close(self) -> None:
        """Close every copy the workers hold."""
        for pair in self.copies.values():
            for c in pair:
                if c is not None:
                    c.close()


def _move_rows(n: int, touched: int, per_call: dict[str, list[float]]) -> list[Result]:
    """µs per call of each variant, and reopen over refresh."""
    label = f"{n // 1000}k keys"
    common = (
        f"{touched:,} of {n:,} keys per batch (get + update), two workers taking turns; "
        "whole batch: get the store, the calls, commit"
    )
    how = {
        "reopen": "opens the version from storage (warm-up on the first miss)",
        "refresh": "catches the worker's copy up (PartitionStore.refresh)",
    }
    out = [
        Result(
            SUITE,
            f"moved batch {label}, {mode}",
            median(per_call[mode]),
            "µs/call",
            notes=f"{common}; {how[mode]}",
            samples=per_call[mode],
        )
        for mode in MOVE_MODES
    ]
    out.append(
        Result(
            SUITE,
            f"moved batch {label}, reopen/refresh",
            median(per_call["reopen"]) / median(per_call["refresh"]),
            "x",
            notes="how much cheaper a batch is when the worker catches its copy up",
        )
    )
    return out
