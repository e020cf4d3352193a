"""Engine micro-benchmarks: fsstate tables measured side by side with a plain Python dict.

Groups (each selectable with ``--only``; a group's rows all start with its name):

* ``hot``: ``ValueTable.get`` / ``update`` on keys whose views are in memory (1 thread).
* ``batch``: ``put_many`` / ``get_many`` with Arrow tables: ``put_many`` counted with the
  work it defers (through the first ``get_many``, through a ``commit``) and alone (info), and
  ``get_many`` (runs in memory, hot clean and dirty views, first touch).
* ``commit``: commit of an untouched store (nothing changed since the last commit).
* ``write_amp``: bytes a commit writes over the Arrow bytes of the rows that changed.
* ``open``: opening a large committed store (cached under ``bench/results/tmp``) and the
  first read of a cold key.
* ``collections``: hot ``ListTable.append`` and ``MapTable.update``.

Every group builds its own stores under a scratch directory that is removed at the end.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import json
import os
import shutil
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import (
    BenchContext,
    Result,
    median,
    percentile,
    rates,
    sample,
    sample_pair,
    stopwatch,
    time_call,
)
from bench.datagen import (
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
GOAL_HOT_GET = 1_000_000.0
GOAL_HOT_UPDATE = 500_000.0
GOAL_BATCH_ROWS = 5_000_000.0
GOAL_COMMIT_MS = 2.0
GOAL_WRITE_AMP = 1.5
GOAL_OPEN_MS = 50.0

# the cached large store: bump when the layout of the generated data changes
BIG_STORE_FORMAT = 1
BIG_VALUE_WIDTH = 96
MIB = 1024 * 1024
CLOCK_STEP_MS = 1000  # how far a TTL table's clock moves between two samples


class _Scratch:
    """Fresh store directories under one scratch root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)

    def store(self) -> PartitionStore:
        self.count += 1
        return PartitionStore.open(str(self.root / f"s{self.count}"), OPERATOR, 0)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _rate_result(
    name: str,
    count: int,
    eng: list[float],
    base: list[float] | None,
    goal: float | None,
    unit: str,
    notes: str,
) -> Result:
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


# -- hot get / update ---------------------------------------------------------------------------
def bench_hot(ctx: BenchContext, scratch: _Scratch, rng: np.random.Generator) -> list[Result]:
    """Hot ``get`` and ``update`` of a value table vs ``dict.get`` and dict assignment."""
    n = ctx.pick(100_000, 500_000)
    repeat = 5
    kt = key_table(rng.permutation(n))
    keys = python_keys(kt)
    vals = python_values(value_table(rng, n, VALUE_WIDTH))
    vals2 = python_values(value_table(rng, n, VALUE_WIDTH))
    out: list[Result] = []
    for ttl in (None, 3_600_000):
        st = scratch.store()
        vt = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA, ttl_ms=ttl)
        for k, v in zip(keys, vals, strict=True):
            vt.update(k, v)
        d = dict(zip(keys, vals, strict=True))
        tag = "" if ttl is None else ", TTL table"
        what = f"{n:,} keys with hot views, (string) key, (int64, string) value, 1 thread"

        def eng_get(vt: Any = vt) -> None:
            g = vt.get
            for k in keys:
                g(k)

        def base_get(d: dict[Any, Any] = d) -> None:
            g = d.get
            for k in keys:
                g(k)

        def eng_update(vt: Any = vt) -> None:
            u = vt.update
            for k, v in zip(keys, vals2, strict=True):
                u(k, v)

        def base_update(d: dict[Any, Any] = d) -> None:
            for k, v in zip(keys, vals2, strict=True):
                d[k] = v

        # a TTL table's clock moves 1 s before every sample, as it does from one Spark
        # micro-batch to the next: each update then moves its key's TTL index entry to a
        # new expiry bucket (at a fixed clock it would stay in the same one)
        tick = None if ttl is None else (lambda st=st: st.set_time(st.now_ms + CLOCK_STEP_MS))
        clock = (
            f"; the store's clock moves {CLOCK_STEP_MS / 1000:g} s (set_time) before each "
            "sample, as between Spark micro-batches"
            if ttl
            else ""
        )
        e, b = sample_pair(eng_get, base_get, repeat=repeat, setup=tick)
        goal = GOAL_HOT_GET if ttl is None else None
        out.append(_rate_result(f"hot get{tag}", n, e, b, goal, "ops/s", what + clock))
        e, b = sample_pair(eng_update, base_update, repeat=repeat, setup=tick)
        goal = GOAL_HOT_UPDATE if ttl is None else None
        notes = what + (
            f"; maintains the TTL index{clock}, so every update moves its entry to a new "
            "expiry bucket"
            if ttl
            else ""
        )
        out.append(_rate_result(f"hot update{tag}", n, e, b, goal, "ops/s", notes))
        if ttl is None:
            out.append(_hot_cursor_pair(vt, keys, vals2, repeat))
        st.close()
    return out


