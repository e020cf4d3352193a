"""What Parquet page checksums cost on a state run file: ``python -m bench.page_checksums``.

fsstate writes every run file with page checksums (``write_page_checksum=True``,
:meth:`fsstate.storage.fileio.FileIO.write_parquet` and ``parquet_stream``) and verifies them
when it reads a large file row group by row group (``page_checksum_verification=True``,
:func:`fsstate.storage.backend.parquet_file`): there the manifest's CRC-32 of the whole file
cannot be checked (the whole file is not read). This script measures what the checksums cost.

The file: a value table's run as the engine writes it (``--rows`` keys of the benchmark
rows, :mod:`bench.harness.datagen`, committed through a :class:`fsstate.PartitionStore`, so
the row layout, codec and row-group size are the engine's). Then, on that file's rows, each
side timed ``--repeat`` times (median): encoding the file (as the engine does, in memory)
with and without page checksums, and decoding every row group with and without their
verification; the engine's full scan of the file (:meth:`fsstate.storage.runs.Run.segments`,
from local disk, cold block cache) with and without verification; the whole-file CRC-32 (what
reads of small files and ``fsstate verify`` check) for comparison. Prints one table and the
overheads in percent.

Invariants: nothing outside a temporary directory is written; the data is deterministic
(seeded), the timings are not (run it on an idle machine).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import fsstate.storage.fileio as fileio_module
from bench.harness.datagen import KEY_SCHEMA, VALUE_SCHEMA, key_table, value_table
from fsstate import PartitionStore, StoreConfig
from fsstate.storage.backend import parquet_file
from fsstate.storage.cache import BlockCache
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.storage.runfile import RunContext
from fsstate.storage.runs import Run


def _run_file(tmp: Path, rows: int) -> tuple[pa.Table, pq.FileMetaData, bytes]:
    """A value table's run of ``rows`` keys as the engine writes it under ``tmp``: its rows,
    footer and bytes."""
    rng = np.random.default_rng(7)
    store = PartitionStore.open(str(tmp), "bench", 0, config=StoreConfig(retain_versions=1))
    table = store.value_table("v", VALUE_SCHEMA, KEY_SCHEMA)
    table.put_many(key_table(rng.permutation(rows)), value_table(rng, rows, 32))
    store.commit(0)
    store.close()
    fileio = FileIO(str(tmp))
    [ref] = read_manifest(fileio, "bench/0", 0).tables["v"].runs
    data = fileio.read_bytes(f"bench/0/{ref.path}")
    pf = pq.ParquetFile(pa.BufferReader(data))
    return pf.read(use_threads=False), pf.metadata, data


def _engine_scan(tmp: Path, verify: bool) -> Callable[[], object]:
    """A full scan of the run file through the engine's reader (a file this large is read
    row group by row group, each decoded into a segment), with or without page checksum
    verification, a cold block cache each time."""
    fileio = FileIO(str(tmp))
    entry = read_manifest(fileio, "bench/0", 0).tables["v"]
    [ref] = entry.runs

    def open_unverified(source: object, metadata: object = None) -> pq.ParquetFile:
        return pq.ParquetFile(source, metadata=metadata, page_checksum_verification=False)

    def scan() -> None:
        ctx = RunContext(fileio, "bench/0", StoreConfig(), BlockCache(64 << 20))
        opener = parquet_file if verify else open_unverified
        with mock.patch.object(fileio_module, "parquet_file", opener):
            for _seg in Run(None, ref).segments(entry.spec, ctx):
                pass

    return scan


def _median_ms(call: Callable[[], object], repeat: int) -> float:
    call()  # warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    """Measure and print (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000, help="keys in the run file")
    parser.add_argument("--repeat", type=int, default=15, help="timings per side (median)")
    args = parser.parse_args()
    cfg = StoreConfig()
    with tempfile.TemporaryDirectory() as tmp:
        rows, md, _ = _run_file(Path(tmp), args.rows)
        engine = {
            "engine scan, not verified": _median_ms(_engine_scan(Path(tmp), False), args.repeat),
            "engine scan, verified": _median_ms(_engine_scan(Path(tmp), True), args.repeat),
        }
    group_rows = md.row_group(0).num_rows

    def write(checksum: bool) -> bytes:
        sink = pa.BufferOutputStream()
        pq.write_table(
            rows,
            sink,
            row_group_size=group_rows,
            compression=cfg.compression,
            use_dictionary=False,
            write_page_checksum=checksum,
        )
        encoded: bytes = sink.getvalue().to_pybytes()
        return encoded

    plain, summed = write(False), write(True)

    def read(blob: bytes, verify: bool) -> None:
        pf = pq.ParquetFile(pa.BufferReader(blob), page_checksum_verification=verify)
        for i in range(pf.num_row_groups):
            pf.read_row_group(i, use_threads=False)

    results = {
        "write, no page checksums": _median_ms(lambda: write(False), args.repeat),
        "write, page checksums": _median_ms(lambda: write(True), args.repeat),
        "read by row group, not verified": _median_ms(lambda: read(plain, False), args.repeat),
        "read by row group, verified": _median_ms(lambda: read(summed, True), args.repeat),
        "CRC-32 of the whole file": _median_ms(lambda: zlib.crc32(summed), args.repeat),
        **engine,
    }
    mib = len(summed) / (1 << 20)
    print(
        f"run file: {rows.num_rows} rows, {md.num_row_groups} row groups of {group_rows} rows, "
        f"{cfg.compression}, {len(plain)} bytes without page checksums, {len(summed)} with "
        f"({pa.__version__=}, median of {args.repeat})"
    )
    for name, ms in results.items():
        print(f"  {name:34s} {ms:8.2f} ms  {mib / ms * 1000:8.1f} MiB/s")
    w0, w1 = results["write, no page checksums"], results["write, page checksums"]
    r0, r1 = results["read by row group, not verified"], results["read by row group, verified"]
    e0, e1 = engine["engine scan, not verified"], engine["engine scan, verified"]
    print(
        f"overhead: write {100 * (w1 / w0 - 1):+.1f}%, read {100 * (r1 / r0 - 1):+.1f}%, "
        f"engine scan {100 * (e1 / e0 - 1):+.1f}%"
    )


if __name__ == "__main__":
    main()
