"""Engine benchmarks of whole Arrow batches: the ``batch`` group of the engine suite
(:mod:`bench.suites.engine` runs it, this module does not).

``put_many`` timed with a first ``get_many`` (the goal row), with a ``commit`` (all the work
it defers) and alone (info), and ``get_many`` (runs in memory, hot clean and dirty views,
first touch), each against building and reading a dict from the same tables; and the commit
of a batch of point updates of most of a store's keys, as one Spark task of a running
aggregate commits its partition, against writing the same rows to a Parquet file.

Invariants:

* This module never imports :mod:`bench.suites.engine`; it takes the suite's shared pieces
  (``SUITE`` in :func:`~bench.suites.engine_storage.rate_result`, ``VALUE_WIDTH``,
  :class:`~bench.suites.engine_storage.Scratch`) from :mod:`bench.suites.engine_storage`.
* Every sample of a store-building pair starts from a fresh store (:class:`Fresh`, the previous
  one closed and a full collection first); stores live under the ``Scratch`` root given.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness.common import BenchContext, Result, median, sample_pair
from bench.harness.datagen import (
    KEY_SCHEMA,
    VALUE_SCHEMA,
    key_of,
    key_table,
    python_keys,
    python_values,
    value_table,
)
from bench.suites.engine_storage import SUITE, VALUE_WIDTH, KeyCell, Scratch, rate_result
from fsstate import StoreConfig

GOAL_BATCH_ROWS = 5_000_000.0
GOAL_FIRST_TOUCH_ROWS = 1_000_000.0  # issue 46: a first touch reads the batch's keys once


# -- put_many / get_many ------------------------------------------------------------------------
class Fresh:
    """Called before a sample: closes the previous store and opens a fresh value table.

    ``d`` holds the baseline's dict; ``keep_dict=False`` drops it with the store (before the
    collection), as a sample pair that builds both from scratch wants.
    """

    def __init__(self, scratch: Scratch, keep_dict: bool = True) -> None:
        self.scratch = scratch
        self.keep_dict = keep_dict
        self.store: Any = None
        self.vt: Any = None
        self.d: dict[Any, Any] | None = None

    def __call__(self) -> None:
        self.close()
        if not self.keep_dict:
            self.d = None
        gc.collect()
        self.store = self.scratch.store()
        self.vt = self.store.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)

    def close(self) -> None:
        """Close the current store, if any."""
        st, self.store = self.store, None
        if st is not None:
            st.close()


def bench_batch(ctx: BenchContext, scratch: Scratch, rng: np.random.Generator) -> list[Result]:
    """``put_many`` / ``get_many`` rows/s vs building and reading a dict from the same tables."""
    n = ctx.pick(100_000, 1_000_000)
    m = ctx.pick(20_000, 50_000)
    repeat = 3
    kt = key_table(rng.permutation(n))
    vtab = value_table(rng, n, VALUE_WIDTH)
    sample_kt = key_table(rng.choice(n, size=m, replace=False))
    fresh = Fresh(scratch)

    def eng_put() -> None:
        fresh.vt.put_many(kt, vtab)

    def base_put() -> None:
        fresh.d = dict(zip(python_keys(kt), python_values(vtab), strict=True))

    e, b = sample_pair(eng_put, base_put, repeat=repeat, setup=fresh)
    puts = [
        rate_result(
            "batch put_many alone (deferred work not counted)",
            n,
            e,
            b,
            None,
            "rows/s",
            f"{n:,} rows per call, shuffled keys; put_many only appends the unsorted batch: "
            "its sort, key index and (into an empty table) distinct-key count are left to "
            "the first read or commit that needs them, which this row leaves out (see the two "
            "rows below); baseline: dict(zip(...)) of to_pylist tuples",
        )
    ]
    assert fresh.d is not None
    out = _get_many_rows(fresh.vt, fresh.d, kt, vtab, repeat)
    out.append(_first_touch_row(fresh, fresh.d, kt, vtab, sample_kt, repeat))
    fresh.close()
    out.append(_updated_commit_row(ctx, scratch))
    return puts + _batch_put_with_deferred(scratch, kt, vtab, sample_kt, repeat) + out


AGG_SCHEMA = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.int64())])


class _AggBatches:
    """A store of ``n`` keys, each a (count, sum) pair, and batches of point updates of it.

    :meth:`batch` (untimed) updates a random 86 % of the keys (two rows per key on average, as
    ``spark_jvm``'s 500,000 rows over 250,000 keys give each of 4 partitions) through the
    key-cursor accessors, in key order with new key tuples, as Spark's loop hands keys over;
    :meth:`commit` commits them, :meth:`write_baseline` writes the same keys' new values to
    one Parquet file (columns from the dict of updated values, the store's compression and
    fsync)."""

    def __init__(self, scratch: Scratch, n: int, cfg: StoreConfig) -> None:
        self.n, self.cfg = n, cfg
        self.store = scratch.store()
        vt = self.store.value_table("agg", AGG_SCHEMA, KEY_SCHEMA)
        self.cell = cell = KeyCell()
        self.get, self.update = vt.cursor_ops(
            cell, lambda: vt.get(cell.key), lambda v: vt.update(cell.key, v)
        )
        self.names = [key_of(i)[0] for i in range(n)]
        for name in self.names:
            vt.update((name,), (1, 1))
        self.version = 1
        self.store.commit(self.version)
        self.rng = np.random.default_rng(46)
        self.parquet = scratch.root / "updated-baseline.parquet"
        self.updated: dict[tuple[str], tuple[int, int]] = {}

    def batch(self) -> None:
        """Update a random 86 % of the keys (untimed), then collect."""
        self.updated.clear()
        get, update, cell, names = self.get, self.update, self.cell, self.names
        touched = np.flatnonzero(self.rng.random(self.n) < 0.8647)  # 1 - e^-2 of the keys
        for i in touched.tolist():
            cell.key = key = (names[i],)  # a new tuple per key, as Spark's loop makes
            old = get()
            value = (1, 1) if old is None else (old[0] + 2, old[1] + 100)
            update(value)
            self.updated[key] = value
        gc.collect()

    def commit(self) -> None:
        """The engine side: commit the batch."""
        self.version += 1
        self.store.commit(self.version)

    def write_baseline(self) -> None:
        """The baseline: the updated keys' values from the dict to one Parquet file."""
        keys = list(self.updated)
        values = list(self.updated.values())
        rows = pa.table(
            {
                "k": [k[0] for k in keys],
                "n": [v[0] for v in values],
                "s": [v[1] for v in values],
            }
        )
        _write_parquet(self.cfg, rows, self.parquet)

    def close(self) -> None:
        """Close the store, remove the baseline's file."""
        self.store.close()
        self.parquet.unlink(missing_ok=True)


def _updated_commit_row(ctx: BenchContext, scratch: Scratch) -> Result:
    """The commit of point updates of most keys, what a running aggregate's task commits,
    against writing the same rows to Parquet (:class:`_AggBatches`)."""
    n = ctx.pick(20_000, 62_500)
    cfg = StoreConfig()
    batches = _AggBatches(scratch, n, cfg)
    e, b = sample_pair(
        batches.commit, batches.write_baseline, repeat=ctx.pick(3, 7), setup=batches.batch
    )
    batches.close()
    touched_n = len(batches.updated)
    return Result(
        SUITE,
        "commit of updated keys",
        1e6 * median(e) / touched_n,
        "µs/key",
        goal_op="<=",
        baseline_value=1e6 * median(b) / touched_n,
        notes=(
            f"commit after point updates of {touched_n:,} of {n:,} keys (a (count, sum) "
            "pair each; key-cursor get and update, keys in order, new key tuples, as one "
            "task of a running aggregate at 500,000 rows over 250,000 keys and 4 partitions "
            "commits): the seal's rows, the live-row count, a Parquet run "
            f"({cfg.compression}), its Bloom filter, the manifest, fsync; baseline: the same "
            "keys' values from a dict to columns, pq.write_table of one file, fsync of the "
            "file and its directory"
        ),
        samples=[1e6 * x / touched_n for x in e],
    )


def _dict_gets(d: dict[Any, Any], keys_table: pa.Table) -> None:
    """The get_many baseline: to_pylist keys + list comprehension of dict.get."""
    g = d.get
    [g(k) for k in python_keys(keys_table)]


def _get_many_rows(
    vt: Any, d: dict[Any, Any], kt: pa.Table, vtab: pa.Table, repeat: int
) -> list[Result]:
    """get_many of every key right after put_many (no view: the runs in memory answer alone),
    then with every view loaded and clean, then loaded and dirty."""
    n = kt.num_rows
    vt.get_many(kt)

    def eng_get_many() -> None:
        vt.get_many(kt)

    def base_get() -> None:
        _dict_gets(d, kt)

    baseline_note = "baseline: to_pylist keys + list comprehension of dict.get (no output table)"
    out: list[Result] = []
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
            rate_result(
                name,
                n,
                e,
                b,
                GOAL_BATCH_ROWS,
                "rows/s",
                f"{n:,} keys per call, {note}; {baseline_note}",
            )
        )
    return out