class _Cell:
    """A current-key cell, as the Spark adapter's key binding."""

    key: Any = None


def _hot_cursor_pair(vt: Any, keys: list[Any], vals: list[Any], repeat: int) -> Result:
    """``get()`` + ``update(v)`` through key-cursor accessors (the Spark handles' path)."""
    cell = _Cell()
    get, update = vt.cursor_ops(cell, lambda: vt.get(cell.key), lambda v: vt.update(cell.key, v))
    d = dict(zip(keys, vals, strict=True))

    def eng() -> None:
        for k, v in zip(keys, vals, strict=True):
            cell.key = k
            get()
            update(v)

    def base() -> None:
        for k, v in zip(keys, vals, strict=True):
            cell.key = k
            d.get(cell.key)
            d[cell.key] = v

    e, b = sample_pair(eng, base, repeat=repeat)
    return _rate_result(
        "hot get+update by key cursor",
        2 * len(keys),
        e,
        b,
        None,
        "ops/s",
        f"{len(keys):,} keys with hot views; per key: bind the key in a cell, get(), update(v) "
        "through fsstate.tables.cursor accessors (what ValueState.get/update run in Spark); "
        "baseline: the same loop on a dict",
    )


# -- put_many / get_many ------------------------------------------------------------------------
def bench_batch(ctx: BenchContext, scratch: _Scratch, rng: np.random.Generator) -> list[Result]:
    """``put_many`` / ``get_many`` rows/s vs building and reading a dict from the same tables."""
    n = ctx.pick(100_000, 1_000_000)
    m = ctx.pick(20_000, 50_000)
    repeat = 3
    kt = key_table(rng.permutation(n))
    vtab = value_table(rng, n, VALUE_WIDTH)
    sample_kt = key_table(rng.choice(n, size=m, replace=False))
    holder: dict[str, Any] = {}
    out: list[Result] = []

    def fresh() -> None:
        st = holder.pop("store", None)
        if st is not None:
            st.close()
        gc.collect()
        st = scratch.store()
        holder["store"] = st
        holder["vt"] = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)

    def eng_put() -> None:
        holder["vt"].put_many(kt, vtab)

    def base_put() -> None:
        holder["d"] = dict(zip(python_keys(kt), python_values(vtab), strict=True))

    e, b = sample_pair(eng_put, base_put, repeat=repeat, setup=fresh)
    puts = [
        _rate_result(
            "batch put_many alone (deferred work not counted)",
            n,
            e,
            b,
            None,
            "rows/s",
            f"{n:,} rows per call, shuffled keys; put_many only appends the unsorted batch: "
            "its sort and key index are built by the first read or commit, which this row "
            "leaves out (see the two rows below); baseline: dict(zip(...)) of to_pylist tuples",
        )
    ]

    # get_many of every key right after put_many: no view, the runs in memory answer alone
    vt = holder["vt"]
    vt.get_many(kt)
    d = holder["d"]

    def eng_get_many() -> None:
        vt.get_many(kt)

    def base_get(keys_table: pa.Table = kt) -> None:
        g = d.get
        [g(k) for k in python_keys(keys_table)]

    baseline_note = "baseline: to_pylist keys + list comprehension of dict.get (no output table)"
    for name, note in (
        ("batch get_many (runs in memory)", "no view loaded: joins over the in-memory runs"),
        ("batch get_many (hot views)", "every view loaded by a point get and clean"),
        ("batch get_many (hot dirty views)", "every view loaded and updated since the last seal"),
    ):
        if name.endswith("(hot views)"):
            for k in python_keys(kt):
                vt.get(k)
        elif name.endswith("(hot dirty views)"):
            for k, v in zip(python_keys(kt), python_values(vtab), strict=True):
                vt.update(k, v)
        e, b = sample_pair(eng_get_many, base_get, repeat=repeat)
        out.append(
            _rate_result(
                name,
                n,
                e,
                b,
                GOAL_BATCH_ROWS,
                "rows/s",
                f"{n:,} keys per call, {note}; {baseline_note}",
            )
        )

    # get_many right after put_many: keys only in the in-memory Arrow segment (first touch)
    def setup_cold() -> None:
        fresh()
        holder["vt"].put_many(kt, vtab)

    def eng_get_cold() -> None:
        holder["vt"].get_many(sample_kt)

    def base_get_sample() -> None:
        base_get(sample_kt)

    e, b = sample_pair(eng_get_cold, base_get_sample, repeat=repeat, warmup=0, setup=setup_cold)
    out.append(
        _rate_result(
            "batch get_many (first touch)",
            m,
            e,
            b,
            GOAL_BATCH_ROWS,
            "rows/s",
            f"{m:,} random keys right after put_many of {n:,} rows (segment in memory, key "
            "index not built yet, views not loaded)",
        )
    )
    holder.pop("store").close()
    return puts + _batch_put_with_deferred(scratch, kt, vtab, sample_kt, repeat) + out


