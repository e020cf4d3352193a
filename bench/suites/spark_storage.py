"""The same Spark job with its tiered state on local disk and on an S3 server on loopback, side
by side in one run, at 2 and at 200 shuffle partitions (goals: per-batch time on S3 at most
1.25x local disk at 2 partitions, 1.1x at 200).

The job is the ``value_count`` query of :mod:`bench.suites.spark_e2e` (pandas flavour, 20,000 keys,
5,000 distinct keys per micro-batch). Per partition count, two variants differ only in
``state_uri``: a local directory, or ``s3://<bucket>/...`` on SeaweedFS's ``weed mini`` (started
and stopped here, its settings given through ``tiered(storage_options=...)``); each variant has
its own state and checkpoint. The partition count is ``spark.sql.shuffle.partitions`` when the
variant's query starts (Spark keeps it with the checkpoint): 2 is the session's default of the
other Spark suites, 200 Spark's own default, where each batch commits 200 stores (most with
about 25 keys).

Invariants:

* Every variant reads the same micro-batch files. Round by round, each micro-batch runs in
  every variant (one query run per batch, ``availableNow``), the partition counts in turn and,
  within one, the backend going first alternating; per partition count and batch the ratio of
  Spark's ``triggerExecution`` times (S3 over local) is a sample, the row's value their median
  and its status decided on it. The load batch and the warm-up batches are not measured.
* Beside it, per variant: the per-batch time, the time inside fsstate per batch (state calls,
  getting and committing the stores) and the storage requests per batch by kind (GET, PUT,
  HEAD, LIST, DELETE), each summed over the batch's tasks (each task's worker counts its own,
  from the task's init to the end of its commit: :func:`bench.harness.spark_procs.recorder`).
  For the local disk, a "request" is a file opened, written, listed or removed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.common import BenchContext, Result, median, spread_text
from bench.harness.s3 import s3_options, s3_server
from bench.harness.spark import require_pyspark, session
from bench.harness.spark_procs import ValueCount, recorder
from bench.harness.spark_runner import Variant, read_stats, run_once, write_batch

SUITE = "spark_storage"
GOALS_S3_OVER_LOCAL = {2: 1.25, 200: 1.1}  # shuffle partitions -> goal
KEYS = 20_000
ROWS_PER_BATCH = 5_000
KINDS = ("get", "put", "head", "list", "delete")


def _label(partitions: int) -> str:
    """The start of a partition count's rows (the 2-partition rows keep their first names)."""
    return "20k value_count per batch" + ("" if partitions == 2 else f", {partitions} partitions")


def run(ctx: BenchContext) -> list[Result]:
    """Run the local-vs-S3 comparison at each partition count."""
    require_pyspark()
    from fsstate_spark import tiered

    server = s3_server(ctx)
    info = server.start()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SUITE}-", dir=ctx.tmp_dir))
    spark = None
    try:
        opts = s3_options(info)
        stats_dir = scratch / "stats"
        input_dir = scratch / "input"
        for d in (stats_dir, input_dir):
            d.mkdir(parents=True)
        variants: dict[tuple[int, str], Variant] = {}
        for n in GOALS_S3_OVER_LOCAL:
            for backend, uri, options in (
                ("local", str(scratch / f"state-p{n}"), None),
                ("s3", f"s3://{info.bucket}/bench-p{n}", opts),
            ):
                bench = ValueCount(_tag(n, backend), str(stats_dir), "pandas")
                proc = tiered(
                    bench, state_uri=uri, name=f"count_{backend}_p{n}", storage_options=options
                )
                cp = scratch / "checkpoints" / f"{backend}-p{n}"
                variants[(n, backend)] = Variant(
                    "value_count", backend, recorder(proc, bench), cp, 2
                )
        spark = session(ctx, "fsstate-bench-storage")
        rng = np.random.default_rng(KEYS)
        warm, measured = 2, ctx.pick(3, 9)
        for b in range(1 + warm + measured):
            ids = rng.permutation(KEYS) if b == 0 else rng.choice(KEYS, ROWS_PER_BATCH, False)
            rows = write_batch(input_dir, b, ids)
            order = ["local", "s3"] if b % 2 == 0 else ["s3", "local"]
            for n in GOALS_S3_OVER_LOCAL:
                for name in order:
                    v = variants[(n, name)]
                    # read at the query's first start, then from its checkpoint
                    spark.conf.set("spark.sql.shuffle.partitions", str(n))
                    run_once(spark, v, input_dir)
                    ms = v.wall_ms.get(b, float("nan"))
                    ctx.log(
                        f"  storage batch {b} {n:>3} partitions {name:<5} {rows:>6} rows "
                        f"{ms / 1000:6.2f} s"
                    )
        batches = list(range(1 + warm, 1 + warm + measured))
        stats = read_stats(stats_dir)
        out: list[Result] = []
        for n in GOALS_S3_OVER_LOCAL:
            out += _results(n, variants, stats, batches)
        return out
    finally:
        if spark is not None:
            spark.stop()
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _tag(partitions: int, backend: str) -> str:
    return f"storage/{backend}" if partitions == 2 else f"storage/{backend}/p{partitions}"


