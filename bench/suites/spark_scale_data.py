"""The input of ``spark_scale`` and what its checked outputs must be (part of the ``spark_scale``
suite).

* Load batches: every key id ``0 .. keys - 1`` once, in id order, ``v`` =
  :func:`~bench.harness.operator_queries.load_values` of the id: after them a key's running
  aggregate is ``(1, v)`` (what :class:`~bench.harness.operator_queries.LoadAgg` writes).
* A cell's batches: ``rows`` key ids drawn uniformly or Zipf(1.1) over the cell's keys
  (:func:`draw_ids`; a Zipf rank is mapped to an id by a fixed bijection, so the hot keys are
  spread over the partitions and the load order), ``v`` uniform in ``[0, 100)``; batch ``i`` is
  seeded by (distribution, ``i``) alone, so the ``i``-th batches of two cells of one
  distribution are drawn alike.
* The checked batch: half drawn from the distribution, half from the keys of the steady batches
  before it, so it checks keys the cell changed as well as keys only the load wrote.

Every table is built with numpy and Arrow compute (no per-row Python): 30 M keys load in
seconds.

Invariants: every function is a pure function of its arguments; :func:`expected_checksum` is
what the running aggregate's output for the checked batch must be, from the rows a query was
handed (the load's plus its cell batches), computed without Spark.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness.datagen import key_strings
from bench.harness.operator_queries import load_values
from bench.harness.processor_queries import Checksum
from bench.suites.spark_scale_plan import CHECK_ROWS, DISTRIBUTIONS, ZIPF_S

SEED = 68
ZIPF_STRIDE = 1_000_003  # a prime: rank -> (rank * stride + offset) % keys is a bijection
ZIPF_OFFSET = 7_919

Ids = np.ndarray[Any, Any]
Batch = tuple[Ids, Ids]  # (key ids, v)


def table(ids: Ids, v: Ids) -> pa.Table:
    """The input rows (``k``, ``v``, ``t`` at 0) of key ids ``ids`` with values ``v``."""
    return pa.table(
        {
            "k": key_strings(ids),
            "v": pa.array(np.asarray(v, dtype=np.int64)),
            "t": pa.array(np.zeros(len(ids), dtype=np.int64), pa.timestamp("us", "UTC")),
        }
    )


def load_batch(start: int, stop: int) -> pa.Table:
    """The load rows of key ids ``start .. stop - 1``."""
    ids = np.arange(start, stop, dtype=np.int64)
    return table(ids, load_values(ids))


def load_ranges(counts: list[int], rows: int) -> list[tuple[int, int]]:
    """The id ranges of the load batches reaching each key count of ``counts`` (ascending):
    batches of ``rows`` ids, the last before each count cut short at it."""
    out: list[tuple[int, int]] = []
    start = 0
    for count in sorted(counts):
        while start < count:
            stop = min(count, start + rows)
            out.append((start, stop))
            start = stop
    return out


def zipf_ids(rng: np.random.Generator, n: int, keys: int) -> Ids:
    """``n`` ids of a Zipf(:data:`ZIPF_S`) over ``keys`` ranks (bounded by rejection), each rank
    mapped to an id by ``(rank * ZIPF_STRIDE + ZIPF_OFFSET) % keys``.

    Raises:
        ValueError: the stride is not coprime with ``keys`` (the map would not be a bijection).
    """
    if math.gcd(ZIPF_STRIDE, keys) != 1:
        raise ValueError(f"{keys} keys share a factor with the stride {ZIPF_STRIDE}")
    ranks = np.empty(0, dtype=np.int64)
    while len(ranks) < n:
        draw = rng.zipf(ZIPF_S, size=2 * (n - len(ranks)))
        ranks = np.concatenate([ranks, draw[draw <= keys] - 1])
    return (ranks[:n] * ZIPF_STRIDE + ZIPF_OFFSET) % keys


def draw_ids(rng: np.random.Generator, dist: str, n: int, keys: int) -> Ids:
    """``n`` key ids drawn from ``dist`` (``uniform`` or ``zipf``) over ``keys`` keys."""
    if dist == "zipf":
        return zipf_ids(rng, n, keys)
    return rng.integers(0, keys, n, dtype=np.int64)


def cell_batch(dist: str, index: int, rows: int, keys: int) -> Batch:
    """Batch ``index`` of a cell (0: the restart batch): ``rows`` draws and their values."""
    rng = np.random.default_rng([SEED, list(DISTRIBUTIONS).index(dist), index])
    ids = draw_ids(rng, dist, rows, keys)
    return ids, rng.integers(0, 100, rows, dtype=np.int64)


def check_batch(dist: str, keys: int, before: list[Batch]) -> Batch:
    """The checked batch: half drawn from ``dist``, half from the keys of ``before`` (the
    cell's batches before it)."""
    rng = np.random.default_rng([SEED, list(DISTRIBUTIONS).index(dist), 1_000_000])
    half = CHECK_ROWS // 2
    seen = np.concatenate([ids for ids, _ in before])
    ids = np.concatenate([draw_ids(rng, dist, half, keys), rng.choice(seen, CHECK_ROWS - half)])
    return ids, rng.integers(0, 100, CHECK_ROWS, dtype=np.int64)


def expected_checksum(history: list[Batch], checked: Batch) -> Checksum:
    """(rows, sum n, sum s, sum crc32(k)) of the running aggregate's output for ``checked``,
    after the load and the cell batches ``history`` (each key loaded once with
    :func:`~bench.harness.operator_queries.load_values`)."""
    ids = np.concatenate([b[0] for b in (*history, checked)])
    v = np.concatenate([b[1] for b in (*history, checked)])
    keys = np.unique(checked[0])
    mask = np.isin(ids, keys)
    found, inverse, counts = np.unique(ids[mask], return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=v[mask].astype(np.float64), minlength=len(found))
    n = int(counts.sum()) + len(found)  # the load's row of every key
    s = round(float(sums.sum())) + int(load_values(found).sum())
    crc = sum(zlib.crc32(k.encode()) for k in key_strings(found).to_pylist())
    return len(found), n, s, crc