def _first_touch_row(
    fresh: Fresh,
    d: dict[Any, Any],
    kt: pa.Table,
    vtab: pa.Table,
    sample_kt: pa.Table,
    repeat: int,
) -> Result:
    """get_many right after put_many: keys only in the in-memory Arrow segment."""

    def setup_cold() -> None:
        fresh()
        fresh.vt.put_many(kt, vtab)

    def eng_get_cold() -> None:
        fresh.vt.get_many(sample_kt)

    def base_get_sample() -> None:
        _dict_gets(d, sample_kt)

    e, b = sample_pair(eng_get_cold, base_get_sample, repeat=repeat, warmup=0, setup=setup_cold)
    return rate_result(
        "batch get_many (first touch)",
        sample_kt.num_rows,
        e,
        b,
        GOAL_FIRST_TOUCH_ROWS,
        "rows/s",
        f"{sample_kt.num_rows:,} random keys right after put_many of {kt.num_rows:,} rows "
        "(segment in memory, key index not built yet, views not loaded)",
    )


def _batch_put_with_deferred(
    scratch: Scratch,
    kt: pa.Table,
    vtab: pa.Table,
    sample_kt: pa.Table,
    repeat: int,
) -> list[Result]:
    """``put_many`` timed together with what a first read, or a commit, does after it.

    Two rows, each on a fresh store per sample: ``put_many`` + the first ``get_many`` (of
    ``sample_kt``'s keys: a join with the unsorted batch), and ``put_many`` + ``commit`` (the
    batch sorted and counted, its Parquet run written and published: all the work
    ``put_many`` defers). Rates count the rows put (``len(kt)``) over the time of both calls.
    """
    rows = pa.Table.from_arrays(
        [*kt.columns, *vtab.columns], names=[*kt.column_names, *vtab.column_names]
    )
    fresh = Fresh(scratch, keep_dict=False)
    out = [
        _put_get_row(fresh, kt, vtab, sample_kt, repeat),
        _put_commit_row(fresh, kt, vtab, rows, scratch.root / "baseline.parquet", repeat),
    ]
    fresh.close()
    return out


