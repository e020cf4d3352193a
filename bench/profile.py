"""cProfile of single engine calls the benchmarks flag as slow: ``python -m bench.profile CASE``.

The ``driver_*`` cases profile one epoch of the flow driver's processor stage (an unchanged
StatefulProcessor, pandas or Row flavour, without Spark: :mod:`bench.suites.spark_driver_cost`);
they need pyspark installed, not a Spark session.

``python -m bench.profile --list`` lists the cases; ``python -m bench.profile all`` runs every
one. Each case builds its fixture untimed, profiles only the engine call, and prints the
functions with the largest own time and cumulative time, as shares of the profiled call (with
cProfile's overhead, so shares matter more than absolute times). ``--out DIR`` also writes the
raw ``.prof`` files (for snakeviz or ``pstats``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness.common import RESULTS_DIR, BenchContext
from bench.harness.datagen import (
    KEY_SCHEMA,
    VALUE_SCHEMA,
    key_of,
    key_table,
    python_keys,
    python_values,
    value_table,
)
from fsstate import PartitionStore

Case = Callable[[Path, int], Callable[[], Any]]
"""A case gets a scratch directory and a row count and returns the call to profile."""


def _store(tmp: Path, name: str = "s") -> PartitionStore:
    return PartitionStore.open(str(tmp / name), "bench", 0)


def _hot_value_table(tmp: Path, n: int, ttl_ms: int | None) -> tuple[Any, list[Any]]:
    rng = np.random.default_rng(1)
    st = _store(tmp)
    vt = st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA, ttl_ms=ttl_ms)
    keys = python_keys(key_table(rng.permutation(n)))
    vals = python_values(value_table(rng, n, 32))
    for k, v in zip(keys, vals, strict=True):
        vt.update(k, v)
    st.commit(0)
    return vt, list(zip(keys, vals, strict=True))


def case_hot_update(tmp: Path, n: int) -> Callable[[], Any]:
    """ValueTable.update on hot keys (no TTL)."""
    vt, kv = _hot_value_table(tmp, n, None)

    def call() -> None:
        u = vt.update
        for k, v in kv:
            u(k, v)

    return call


def case_hot_update_ttl(tmp: Path, n: int) -> Callable[[], Any]:
    """ValueTable.update on hot keys of a TTL table (maintains the TTL index)."""
    vt, kv = _hot_value_table(tmp, n, 3_600_000)

    def call() -> None:
        u = vt.update
        for k, v in kv:
            u(k, v)

    return call


def _batch(n: int) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(2)
    return key_table(rng.permutation(n)), value_table(rng, n, 32)


def case_put_many(tmp: Path, n: int) -> Callable[[], Any]:
    """ValueTable.put_many of n shuffled rows into an empty table."""
    kt, vtab = _batch(n)
    vt = _store(tmp).value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    return lambda: vt.put_many(kt, vtab)


def case_get_many_hot(tmp: Path, n: int) -> Callable[[], Any]:
    """ValueTable.get_many of n keys whose views are all in memory and dirty (per-key path)."""
    kt, vtab = _batch(n)
    vt = _store(tmp).value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    for k, v in zip(python_keys(kt), python_values(vtab), strict=True):
        vt.update(k, v)
    return lambda: vt.get_many(kt)


def case_get_many_runs(tmp: Path, n: int) -> Callable[[], Any]:
    """ValueTable.get_many of n keys right after put_many of them (joins over the runs)."""
    kt, vtab = _batch(n)
    vt = _store(tmp).value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    vt.put_many(kt, vtab)
    vt.get_many(kt)
    return lambda: vt.get_many(kt)


def case_get_many_cold(tmp: Path, n: int) -> Callable[[], Any]:
    """ValueTable.get_many of n/4 random keys right after put_many of n rows (first touch)."""
    kt, vtab = _batch(n)
    vt = _store(tmp).value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    vt.put_many(kt, vtab)
    sample = key_table(np.random.default_rng(3).choice(n, size=n // 4, replace=False))
    return lambda: vt.get_many(sample)


def case_commit_dirty(tmp: Path, n: int) -> Callable[[], Any]:
    """commit after n/4 hot ValueTable.update calls (seal of the memtable + Parquet write)."""
    vt, kv = _hot_value_table(tmp, n, None)
    for k, v in kv[: n // 4]:
        vt.update(k, v)
    st = vt._store
    return lambda: st.commit(1)


def case_commit_put_many(tmp: Path, n: int) -> Callable[[], Any]:
    """commit after put_many of n rows (Parquet write of a batched run: the large-store build)."""
    kt, vtab = _batch(n)
    st = _store(tmp)
    st.value_table("v", VALUE_SCHEMA, KEY_SCHEMA).put_many(kt, vtab)
    return lambda: st.commit(1)


def case_cold_get(tmp: Path, n: int) -> Callable[[], Any]:
    """First ValueTable.get after open, key in the oldest run of the largest cached store."""
    from bench.suites.engine_storage import MIB, build_big_store, load_big_meta, open_big

    ctx = BenchContext("quick")
    path, meta = ctx.tmp_dir / "store-1GiB", load_big_meta(ctx.tmp_dir / "store-1GiB", 1024 * MIB)
    if meta is None:
        path, meta = ctx.tmp_dir / "store-100MiB", build_big_store(ctx, 100 * MIB, 250_000)
    print(f"(store {path.name}: {meta['rows']:,} rows in {meta.get('runs', '?')} runs)")
    _, vt = open_big(path, int(meta["version"]))
    return lambda: vt.get(key_of(7))


def case_list_append(tmp: Path, n: int) -> Callable[[], Any]:
    """ListTable.append over 5k hot keys."""
    st = _store(tmp)
    lt = st.list_table("l", pa.schema([pa.field("x", pa.int64())]), KEY_SCHEMA)
    keys = [key_of(i) for i in range(5000)]
    for k in keys:
        lt.append(k, (0,))
    st.commit(0)
    ops = [(keys[i % 5000], (i,)) for i in range(n)]

    def call() -> None:
        a = lt.append
        for k, v in ops:
            a(k, v)

    return call


def case_map_update(tmp: Path, n: int) -> Callable[[], Any]:
    """MapTable.update over 5k hot keys x 20 user keys."""
    st = _store(tmp)
    x = pa.schema([pa.field("x", pa.int64())])
    mt = st.map_table("m", pa.schema([pa.field("u", pa.string())]), x, KEY_SCHEMA)
    keys = [key_of(i) for i in range(5000)]
    ukeys = [(f"u{j}",) for j in range(20)]
    for k in keys:
        for u in ukeys:
            mt.update(k, u, (0,))
    st.commit(0)
    ops = [(keys[i % 5000], ukeys[i % 20], (i,)) for i in range(n)]

    def call() -> None:
        u = mt.update
        for k, uk, v in ops:
            u(k, uk, v)

    return call


def _driver_case(variant: str, flavour: str) -> Case:
    def case(tmp: Path, n: int) -> Callable[[], Any]:
        from bench.suites.spark_driver_cost import epoch_fixture  # needs pyspark (no session)

        return epoch_fixture(variant, flavour, tmp, rows=n)

    what = "does nothing" if variant == "idle" else "RunningAgg: rows + value state + one row"
    case.__doc__ = (
        f"one epoch of a processor stage, {flavour} flavour, {what} (n rows, n/2 keys; "
        "bench.suites.spark_driver_cost)"
    )
    return case


CASES: dict[str, Case] = {
    "hot_update": case_hot_update,
    "hot_update_ttl": case_hot_update_ttl,
    "put_many": case_put_many,
    "get_many_hot": case_get_many_hot,
    "get_many_runs": case_get_many_runs,
    "get_many_cold": case_get_many_cold,
    "commit_dirty": case_commit_dirty,
    "commit_put_many": case_commit_put_many,
    "cold_get": case_cold_get,
    "list_append": case_list_append,
    "map_update": case_map_update,
    "driver_idle_pandas": _driver_case("idle", "pandas"),
    "driver_idle_row": _driver_case("idle", "row"),
    "driver_running_pandas": _driver_case("running", "pandas"),
    "driver_running_row": _driver_case("running", "row"),
}


def _short(func: tuple[str, int, str]) -> str:
    file, line, name = func
    if file == "~":
        return name
    parts = Path(file).parts
    for anchor in ("fsstate", "fsstate_spark", "pyarrow", "bench", "numpy", "pyspark", "pandas"):
        if anchor in parts:
            i = len(parts) - 1 - parts[::-1].index(anchor)
            return f"{'/'.join(parts[i:])}:{line}({name})"
    return f"{Path(file).name}:{line}({name})"


def report(prof: cProfile.Profile, top: int) -> str:
    """Top functions by own time and by cumulative time, as shares of the total."""
    st = pstats.Stats(prof, stream=io.StringIO())
    raw: dict[Any, Any] = st.stats  # type: ignore[attr-defined]
    total = max(getattr(st, "total_tt", 0.0), 1e-9)
    rows = [(func, tt, ct, nc) for func, (_cc, nc, tt, ct, _callers) in raw.items()]
    out = [f"profiled total {total:.3f} s (with cProfile overhead)", "", "own time:"]
    for func, tt, _ct, nc in sorted(rows, key=lambda r: -r[1])[:top]:
        out.append(f"  {100 * tt / total:5.1f}%  {tt:8.3f} s  {nc:>9} calls  {_short(func)}")
    out += ["", "cumulative time:"]
    for func, _tt, ct, nc in sorted(rows, key=lambda r: -r[2])[:top]:
        out.append(f"  {100 * ct / total:5.1f}%  {ct:8.3f} s  {nc:>9} calls  {_short(func)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Profile the named cases."""
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n")[0])
    p.add_argument("cases", nargs="*", help="case names, or 'all'")
    p.add_argument("--list", action="store_true", help="list the cases")
    p.add_argument("-n", "--rows", type=int, default=200_000, help="rows / ops per case")
    p.add_argument("--top", type=int, default=14, help="functions shown per table")
    p.add_argument("--out", type=Path, default=None, help="write <case>.prof files here")
    args = p.parse_args(argv)
    if args.list or not args.cases:
        for name, fn in CASES.items():
            print(f"{name:<16} {(fn.__doc__ or '').strip()}")
        return 0
    names = list(CASES) if args.cases == ["all"] else args.cases
    unknown = [c for c in names if c not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; see --list", file=sys.stderr)
        return 2
    RESULTS_DIR.joinpath("tmp").mkdir(parents=True, exist_ok=True)
    for name in names:
        tmp = Path(tempfile.mkdtemp(prefix=f"prof-{name}-", dir=RESULTS_DIR / "tmp"))
        try:
            call = CASES[name](tmp, args.rows)
            prof = cProfile.Profile()
            prof.enable()
            call()
            prof.disable()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"=== {name}: {(CASES[name].__doc__ or '').strip()} (n={args.rows:,})")
        print(report(prof, args.top))
        print()
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            prof.dump_stats(str(args.out / f"{name}.prof"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
