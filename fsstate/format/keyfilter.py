"""Stable key hashing and per-run Bloom filters for pruned point lookups.

Python's ``hash()`` of strings changes from process to process, and so does its hash of
``None`` (before Python 3.12) and of a float NaN (the object's address), so anything persisted
or compared across processes uses :func:`stable_hash`: numbers (ints, floats, Decimals) and
bools hash by value (CPython's numeric hash is not randomized), None and NaN by constants,
strings and bytes by CRC-32 of their bytes, datetimes by their microsecond offset from the
epoch, dates by ordinal, everything else by its ``repr``. Equal keys hash equal whatever their
representation (a ``ZoneInfo('UTC')`` and a ``timezone.utc`` datetime of the same instant,
``Decimal('1.5')`` and ``Decimal('1.50')``, every NaN).

:func:`stable_hashes` computes the same hashes for whole Arrow key columns with numpy (a run's
Bloom filter hashes every distinct key it holds; one Python call per key was a third of an
epoch's commit): strings and binaries (a table-driven CRC-32 over the data buffer), integers
and booleans (CPython's integer hash: modulo 2**61 - 1, sign kept, -1 hashing to -2), ``date32``
and microsecond timestamps, nulls. Other types (floats, decimals, other units) give None and
the caller hashes tuples one by one. Both paths must agree bit for bit (the tests compare them).

Bloom filter format (version 2), stored base64 in the Parquet footer key
``fsstate.bloom``: 1 byte version, 1 byte ``k`` (probes), 4 bytes little-endian ``m`` (bits),
then ``ceil(m / 8)`` bytes of bits. Probe ``i`` of hash ``h`` tests bit
``(h1 + i * h2) mod m`` with ``h1 = h & 0xffffffff`` and ``h2 = (h >> 32) | 1``.
Version 1 hashed None and NaN by ``hash()``, which differs between processes: another process
would not find a key holding a null or NaN through such a filter, so a version 1 filter is not
used (:meth:`BloomFilter.from_text` gives None; the run is read as if it had no filter) and
compaction rewrites it as version 2.

Invariants:

* A filter never answers "absent" for a key that was added (no false negatives).
* At 10 bits per key and 7 probes the false-positive rate is about 1 %.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_MASK64 = (1 << 64) - 1
_VERSION = 2
_UNTRUSTED_VERSIONS = (1,)  # process-specific hashes of None and NaN (see the module docstring)
_NONE_HASH = 0x3C6EF372FE94F82B
_NAN_HASH = 0x1F83D9ABFB41BD6B
_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MICRO = _dt.timedelta(microseconds=1)
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_INT_MODULUS = (1 << 61) - 1  # CPython's hash modulus for numbers (64-bit builds)
_DATE_ORDINAL = 719163  # date(1970, 1, 1).toordinal()
_LENGTH_MAX = 4096  # longer strings: hashed one by one (the vector loop runs per byte)


def _elem_hash(v: Any) -> int:
    t = type(v)
    if t is str:
        return zlib.crc32(v.encode("utf-8", "surrogatepass")) * 0x9E3779B1
    if v is None:
        return _NONE_HASH
    if t is float:
        return hash(v) if v == v else _NAN_HASH
    if t is int or t is bool:
        return hash(v)
    if t is bytes:
        return zlib.crc32(v) * 0x85EBCA77
    # canonical forms: equal values hash equal whatever their representation
    if isinstance(v, _dt.datetime):
        epoch = _EPOCH if v.tzinfo is None else _EPOCH_UTC
        return hash((v - epoch) // _MICRO) * 0x27D4EB2F
    if isinstance(v, _dt.date):
        return v.toordinal() * 0x165667B1
    if isinstance(v, _dt.timedelta):
        return hash(v // _MICRO) * 0x27D4EB2F
    if isinstance(v, (decimal.Decimal, int, float)):
        if v != v:  # a NaN float subclass or Decimal NaN
            return _NAN_HASH
        return hash(v)  # numeric hashes are not randomized and agree across types
    return zlib.crc32(repr(v).encode()) * 0xC2B2AE3D


def stable_hash(key: tuple[Any, ...]) -> int:
    """A 64-bit hash of a key tuple that is the same in every process."""
    h = _FNV_OFFSET
    for v in key:
        h = ((h ^ (_elem_hash(v) & _MASK64)) * _FNV_PRIME) & _MASK64
    return h ^ (h >> 29)


def _crc_table() -> np.ndarray[Any, Any]:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
    return table.astype(np.uint32)


_CRC_TABLE = _crc_table()


def _crc32(arr: pa.Array) -> np.ndarray[Any, Any] | None:
    """zlib's CRC-32 of every value of a string or binary array (nulls: any value)."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)
    offsets = offsets[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_valid()), lengths, 0)
    if n and int(lengths.max()) > _LENGTH_MAX:
        return None
    order = np.argsort(-lengths, kind="stable")  # longest first: the active rows are a prefix
    starts, sorted_lengths = offsets[:-1][order], lengths[order]
    steps = np.arange(int(sorted_lengths[0]) if n else 0)
    active = np.searchsorted(-sorted_lengths, -steps, "left")  # rows longer than each step
    crc = np.full(n, 0xFFFFFFFF, dtype=np.uint32)
    for i, m in enumerate(active):  # rows longer than i: the first m
        c = crc[:m]
        crc[:m] = _CRC_TABLE[(c ^ data[starts[:m] + i]) & 0xFF] ^ (c >> np.uint32(8))
    out = np.empty(n, dtype=np.uint64)
    out[order] = (crc ^ np.uint32(0xFFFFFFFF)).astype(np.uint64)
    return out


