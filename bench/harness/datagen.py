"""Deterministic, fast generators of benchmark data as Arrow arrays (no per-row Python).

The benchmark rows are ``key: string`` (``"user-000000001234"``, 17 characters) and
``value: (n: int64, s: string)``, where ``s`` is drawn uniformly from a 64-character alphabet
(6 bits of entropy per character, so Parquet cannot compress it away).

Invariants: every generator is deterministic (randomness comes only from the ``numpy``
generator passed in), so two suites, or two sides of a comparison, seeded alike get the same
rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KEY_SCHEMA = pa.schema([pa.field("k", pa.string())])
VALUE_SCHEMA = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])

_ALPHABET = np.frombuffer(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", dtype=np.uint8
)
KEY_PREFIX = "user-"
KEY_DIGITS = 12


def key_strings(ids: np.ndarray[Any, Any] | range) -> pa.Array:
    """Grouping-key strings for integer ids (``user-`` + 12 zero-padded digits)."""
    arr = pa.array(np.asarray(ids, dtype=np.int64))
    padded = pc.utf8_lpad(pc.cast(arr, pa.string()), KEY_DIGITS, "0")
    return pc.binary_join_element_wise(KEY_PREFIX, padded, "")


def key_of(i: int) -> tuple[str]:
    """The grouping-key tuple of id ``i`` (same text as :func:`key_strings`)."""
    return (f"{KEY_PREFIX}{i:0{KEY_DIGITS}d}",)


def random_strings(rng: np.random.Generator, n: int, width: int) -> pa.Array:
    """``n`` random fixed-width strings over a 64-character alphabet."""
    data = _ALPHABET[rng.integers(0, 64, size=n * width, dtype=np.uint8)]
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))


def key_table(ids: np.ndarray[Any, Any] | range) -> pa.Table:
    """A one-column key table (schema :data:`KEY_SCHEMA`)."""
    return pa.Table.from_arrays([key_strings(ids)], schema=KEY_SCHEMA)


def value_table(rng: np.random.Generator, n: int, width: int) -> pa.Table:
    """A value table (schema :data:`VALUE_SCHEMA`) of ``n`` random rows."""
    nums = pa.array(rng.integers(0, 1 << 40, size=n, dtype=np.int64))
    return pa.Table.from_arrays([nums, random_strings(rng, n, width)], schema=VALUE_SCHEMA)


def python_keys(keys: pa.Table) -> list[tuple[Any, ...]]:
    """Key tuples of a key table (what a Python caller would hold)."""
    return list(zip(*[c.to_pylist() for c in keys.columns], strict=True))


def python_values(values: pa.Table) -> list[tuple[Any, ...]]:
    """Value tuples of a value table."""
    return list(zip(*[c.to_pylist() for c in values.columns], strict=True))
