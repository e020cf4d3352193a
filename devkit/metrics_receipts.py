"""What one batch's fsstate figures cost the driver: receipts against reading every manifest.

Issue 47: a batch's figures must not cost the driver a read of every partition's manifest from
object storage where a cheaper path exists. This measures both paths of
:mod:`fsstate_spark.metrics.progress` at ``--partitions`` (200) partition stores on the S3 test
server (SeaweedFS, :mod:`devkit.s3_server`, loopback): each store commits version 0, then

* ``receipts``: the figures from the tasks' receipts (what a classic session's accumulator
  holds: each version's summary), no storage request;
* ``manifests``: the figures from the manifests (Spark Connect, or no receipt): one GET per
  partition, :data:`~fsstate_spark.metrics.progress.READ_THREADS` at once.

Run: ``PYTHONPATH=$PWD python -m devkit.metrics_receipts [--partitions 200] [--repeat 7]``;
prints the medians (ms) and the requests each path made.

Invariants: nothing but a temporary directory and the server it starts is touched.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import pyarrow as pa

from devkit.s3_server import SeaweedS3, s3_options
from fsstate import PartitionStore, StoreConfig
from fsstate.storage.location import Location
from fsstate_spark.metrics.progress import _gather, _Operator
from fsstate_spark.receipts import receipt
from fsstate_spark.runtime import fileio_for

KEY = pa.schema([("k", pa.int64())])
VAL = pa.schema([("x", pa.int64())])


def main(argv: list[str] | None = None) -> int:
    """Measure both paths; print one line each."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, SeaweedS3(tmp) as info:
        options = s3_options(info)
        root = Location.parse(f"s3://{info.bucket}/bench", options)
        fileio = fileio_for(root, False)
        summaries = {}
        for p in range(args.partitions):
            store = PartitionStore.open(fileio, "Ledger", p, None, StoreConfig(fsync=False))
            table = store.value_table("total", VAL, KEY)
            for k in range(20):
                table.update((k,), (k,))
            summaries[p] = store.commit(0).summary
            store.close()
        for path in ("receipts", "manifests"):
            times, requests = [], 0
            for _ in range(args.repeat):
                op = _Operator("tiered", "Ledger", fileio, partitions=args.partitions, layout="")
                if path == "receipts":
                    op.receipts = {p: receipt(s, 1.0) for p, s in summaries.items()}
                before = fileio.stats.requests
                t0 = time.perf_counter()
                (progress,), reads = _gather([op], 0)
                times.append((time.perf_counter() - t0) * 1000)
                requests = fileio.stats.requests - before
                assert progress.partitions_reported == args.partitions
            print(
                f"{path}: {args.partitions} partitions, median {statistics.median(times):.1f} ms "
                f"(min {min(times):.1f}, max {max(times):.1f}), manifest reads {reads}, "
                f"storage requests {requests}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