def _batch_put_with_deferred(
    scratch: _Scratch,
    kt: pa.Table,
    vtab: pa.Table,
    sample_kt: pa.Table,
    repeat: int,
) -> list[Result]:
    """``put_many`` timed together with the work it defers (sort and key index of the batch).

    Two rows, each on a fresh store per sample: ``put_many`` + the first ``get_many`` (of
    ``sample_kt``'s keys), and ``put_many`` + ``commit`` (Parquet run written and published).
    Rates count the rows put (``len(kt)``) over the time of both calls.
    """
    n, m = kt.num_rows, sample_kt.num_rows
    cfg = StoreConfig()
    codec = None if cfg.compression == "none" else cfg.compression
    holder: dict[str, Any] = {}
    rows = pa.Table.from_arrays(
        [*kt.columns, *vtab.columns], names=[*kt.column_names, *vtab.column_names]
    )
    parquet = scratch.root / "baseline.parquet"

    def fresh() -> None:
        st = holder.pop("store", None)
        if st is not None:
            st.close()
        holder.pop("d", None)
        gc.collect()
        st = scratch.store()
        holder["store"] = st
        holder["vt"] = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)

    def eng_put_get() -> None:
        holder["vt"].put_many(kt, vtab)
        holder["vt"].get_many(sample_kt)

    def base_put_get() -> None:
        d = dict(zip(python_keys(kt), python_values(vtab), strict=True))
        g = d.get
        [g(k) for k in python_keys(sample_kt)]
        holder["d"] = d

    def eng_put_commit() -> None:
        holder["vt"].put_many(kt, vtab)
        holder["store"].commit(1)

    def base_put_commit() -> None:
        holder["d"] = dict(zip(python_keys(kt), python_values(vtab), strict=True))
        pq.write_table(rows, parquet, compression=codec, row_group_size=cfg.row_group_rows)
        if cfg.fsync:
            for path, flags in ((parquet, os.O_RDONLY), (parquet.parent, os.O_RDONLY)):
                fd = os.open(path, flags)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    out: list[Result] = []
    e, b = sample_pair(eng_put_get, base_put_get, repeat=repeat, setup=fresh)
    out.append(
        _rate_result(
            "batch put_many + first get_many",
            n,
            e,
            b,
            GOAL_BATCH_ROWS,
            "rows/s",
            f"rows put per second, counting the work put_many defers: put_many of {n:,} "
            f"rows (shuffled keys) then get_many of {m:,} random keys of them on a fresh "
            "store (the first read sorts the batch and builds its key index); baseline: "
            "dict(zip(...)) of to_pylist tuples, then dict.get of the same keys",
        )
    )
    e, b = sample_pair(eng_put_commit, base_put_commit, repeat=repeat, setup=fresh)
    out.append(
        _rate_result(
            "batch put_many + commit",
            n,
            e,
            b,
            None,
            "rows/s",
            f"rows put per second, counting the work put_many defers: put_many of {n:,} "
            "rows (shuffled keys) then commit on a fresh store (sort, key index, Parquet run "
            f"({cfg.compression}), manifest{', fsync' if cfg.fsync else ''}); baseline: "
            "dict(zip(...)) of to_pylist tuples plus pq.write_table of the same key and value "
            f"columns to one file ({cfg.compression}, row groups of {cfg.row_group_rows:,} "
            f"rows, unsorted{', fsync of the file and its directory' if cfg.fsync else ''})",
        )
    )
    st = holder.pop("store", None)
    if st is not None:
        st.close()
    parquet.unlink(missing_ok=True)
    return out


