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

This module holds the in-memory call groups (``hot``, ``collections``) and :func:`run`; the
``batch`` group lives in :mod:`bench.suites.engine_batch`, the storage-facing groups
(``commit``, ``write_amp``, ``open``, ``move``) and the pieces the three modules share in
:mod:`bench.suites.engine_storage`.

Invariants:

* :data:`GROUPS` fixes the order in which groups run and so the order of the result rows;
  every row carries ``SUITE`` (``"engine"``).
* Imports go one way: this module imports its two parts, never the reverse.
* Every group builds its own stores under one scratch directory that :func:`run` removes at
  the end; a group that raises yields one failed row and the other groups still run.
"""

from __future__ import annotations

import gc
import traceback
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness.common import BenchContext, Result, sample_pair, stopwatch
from bench.harness.datagen import (
    KEY_SCHEMA,
    VALUE_SCHEMA,
    key_of,
    key_table,
    python_keys,
    python_values,
    value_table,
)
from bench.suites.engine_batch import bench_batch
from bench.suites.engine_storage import (
    SUITE,
    VALUE_WIDTH,
    KeyCell,
    Scratch,
    bench_commit,
    bench_move,
    bench_open,
    bench_write_amp,
    rate_result,
)

# goals (see docs/benchmarks.md)
GOAL_HOT_GET = 1_000_000.0
GOAL_HOT_UPDATE = 500_000.0

CLOCK_STEP_MS = 1000  # how far a TTL table's clock moves between two samples


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
        out += _hot_rows(scratch, keys, vals, vals2, ttl, repeat)
    return out


def _hot_rows(
    scratch: Scratch,
    keys: list[Any],
    vals: list[Any],
    vals2: list[Any],
    ttl: int | None,
    repeat: int,
) -> list[Result]:
    """Hot get and update of one value table (``ttl``: a TTL table), each against a dict; and,
    without TTL, get + update through key-cursor accessors."""
    n = len(keys)
    st = scratch.store()
    vt = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA, ttl_ms=ttl)
    for k, v in zip(keys, vals, strict=True):
        vt.update(k, v)
    d = dict(zip(keys, vals, strict=True))
    tag = "" if ttl is None else ", TTL table"
    what = f"{n:,} keys with hot views, (string) key, (int64, string) value, 1 thread"

    def eng_get() -> None:
        g = vt.get
        for k in keys:
            g(k)

    def base_get() -> None:
        g = d.get
        for k in keys:
            g(k)

    def eng_update() -> None:
        u = vt.update
        for k, v in zip(keys, vals2, strict=True):
            u(k, v)

    def base_update() -> None:
        for k, v in zip(keys, vals2, strict=True):
            d[k] = v

    # a TTL table's clock moves 1 s before every sample, as it does from one Spark
    # micro-batch to the next: each update then moves its key's TTL index entry to a
    # new expiry bucket (at a fixed clock it would stay in the same one)
    tick = None if ttl is None else (lambda: st.set_time(st.now_ms + CLOCK_STEP_MS))
    clock = (
        f"; the store's clock moves {CLOCK_STEP_MS / 1000:g} s (set_time) before each "
        "sample, as between Spark micro-batches"
        if ttl
        else ""
    )
    out: list[Result] = []
    e, b = sample_pair(eng_get, base_get, repeat=repeat, setup=tick)
    goal = GOAL_HOT_GET if ttl is None else None
    out.append(rate_result(f"hot get{tag}", n, e, b, goal, "ops/s", what + clock))
    e, b = sample_pair(eng_update, base_update, repeat=repeat, setup=tick)
    goal = GOAL_HOT_UPDATE if ttl is None else None
    notes = what + (
        f"; maintains the TTL index{clock}, so every update moves its entry to a new expiry bucket"
        if ttl
        else ""
    )
    out.append(rate_result(f"hot update{tag}", n, e, b, goal, "ops/s", notes))
    if ttl is None:
        out.append(_hot_cursor_pair(vt, keys, vals2, repeat))
    st.close()
    return out


def _hot_cursor_pair(vt: Any, keys: list[Any], vals: list[Any], repeat: int) -> Result:
    """``get()`` + ``update(v)`` through key-cursor accessors (the Spark handles' path)."""
    cell = KeyCell()
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
    return rate_result(
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


# -- lists and maps -----------------------------------------------------------------------------
def bench_collections(
    ctx: BenchContext, scratch: Scratch, rng: np.random.Generator
) -> list[Result]:
    """Hot ``ListTable.append`` and ``MapTable.update`` vs dict-of-list / dict-of-dict."""
    n = ctx.pick(50_000, 300_000)
    n_keys = ctx.pick(5_000, 10_000)
    repeat = ctx.pick(5, 3)
    keys = [key_of(i) for i in range(n_keys)]
    ids = rng.integers(0, n_keys, size=n)
    op_keys = [keys[i] for i in ids.tolist()]
    op_vals = [(int(x),) for x in rng.integers(0, 1 << 40, size=n).tolist()]
    ukeys = [(f"u{j}",) for j in range(20)]
    op_ukeys = [ukeys[j] for j in rng.integers(0, len(ukeys), size=n).tolist()]
    return [
        _list_append_row(scratch, keys, op_keys, op_vals, repeat),
        _map_update_row(scratch, keys, ukeys, op_keys, op_ukeys, op_vals, repeat),
    ]


X_SCHEMA = pa.schema([pa.field("x", pa.int64())])


def _list_append_row(
    scratch: Scratch, keys: list[Any], op_keys: list[Any], op_vals: list[Any], repeat: int
) -> Result:
    """Appends to lists of hot keys vs a dict of lists; every sample starts from one-element
    lists, so the state size stays the same across samples."""
    lists: dict[str, Any] = {}

    def fresh_lists() -> None:
        old = lists.pop("store", None)
        if old is not None:
            old.close()
        st = scratch.store()
        lt = st.list_table("l", X_SCHEMA, KEY_SCHEMA)
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
    lists.pop("store").close()
    return rate_result(
        "collections list append",
        len(op_keys),
        e,
        b,
        None,
        "ops/s",
        f"{len(op_keys):,} appends over {len(keys):,} hot keys (lists start with 1 element), "
        "(int64) element; baseline: dict of lists",
    )


def _map_update_row(
    scratch: Scratch,
    keys: list[Any],
    ukeys: list[Any],
    op_keys: list[Any],
    op_ukeys: list[Any],
    op_vals: list[Any],
    repeat: int,
) -> Result:
    """Updates of map entries of hot keys vs a dict of dicts."""
    st = scratch.store()
    mt = st.map_table("m", pa.schema([pa.field("u", pa.string())]), X_SCHEMA, KEY_SCHEMA)
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
    st.close()
    return rate_result(
        "collections map update",
        len(op_keys),
        e,
        b,
        None,
        "ops/s",
        f"{len(op_keys):,} updates over {len(keys):,} hot keys x {len(ukeys)} user keys; "
        "baseline: dict of dicts",
    )


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
