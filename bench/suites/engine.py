"""Engine micro-benchmarks: fsstate tables measured side by side with a plain Python dict.

Groups (each selectable with ``--only``; a group's rows all start with its name), run in
this order:

* ``hot``: ``ValueTable.get`` / ``update`` on keys whose views are in memory (1 thread).
* ``batch``: ``put_many`` / ``get_many`` with Arrow tables: ``put_many`` counted with the
  work it defers (through the first ``get_many``, through a ``commit``) and alone (info), and
  ``get_many`` (runs in memory, hot clean and dirty views, first touch).
* ``commit``: commit of an untouched store (nothing changed since the last commit).
* ``write_amp``: bytes a commit writes over the Arrow bytes of the rows that changed.
* ``open``: opening a large committed store (cached under ``bench/results/tmp``) and the
  first read of a cold key.
* ``collections``: hot ``ListTable.append`` and ``MapTable.update``.
* ``move``: a batch on a partition that comes back from another worker (reopen vs refresh).

This module holds the in-memory call groups (``hot``, ``batch``, ``collections``) and
:func:`run`; the storage-facing groups (``commit``, ``write_amp``, ``open``, ``move``) live
in :mod:`bench.suites.engine_storage`.

Invariants:

* :data:`GROUPS` fixes the order in which groups run and so the order of the result rows;
  every row carries ``SUITE`` (``"engine"``).
* Imports go one way: this module imports :mod:`bench.suites.engine_storage`, never the reverse.
* Every group builds its own stores under one scratch directory that :func:`run` removes at
  the end; a group that raises yields one failed row and the other groups still run.
"""

from __future__ import annotations

import gc
import os
import traceback
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median, rates, sample_pair, stopwatch
from bench.harness.datagen import (
    KEY_SCHEMA,
    VALUE_SCHEMA,
    key_of,
    key_table,
    python_keys,
    python_values,
    value_table,
)
from bench.suites.engine_storage import (
    SUITE,
    VALUE_WIDTH,
    Scratch,
    bench_commit,
    bench_move,
    bench_open,
    bench_write_amp,
)
from fsstate import StoreConfig

# goals (see docs/benchmarks.md)
GOAL_HOT_GET = 1_000_000.0
GOAL_HOT_UPDATE = 500_000.0
GOAL_BATCH_ROWS = 5_000_000.0

CLOCK_STEP_MS = 1000  # how far a TTL table's clock moves between two samples


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
def bench_hot(ctx: BenchContext, scratch: Scratch, rng: np.random.Generator) -> list[Result]:
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
def bench_batch(ctx: BenchContext, scratch: Scratch, rng: np.random.Generator) -> list[Result]:
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
    scratch: Scratch,
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


# -- lists and maps -----------------------------------------------------------------------------
def bench_collections(
    ctx: BenchContext, scratch: Scratch, rng: np.random.Generator
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


GROUPS: dict[str, Callable[[BenchContext, Scratch, np.random.Generator], list[Result]]] = {
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
    scratch = Scratch(ctx.tmp_dir / "scratch")
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