# -- commit ---------------------------------------------------------------------------------------
def bench_commit(ctx: BenchContext, scratch: _Scratch, rng: np.random.Generator) -> list[Result]:
    """Median latency of committing a store in which nothing changed, durable (fsync, the
    default) and with ``StoreConfig(fsync=False)``, the two stores taking turns."""
    n = 100_000
    commits = ctx.pick(150, 300)
    stores = []
    for fsync in (True, False):
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
        stores.append(st)
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


# -- write amplification ------------------------------------------------------------------------
def bench_write_amp(ctx: BenchContext, scratch: _Scratch, rng: np.random.Generator) -> list[Result]:
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


def _open_big(path: Path, version: int) -> tuple[PartitionStore, Any]:
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


def _load_big_meta(path: Path, target: int) -> dict[str, Any] | None:
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
        st, vt = _open_big(path, int(meta["version"]))
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
    meta = _load_big_meta(path, target)
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


def bench_open(ctx: BenchContext, scratch: _Scratch, rng: np.random.Generator) -> list[Result]:
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
        st, _ = _open_big(path, version)
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
    cases = (
        ("newest run", int(meta["rows"]) - 7, ctx.pick(3, 3)),
        ("oldest run", 7, ctx.pick(2, 1)),
    )
    for where, key_id, reps in cases:
        times = []
        for _ in range(reps):
            st, vt = _open_big(path, version)
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


# -- lists and maps -----------------------------------------------------------------------------
def bench_collections(
    ctx: BenchContext, scratch: _Scratch, rng: np.random.Generator
) -> list[Result]:
    """Hot ``ListTable.append`` and ``MapTable.update`` vs dict-of-list / dict-of-dict."""
    n = ctx.pick(50_000, 300_000)
    n_keys = ctx.pick(5_000, 10_000)
    n_ukeys = 20
    repeat = ctx.pick(5, 3)
    keys = [key_of(i) for i in range(n_keys)]
    ids = rng.integers(0, n_keys, size=n)
    op_keys = [keys[i] for i in ids.tolist()]
    op_vals = [(int(x),) for x in rng.integers(0, 1 << 40, size=n).tolist()]
    ukeys = [(f"u{j}",) for j in range(n_ukeys)]
    op_ukeys = [ukeys[j] for j in rng.integers(0, n_ukeys, size=n).tolist()]
    x_schema = pa.schema([pa.field("x", pa.int64())])
    out: list[Result] = []

    lists: dict[str, Any] = {}

    def fresh_lists() -> None:
        # every sample starts from one-element lists: state size stays the same across samples
        old = lists.pop("store", None)
        if old is not None:
            old.close()
        st = scratch.store()
        lt = st.list_table("l", x_schema, KEY_SCHEMA)
        for k in keys:
            lt.append(k, (0,))
        st.commit(0)
        lists.update(store=st, lt=lt, d={k: [(0,)] for k in keys})

    def eng_append() -> None:
        a = lists["lt"].append
        for k, v in zip(op_keys, op_vals, strict=True):
            a(k, v)

    def base_append() -> None:
        dl = lists["d"]
        for k, v in zip(op_keys, op_vals, strict=True):
            dl[k].append(v)

    e, b = sample_pair(eng_append, base_append, repeat=repeat, setup=fresh_lists)
    out.append(
        _rate_result(
            "collections list append",
            n,
            e,
            b,
            None,
            "ops/s",
            f"{n:,} appends over {n_keys:,} hot keys (lists start with 1 element), (int64) "
            "element; baseline: dict of lists",
        )
    )
    lists.pop("store").close()

    st = scratch.store()
    mt = st.map_table("m", pa.schema([pa.field("u", pa.string())]), x_schema, KEY_SCHEMA)
    for k in keys:
        for u in ukeys:
            mt.update(k, u, (0,))
    st.commit(0)
    dm: dict[Any, dict[Any, Any]] = {k: dict.fromkeys(ukeys, (0,)) for k in keys}

    def eng_map() -> None:
        u = mt.update
        for k, uk, v in zip(op_keys, op_ukeys, op_vals, strict=True):
            u(k, uk, v)

    def base_map() -> None:
        for k, uk, v in zip(op_keys, op_ukeys, op_vals, strict=True):
            dm[k][uk] = v

    e, b = sample_pair(eng_map, base_map, repeat=repeat)
    out.append(
        _rate_result(
            "collections map update",
            n,
            e,
            b,
            None,
            "ops/s",
            f"{n:,} updates over {n_keys:,} hot keys x {n_ukeys} user keys; baseline: dict of "
            "dicts",
        )
    )
    st.close()
    return out