def _put_get_row(
    fresh: Fresh, kt: pa.Table, vtab: pa.Table, sample_kt: pa.Table, repeat: int
) -> Result:
    """put_many then the first get_many (a join with the unsorted batch)."""
    n, m = kt.num_rows, sample_kt.num_rows

    def eng_put_get() -> None:
        fresh.vt.put_many(kt, vtab)
        fresh.vt.get_many(sample_kt)

    def base_put_get() -> None:
        d = dict(zip(python_keys(kt), python_values(vtab), strict=True))
        _dict_gets(d, sample_kt)
        fresh.d = d

    e, b = sample_pair(eng_put_get, base_put_get, repeat=repeat, setup=fresh)
    return rate_result(
        "batch put_many + first get_many",
        n,
        e,
        b,
        GOAL_BATCH_ROWS,
        "rows/s",
        f"rows put per second with the first read: put_many of {n:,} rows (shuffled "
        f"keys) then get_many of {m:,} random keys of them on a fresh store (the read "
        "joins them with the unsorted batch; the batch's sort and distinct-key count wait "
        "for the commit and are timed in put_many + commit); baseline: dict(zip(...)) of "
        "to_pylist tuples, then dict.get of the same keys",
    )


def _put_commit_row(
    fresh: Fresh, kt: pa.Table, vtab: pa.Table, rows: pa.Table, parquet: Path, repeat: int
) -> Result:
    """put_many then commit, against a dict plus the same columns written to ``parquet``."""
    n, cfg = kt.num_rows, StoreConfig()

    def eng_put_commit() -> None:
        fresh.vt.put_many(kt, vtab)
        fresh.store.commit(1)

    def base_put_commit() -> None:
        fresh.d = dict(zip(python_keys(kt), python_values(vtab), strict=True))
        _write_parquet(cfg, rows, parquet)

    e, b = sample_pair(eng_put_commit, base_put_commit, repeat=repeat, setup=fresh)
    parquet.unlink(missing_ok=True)
    return rate_result(
        "batch put_many + commit",
        n,
        e,
        b,
        None,
        "rows/s",
        f"rows put per second, counting all the work put_many defers: put_many of {n:,} "
        "rows (shuffled keys) then commit on a fresh store (sort, distinct-key count for "
        "the version summary, Parquet run "
        f"({cfg.compression}), manifest{', fsync' if cfg.fsync else ''}); baseline: "
        "dict(zip(...)) of to_pylist tuples plus pq.write_table of the same key and value "
        f"columns to one file ({cfg.compression}, row groups of {cfg.row_group_rows:,} "
        f"rows, unsorted{', fsync of the file and its directory' if cfg.fsync else ''})",
    )


def _write_parquet(cfg: StoreConfig, rows: pa.Table, path: Path) -> None:
    """The commit baseline: ``rows`` to one file as the store's settings write a run
    (compression, row groups, fsync of the file and its directory)."""
    codec = None if cfg.compression == "none" else cfg.compression
    pq.write_table(rows, path, compression=codec, row_group_size=cfg.row_group_rows)
    if cfg.fsync:
        for target, flags in ((path, os.O_RDONLY), (path.parent, os.O_RDONLY)):
            fd = os.open(target, flags)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
