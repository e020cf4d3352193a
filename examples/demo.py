"""fsstate demo: a real streaming query whose state lives in fsstate (``make demo``).

It writes a few micro-batches of synthetic clicks under ``demo_state/input``, runs the
``SessionTracker`` processor with ``tiered(...)`` (state under ``demo_state/state``), prints
each micro-batch's output, fsstate's figures of every batch (live rows, rows updated, removed
and expired, bytes written, commit time: :func:`fsstate_spark.metrics.listen`, whose JSON lines
also go to ``demo_state/fsstate-progress.jsonl``), then the state on storage: files, bytes,
committed versions and per-table rows of every partition store. Everything lives under
``demo_state/``, which is recreated on every run.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

from devkit.repo import ROOT
from devkit.spark_local import local_session, write_batches
from examples.session_tracker import INPUT_SCHEMA, OUTPUT_SCHEMA, SessionTracker
from fsstate.inspect import find_stores
from fsstate_spark import state_summary, tiered
from fsstate_spark.metrics import BatchProgress, listen

DEMO_DIR = ROOT / "demo_state"
BATCHES = 4
USERS = 12
CLICKS_PER_BATCH = 60
PAGES = ["home", "search", "product", "cart", "checkout", "help"]


def make_clicks(seed: int = 7) -> list[list[dict[str, Any]]]:
    """Synthetic clicks, deterministic for a seed."""
    rng = random.Random(seed)
    batches = []
    for b in range(BATCHES):
        batch = []
        for i in range(CLICKS_PER_BATCH):
            user = f"user{rng.randrange(USERS):02d}"
            batch.append({"user": user, "page": rng.choice(PAGES), "ms": b * 60_000 + i * 500})
        batches.append(batch)
    return batches


def run_demo_query(
    spark: Any, work_dir: Path, state_uri: str, show: Any | None = None
) -> tuple[list[int], float]:
    """Write the demo's input under ``work_dir/input`` and run its query to the end.

    Args:
        spark: the session (the demo's own, or a test's).
        work_dir: input and checkpoint go here.
        state_uri: where the tiered state goes.
        show: ``foreachBatch`` function of each micro-batch's output; it must consume the
            batch (default: count it; Spark checks that every stateful partition committed).

    Returns:
        The micro-batch ids run, and the seconds it took.
    """
    write_batches(work_dir / "input", make_clicks())
    # no no-data micro-batches: with TTL in ProcessingTime mode Spark would otherwise keep
    # scheduling them, and an availableNow query would never end
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    processor = tiered(SessionTracker(), state_uri=state_uri, name="sessions")
    print(f"state_uri={state_uri} memory_limit={processor.config.memory_limit_bytes} bytes")
    worker = spark.sparkContext.getConf().get("spark.python.worker.module", "pyspark.worker")
    loop = (
        "fsstate's keyed loop" if worker == "pyspark_fsstate.worker" else "PySpark's per-key loop"
    )
    print(f"python worker: {worker} ({loop} runs tiered() in Spark's transformWithState)")
    clicks = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(work_dir / "input"))
    )
    sessions = clicks.groupBy("user").transformWithStateInPandas(
        processor, OUTPUT_SCHEMA, "Update", "ProcessingTime"
    )
    done: list[int] = []

    def sink(batch: Any, batch_id: int) -> None:
        if show is not None:
            show(batch, batch_id)
        else:
            batch.count()
        done.append(batch_id)

    started = time.monotonic()
    query = (
        sessions.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(work_dir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(600)
    query.stop()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    return done, time.monotonic() - started


def print_figures(reports: list[BatchProgress], lines: Path) -> None:
    """fsstate's figures of each batch, as the listener reported them."""
    print(f"\n== fsstate's figures per batch (the listener's JSON lines: {lines.name})")
    print(f"   {'batch':>5} {'rows':>5} {'updated':>7} {'removed':>7} {'expired':>7} "
          f"{'written':>9} {'commit ms':>9}")  # fmt: skip
    for p in sorted(reports, key=lambda r: r.batch_id):
        for op in p.operators:
            m = op.to_json()
            custom = m["customMetrics"]
            print(f"   {p.batch_id:>5} {m['numRowsTotal']:>5} {m['numRowsUpdated']:>7} "
                  f"{m['numRowsRemoved']:>7} {custom['rowsExpired']:>7} "
                  f"{custom['bytesWritten']:>9} {m['commitTimeMs']:>9.1f}")  # fmt: skip


def main(state_uri: str | None = None) -> None:
    """Run the demo query and print what happened.

    Args:
        state_uri: where the state goes (default: ``demo_state/state``); an ``s3://`` URI takes
            its server and credentials from the ``AWS_*`` variables (see ``demo_s3.py``).
    """
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    spark = local_session("fsstate-demo")
    state_uri = state_uri or str(DEMO_DIR / "state")

    def show(batch: Any, batch_id: int) -> None:
        rows = sorted(batch.collect(), key=lambda r: r.user)
        if not rows:
            return  # no-data micro-batch (Spark runs them for TTL and timers)
        print(f"\n== micro-batch {batch_id}: {len(rows)} users updated")
        print(f"   {'user':<8} {'events':>6} {'pages':>5}  {'top page':<9} recent")
        for r in rows[:6]:
            print(f"   {r.user:<8} {r.events:>6} {r.distinct_pages:>5}  {r.top_page:<9} {r.recent}")
        if len(rows) > 6:
            print(f"   ... {len(rows) - 6} more")

    reports: list[BatchProgress] = []
    lines = DEMO_DIR / "fsstate-progress.jsonl"
    listener = listen(spark, lines, sinks=[reports.append])
    done, elapsed = run_demo_query(spark, DEMO_DIR, state_uri, show)
    deadline = time.monotonic() + 10  # Spark's listener bus delivers progress asynchronously
    while len(reports) < len(done) and time.monotonic() < deadline:
        time.sleep(0.1)
    spark.streams.removeListener(listener)
    print_figures(reports, lines)
    print(f"\n== {len(done)} micro-batches in {elapsed:.1f}s; state on storage:")
    summary = state_summary(state_uri)
    print(summary.format())
    for store in sorted(find_stores(state_uri), key=lambda s: (s.operator, s.partition)):
        # each query run writes a lineage of its own (fsstate.store.lineage); its history
        # reaches into the lineage it went on from
        line = f"lineage {store.branch}" if store.branch else "the trunk"
        print(f"  partition {store.partition}: {line}, versions {list(store.history())}")
    rows = summary.rows_by_table()
    print(f"  rows on disk per state variable: {rows}")
    print(f"  inspect it: python -m fsstate stats {state_uri} --live-rows")
    spark.stop()


if __name__ == "__main__":
    main()