def _results(
    partitions: int,
    variants: dict[tuple[int, str], Variant],
    stats: list[dict[str, Any]],
    batches: list[int],
) -> list[Result]:
    """The rows of one partition count: S3 over local (the goal), then each backend's."""
    local, s3 = variants[(partitions, "local")], variants[(partitions, "s3")]
    pairs = [(s3.wall_ms[b], local.wall_ms[b]) for b in batches if b in s3.wall_ms]
    ratios = [a / c for a, c in pairs]
    common = (
        f"value_count, transformWithStateInPandas, {partitions} shuffle partitions, "
        f"{KEYS:,} keys in state, {ROWS_PER_BATCH:,} distinct keys per batch, "
        f"{len(pairs)} measured batches"
    )
    out = [
        Result(
            SUITE,
            f"{_label(partitions)}, s3/local",
            median(ratios),
            "x",
            goal=GOALS_S3_OVER_LOCAL[partitions],
            goal_op="<=",
            notes=f"Spark's triggerExecution, S3 over local, paired by batch; {common}; "
            f"{spread_text(ratios)}",
            samples=ratios,
        )
    ]
    for name in ("local", "s3"):
        out += _backend_rows(partitions, name, variants[(partitions, name)], stats, batches, common)
    return out


def _backend_rows(
    partitions: int,
    name: str,
    v: Variant,
    stats: list[dict[str, Any]],
    batches: list[int],
    common: str,
) -> list[Result]:
    """One backend's batch time (with the time inside fsstate and the stores' outcomes in the
    notes) and its storage requests per batch."""
    label = _label(partitions)
    times = [v.wall_ms[b] / 1000 for b in batches if b in v.wall_ms]
    mine = [x for x in stats if x["tag"] == _tag(partitions, name) and x["batch"] in batches]
    per_batch: dict[int, list[dict[str, Any]]] = {}
    for x in mine:
        per_batch.setdefault(x["batch"], []).append(x)
    inside = [
        sum(x["state_s"] + x["acquire_s"] + x["finish_s"] for x in xs) * 1000
        for xs in per_batch.values()
    ]
    reqs = [float(sum(x.get("requests", 0) for x in xs)) for xs in per_batch.values()]
    outcomes = {s: sum(x["store"] == s for x in mine) for s in ("hit", "caught_up", "restored")}
    return [
        Result(
            SUITE,
            f"{label}, {name}",
            median(times),
            "s",
            notes=(
                f"{common}; inside fsstate (calls + getting and committing the stores) "
                f"{median(inside):.0f} ms per batch ({spread_text(inside)}); "
                f"{len(mine) // max(1, len(per_batch))} tasks per batch; their stores: "
                f"{outcomes['hit']} hit, {outcomes['caught_up']} caught up, "
                f"{outcomes['restored']} restored"
            ),
            samples=times,
        ),
        Result(
            SUITE,
            f"{label}, {name} requests per batch",
            median(reqs),
            "requests",
            notes=(
                f"storage requests per batch summed over its tasks (medians by kind: "
                f"{_requests_by_kind(per_batch)}); {spread_text(reqs)}; {common}"
            ),
            samples=reqs,
        ),
    ]


def _requests_by_kind(per_batch: dict[int, list[dict[str, Any]]]) -> str:
    """``GET 12, PUT 3, ...``: the median per batch of each kind of request."""
    by_kind = {
        k: median(
            [
                float(sum((x.get("requests_by_kind") or {}).get(k, 0) for x in xs))
                for xs in per_batch.values()
            ]
        )
        for k in KINDS
    }
    return ", ".join(f"{k.upper()} {v:.0f}" for k, v in by_kind.items())