# -- a partition moving between workers ------------------------------------------------------
def bench_move(ctx: BenchContext, scratch: _Scratch, rng: np.random.Generator) -> list[Result]:
    """A Spark-like batch on a store whose partition comes back from another worker.

    Two store objects of one partition play two Python workers taking turns (what Spark does
    with a partition almost every micro-batch). Each batch gets its store (``reopen``: open
    the previous version from storage, the only way before catch-up; ``refresh``: advance the
    worker's own older copy with :meth:`PartitionStore.refresh`), does ``get`` + ``update`` on
    ``touched`` random keys and commits. Both variants run on the same store, batch by batch.
    """
    out: list[Result] = []
    touched = 2_500
    modes = ("reopen", "refresh")
    for n in ctx.pick((20_000, 100_000), (20_000, 200_000)):
        roots: dict[str, Any] = {}
        values = value_table(rng, n, VALUE_WIDTH)
        for mode in modes:  # one store per variant, same content
            st = scratch.store()
            st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA).put_many(key_table(range(n)), values)
            st.commit(0)
            st.close()
            roots[mode] = st.fileio
        versions = dict.fromkeys(modes, 0)
        copies: dict[str, list[PartitionStore | None]] = {m: [None, None] for m in modes}
        per_call: dict[str, list[float]] = {m: [] for m in modes}
        for b in range(1, 1 + ctx.pick(8, 16)):
            worker = b % 2
            keys = [key_of(int(i)) for i in rng.choice(n, size=touched, replace=False)]
            for mode in modes if b % 2 else modes[::-1]:

                def batch(
                    mode: str = mode,
                    worker: int = worker,
                    keys: list[Any] = keys,
                    versions: dict[str, int] = versions,
                    copies: dict[str, list[PartitionStore | None]] = copies,
                    roots: dict[str, Any] = roots,
                ) -> None:
                    version = versions[mode]
                    mine = copies[mode][worker]
                    if mine is None or mode == "reopen" or not mine.refresh(version):
                        if mine is not None:
                            mine.close()
                        mine = PartitionStore.open(roots[mode], OPERATOR, 0, version)
                    t = mine.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
                    for k in keys:
                        old = t.get(k)
                        t.update(k, ((old[0] if old else 0) + 1, "x"))
                    mine.commit(version + 1)
                    versions[mode] = version + 1
                    copies[mode][worker] = mine

                seconds = time_call(batch, collect=False)
                if b > 2:  # each worker's first batch opens from storage in both variants
                    per_call[mode].append(seconds * 1e6 / (2 * touched))
        for pair in copies.values():
            for c in pair:
                if c is not None:
                    c.close()
        label = f"{n // 1000}k keys"
        common = (
            f"{touched:,} of {n:,} keys per batch (get + update), two workers taking turns; "
            "whole batch: get the store, the calls, commit"
        )
        how = {
            "reopen": "opens the version from storage (warm-up on the first miss)",
            "refresh": "catches the worker's copy up (PartitionStore.refresh)",
        }
        for mode in modes:
            out.append(
                Result(
                    SUITE,
                    f"moved batch {label}, {mode}",
                    median(per_call[mode]),
                    "µs/call",
                    notes=f"{common}; {how[mode]}",
                    samples=per_call[mode],
                )
            )
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


GROUPS: dict[str, Callable[[BenchContext, _Scratch, np.random.Generator], list[Result]]] = {
    "hot": bench_hot,
    "batch": bench_batch,
    "commit": bench_commit,
    "write_amp": bench_write_amp,
    "open": bench_open,
    "collections": bench_collections,
    "move": bench_move,
}


def run(ctx: BenchContext) -> list[Result]:
    """Run every engine group selected by ``ctx.only`` (a group runs if its name matches)."""
    scratch = _Scratch(ctx.tmp_dir / "scratch")
    out: list[Result] = []
    try:
        for group, fn in GROUPS.items():
            if not ctx.wants(group):
                continue
            ctx.log(f"engine/{group} ...")
            rng = np.random.default_rng(zlib.crc32(group.encode()))
            try:
                with stopwatch() as t:
                    res = fn(ctx, scratch, rng)
            except Exception as exc:  # a broken engine call must not hide the other groups
                ctx.log(f"engine/{group} FAILED: {exc!r}")
                traceback.print_exc()
                out.append(Result(SUITE, group, 0.0, "", passed=False, notes=f"ERROR: {exc!r}"))
                continue
            for r in res:
                ctx.log(f"  {r.name}: {r.value:,.4g} {r.unit} ({r.status})")
            ctx.log(f"engine/{group} done in {t[0]:.1f} s")
            out.extend(res)
            gc.collect()
    finally:
        scratch.cleanup()
    return out
