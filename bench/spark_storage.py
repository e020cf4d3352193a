"""The same Spark job with its tiered state on local disk and on an S3 server on loopback, side
by side in one run (goal: per-batch time on S3 at most 1.25x local disk).

The job is the ``value_count`` query of :mod:`bench.spark_e2e` (pandas flavour, 20,000 keys,
5,000 distinct keys per micro-batch). Two variants differ only in ``state_uri``: a local
directory, or ``s3://<bucket>/...`` on SeaweedFS's ``weed mini`` (started and stopped here, its
settings given through ``tiered(storage_options=...)``). Round by round, each micro-batch runs
in both queries, the one going first alternating; per batch the ratio of Spark's
``triggerExecution`` times (S3 over local) is a sample, the row's value their median.

Beside it, per variant: the per-batch time, the time inside fsstate per batch (state calls,
getting and committing the stores) and the storage requests per batch, summed over the batch's
tasks (each task's worker counts its own).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BenchContext, Result, SuiteSkipped, median, spread_text
from bench.spark_procs import Recorder, ValueCount
from bench.spark_runner import Variant, _read_stats, _run_once, _session, _write_batch
from bench.storage import s3_server

SUITE = "spark_storage"
GOAL_S3_OVER_LOCAL = 1.25
KEYS = 20_000
ROWS_PER_BATCH = 5_000


def run(ctx: BenchContext) -> list[Result]:
    """Run the local-vs-S3 comparison."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SuiteSkipped("pyspark is not installed") from exc
    from fsstate_spark import tiered

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    server = s3_server(ctx)
    info = server.start()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    spark = None
    try:
        opts = {
            "endpoint": info.endpoint,
            "access_key_id": info.access_key,
            "secret_access_key": info.secret_key,
            "region": "us-east-1",
            "allow_http": "true",
        }
        stats_dir = scratch / "stats"
        input_dir = scratch / "input"
        for d in (stats_dir, input_dir):
            d.mkdir(parents=True)
        variants: dict[str, Variant] = {}
        for backend, uri, options in (
            ("local", str(scratch / "state"), None),
            ("s3", f"s3://{info.bucket}/bench", opts),
        ):
            bench = ValueCount(f"storage/{backend}", str(stats_dir), "pandas")
            proc = tiered(bench, state_uri=uri, name=f"count_{backend}", storage_options=options)
            cp = scratch / "checkpoints" / backend
            variants[backend] = Variant("value_count", backend, Recorder(proc, bench), cp, 2)
        spark = _session(ctx, "fsstate-bench-storage")
        rng = np.random.default_rng(KEYS)
        warm, measured = 2, ctx.pick(3, 9)
        for b in range(1 + warm + measured):
            ids = rng.permutation(KEYS) if b == 0 else rng.choice(KEYS, ROWS_PER_BATCH, False)
            rows = _write_batch(input_dir, b, ids)
            order = ["local", "s3"] if b % 2 == 0 else ["s3", "local"]
            for name in order:
                v = variants[name]
                _run_once(spark, v, input_dir)
                ms = v.wall_ms.get(b, float("nan"))
                ctx.log(f"  storage batch {b} {name:<5} {rows:>6} rows {ms / 1000:6.2f} s")
        batches = list(range(1 + warm, 1 + warm + measured))
        return _results(variants, _read_stats(stats_dir), batches)
    finally:
        if spark is not None:
            spark.stop()
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _results(
    variants: dict[str, Variant], stats: list[dict[str, Any]], batches: list[int]
) -> list[Result]:
    local, s3 = variants["local"], variants["s3"]
    pairs = [(s3.wall_ms[b], local.wall_ms[b]) for b in batches if b in s3.wall_ms]
    ratios = [a / c for a, c in pairs]
    common = (
        f"value_count, transformWithStateInPandas, {KEYS:,} keys in state, "
        f"{ROWS_PER_BATCH:,} distinct keys per batch, {len(pairs)} measured batches"
    )
    out = [
        Result(
            SUITE,
            "20k value_count per batch, s3/local",
            median(ratios),
            "x",
            goal=GOAL_S3_OVER_LOCAL,
            goal_op="<=",
            notes=f"Spark's triggerExecution, S3 over local, paired by batch; {common}; "
            f"{spread_text(ratios)}",
            samples=ratios,
        )
    ]
    for name, v in variants.items():
        times = [v.wall_ms[b] / 1000 for b in batches if b in v.wall_ms]
        mine = [x for x in stats if x["tag"] == f"storage/{name}" and x["batch"] in batches]
        per_batch: dict[int, list[dict[str, Any]]] = {}
        for x in mine:
            per_batch.setdefault(x["batch"], []).append(x)
        inside = [
            sum(x["state_s"] + x["acquire_s"] + x["finish_s"] for x in xs) * 1000
            for xs in per_batch.values()
        ]
        reqs = [float(sum(x.get("requests", 0) for x in xs)) for xs in per_batch.values()]
        restored = sum(x["store"] == "restored" for x in mine)
        out.append(
            Result(
                SUITE,
                f"20k value_count per batch, {name}",
                median(times),
                "s",
                notes=(
                    f"{common}; inside fsstate (calls + getting and committing the stores) "
                    f"{median(inside):.0f} ms per batch ({spread_text(inside)}); storage "
                    f"requests per batch {median(reqs):.0f} ({spread_text(reqs)}); "
                    f"{restored} of {len(mine)} tasks restored their store"
                ),
                samples=times,
            )
        )
    return out