def _int_hash(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """CPython's ``hash()`` of int64 values, as uint64 (two's complement)."""
    if v.size and v.min() == np.iinfo(np.int64).min:
        return None
    r = np.abs(v) % np.int64(_INT_MODULUS)
    r = np.where(v < 0, -r, r)
    r = np.where(r == -1, np.int64(-2), r)
    return r.astype(np.uint64)


def _column_hashes(arr: pa.Array) -> np.ndarray[Any, Any] | None:
    """Each value's element hash (``_elem_hash``) as uint64, or None for another type."""
    t = arr.type
    with np.errstate(over="ignore"):
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            crc = _crc32(arr)
            out = None if crc is None else crc * np.uint64(0x9E3779B1)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            crc = _crc32(arr)
            out = None if crc is None else crc * np.uint64(0x85EBCA77)
        elif pa.types.is_integer(t) and t != pa.uint64():
            out = _int_hash(arr.cast(pa.int64()).fill_null(0).to_numpy())
        elif pa.types.is_boolean(t):
            out = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint64)
        elif pa.types.is_date32(t):
            days = arr.cast(pa.int32()).fill_null(0).to_numpy().astype(np.int64)
            out = (days + _DATE_ORDINAL).astype(np.uint64) * np.uint64(0x165667B1)
        elif pa.types.is_timestamp(t) and t.unit == "us":
            h = _int_hash(arr.cast(pa.int64()).fill_null(0).to_numpy())
            out = None if h is None else h * np.uint64(0x27D4EB2F)
        else:
            return None
    if out is not None and arr.null_count:
        out = np.where(np.asarray(arr.is_valid()), out, np.uint64(_NONE_HASH))
    return out


def stable_hashes(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray[Any, Any] | None:
    """``stable_hash`` of every row's key tuple of the (flattened) key columns, as uint64, or
    None if a column's type has no vector hash here (see the module docstring)."""
    if not columns:
        return None
    n = len(columns[0])
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in columns:
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            e = _column_hashes(arr)
            if e is None:
                return None
            h = (h ^ e) * np.uint64(_FNV_PRIME)
    out: np.ndarray[Any, Any] = h ^ (h >> np.uint64(29))
    return out


class BloomFilter:
    """A fixed-size Bloom filter over stable key hashes."""

    __slots__ = ("bits", "k", "m")

    def __init__(self, m: int, k: int, bits: bytearray | bytes | None = None) -> None:
        self.m = max(8, m)
        self.k = k
        self.bits = bytearray((self.m + 7) // 8) if bits is None else bits

    @classmethod
    def for_hashes(
        cls, hashes: Iterable[int] | np.ndarray[Any, Any], n: int, bits_per_key: int = 10
    ) -> BloomFilter:
        """Build a filter sized for ``n`` keys from their stable hashes."""
        m = max(64, n * bits_per_key)
        k = 7
        if isinstance(hashes, np.ndarray):
            h = hashes.astype(np.uint64, copy=False)
        else:
            h = np.fromiter(hashes, dtype=np.uint64, count=n)
        h1 = h & np.uint64(0xFFFFFFFF)
        h2 = (h >> np.uint64(32)) | np.uint64(1)
        marks = np.zeros(m, dtype=bool)
        for i in range(k):
            marks[(h1 + np.uint64(i) * h2) % np.uint64(m)] = True
        bits = bytearray(np.packbits(marks, bitorder="little").tobytes())
        return cls(m, k, bits)

    def may_contain(self, h: int) -> bool:
        """False only if the key with stable hash ``h`` was never added."""
        bits, m = self.bits, self.m
        h1 = h & 0xFFFFFFFF
        h2 = (h >> 32) | 1
        for i in range(self.k):
            b = (h1 + i * h2) % m
            if not bits[b >> 3] & (1 << (b & 7)):
                return False
        return True

    @property
    def nbytes(self) -> int:
        """Bytes held by the bit array."""
        return len(self.bits)

    def to_text(self) -> str:
        """Serialized form (see the module docstring)."""
        raw = struct.pack("<BBI", _VERSION, self.k, self.m) + bytes(self.bits)
        return base64.b64encode(raw).decode("ascii")

    @classmethod
    def from_text(cls, text: str | bytes) -> BloomFilter | None:
        """Inverse of :meth:`to_text`, or None for a version 1 filter (not to be trusted; see
        the module docstring); raises ValueError on a damaged filter."""
        raw = base64.b64decode(text)
        if len(raw) < 6:
            raise ValueError("bloom filter too short")
        version, k, m = struct.unpack("<BBI", raw[:6])
        if version in _UNTRUSTED_VERSIONS:
            return None
        if version != _VERSION or len(raw) - 6 != (m + 7) // 8:
            raise ValueError(f"bloom filter version {version} / size mismatch")
        return cls(m, k, raw[6:])
