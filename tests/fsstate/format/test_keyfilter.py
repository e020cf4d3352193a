"""Stable key hashes are the same in every process, for keys holding nulls and NaN too: the run
Bloom filters are built by one process and probed by another (a restart, another worker).

Found a data-loss defect: on Python 3.11 ``hash(None)`` and ``hash(nan)`` follow the object's
address, which differs between processes, so after a restart a point read skipped the runs
holding a key with a null (or NaN) field and did not find its state. Version 1 filters, which
carry those hashes, are not used.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from fsstate.format.keyfilter import BloomFilter, stable_hash, stable_hashes
from fsstate.format.schema import py_list
from tests.support.engine import REPO_ROOT

# a key of every type a grouping key can hold, nulls and NaN in several places
KEYS_SOURCE = """[
    (None, 1), (float('nan'), 2), ('a', None), (None, None), (1.5, float('nan')), (-0.0,),
    (7, -3, True, False), ('käse', b'\\x00k'), (dt.date(2024, 5, 1),),
    (dt.datetime(2024, 5, 1, 12, 0, 1), dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)),
    (decimal.Decimal('1.5'), decimal.Decimal('-0.01')), (dt.timedelta(seconds=3),),
]"""
KEYS = eval(KEYS_SOURCE, {"dt": dt, "decimal": decimal})  # the literal above, in-process
STORE_JOB = """
import json, math, sys
import pyarrow as pa
from fsstate import PartitionStore, StoreConfig
from fsstate.controller import configure

configure("1MiB")  # the table is far above the size loaded whole on a first miss
KEY = pa.schema([pa.field("s", pa.string()), pa.field("x", pa.float64())])
VAL = pa.schema([pa.field("n", pa.int64())])
root, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
keys = [(s, x) for i in range(n) for s, x in [(None, float(i)), (str(i), float("nan"))]]
if mode == "write":
    store = PartitionStore.open(root, "op", 0, None, StoreConfig())
    table = store.value_table("v", VAL, KEY)
    for i, k in enumerate(keys):
        table.update(k, (i,))
    store.commit(1)
else:
    store = PartitionStore.open(root, "op", 0, 1, StoreConfig())
    table = store.value_table("v", VAL, KEY)
    runs = len(table.runs)
    found = sum(table.get(k) == (i,) for i, k in enumerate(keys))
    print(json.dumps({"found": found, "keys": len(keys), "runs": runs}))
store.close()
"""


def _in_process(code: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (proc.stdout.strip().splitlines() or [""])[-1]


def test_stable_hash_is_the_same_in_every_process() -> None:
    code = (
        "import datetime as dt, decimal\n"
        "from fsstate.format.keyfilter import stable_hash\n"
        f"print([stable_hash(k) for k in {KEYS_SOURCE}])"
    )
    first, second = _in_process(code), _in_process(code)
    assert first == second
    assert first == str([stable_hash(k) for k in KEYS])


def test_keys_with_null_and_nan_are_found_by_another_process(tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    _in_process(STORE_JOB, root, "write", "3000")
    report = json.loads(_in_process(STORE_JOB, root, "read", "3000"))
    assert report["runs"] >= 2, report  # spilled: point reads go through the runs' filters
    assert report["found"] == report["keys"], report


def test_version_1_filters_are_not_used() -> None:
    bits = bytes(8)  # a filter that would answer "absent" for every key
    v1 = base64.b64encode(struct.pack("<BBI", 1, 7, 64) + bits)
    assert BloomFilter.from_text(v1) is None
    v2 = BloomFilter.from_text(base64.b64encode(struct.pack("<BBI", 2, 7, 64) + bits))
    assert v2 is not None and not v2.may_contain(stable_hash((None,)))


def _draw_columns(seed: int, n: int) -> list[pa.Array]:
    """Key columns of every type ``stable_hashes`` takes, with nulls, extremes and unicode."""
    rng = random.Random(seed)

    def text() -> str:
        return "".join(rng.choice("ab\u00e9\u4e2d\U0001f600xyz") for _ in range(rng.randint(0, 30)))

    def maybe(draw: Any) -> list[Any]:
        return [None if rng.random() < 0.1 else draw() for _ in range(n)]

    edge = [0, -1, 1, -2, 2**61 - 1, 2**61, -(2**61) + 1, 2**63 - 1, -(2**63) + 1]
    micros = (-62135596800000000, 253402300799999999)  # datetime's range
    return [
        pa.array(maybe(text), pa.string()),
        pa.array(maybe(text), pa.large_string()),
        pa.array(maybe(lambda: text().encode()), pa.binary()),
        pa.array(
            maybe(lambda: rng.choice([*edge, rng.randint(-(2**63) + 1, 2**63 - 1)])), pa.int64()
        ),
        pa.array(maybe(lambda: rng.randint(-128, 127)), pa.int8()),
        pa.array(maybe(lambda: rng.random() < 0.5), pa.bool_()),
        pa.array(maybe(lambda: rng.randint(-719162, 2932896)), pa.date32()),
        pa.array(maybe(lambda: rng.randint(*micros)), pa.timestamp("us", "UTC")),
        pa.array(maybe(lambda: rng.randint(*micros)), pa.timestamp("us")),
    ]


def test_vector_hashes_equal_the_tuple_hashes() -> None:
    """``stable_hashes`` (numpy, what a run's Bloom filter is built from) gives exactly
    ``stable_hash`` of every key tuple (what a point read probes with): per type, sliced and
    chunked, and across columns; a type without a vector hash gives None."""
    seed = 3
    cols = _draw_columns(seed, 1500)
    for col in cols:
        for part in (col, col.slice(7, 1000), pa.chunked_array([col.slice(0, 9), col.slice(9)])):
            got = stable_hashes([part])
            arr = part.combine_chunks() if isinstance(part, pa.ChunkedArray) else part
            want = [stable_hash((v,)) for v in py_list(arr)]
            assert got is not None and got.tolist() == want, f"seed {seed}: {col.type}"
    sliced = [c.slice(3) for c in cols]
    got = stable_hashes(sliced)
    want = [stable_hash(k) for k in zip(*[py_list(c) for c in sliced])]
    assert got is not None and got.tolist() == want, f"seed {seed}"
    assert stable_hashes([pa.array([1.5, None])]) is None  # floats: hashed one by one
    assert stable_hashes([pa.array([-(2**63)], pa.int64())]) is None


def test_filters_from_vector_hashes_find_every_key() -> None:
    """A run's filter, built from vector hashes, answers "maybe" for every key it holds, probed
    with the tuple hash of the key as a point read forms it."""
    cols = _draw_columns(5, 400)
    hashes = stable_hashes(cols)
    assert hashes is not None
    bloom = BloomFilter.for_hashes(hashes, len(hashes))
    for key in zip(*[py_list(c) for c in cols]):
        assert bloom.may_contain(stable_hash(key))
