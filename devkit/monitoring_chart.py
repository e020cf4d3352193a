"""The monitoring page's chart from a real run: ``make monitoring-chart``.

Runs a ``tiered()`` streaming query on a local session for :data:`BATCHES` micro-batches (new
keys every batch, keys idle for a few batches expire by TTL, some are deleted, a small memory
budget so the stores spill), with :func:`fsstate_spark.metrics.listen` writing its JSON lines;
then draws state rows, bytes written and commit time per batch from those lines into
``docs/monitoring/monitoring-chart.svg`` and writes the samples beside it
(``monitoring-samples.json``).

Invariants:

* The chart and the samples come from the same JSON lines, the listener's, of one run: the
  samples file holds, per batch, exactly the figures drawn (and the run's settings).
* The processor is defined here (Spark's workers import it as ``devkit.monitoring_chart``).
* The query is stopped and the session stopped before the chart is drawn; nothing is left
  running; state and checkpoint live in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from devkit.repo import ROOT

OUT_DIR = ROOT / "docs" / "monitoring"
CHART = OUT_DIR / "monitoring-chart.svg"
SAMPLES = OUT_DIR / "monitoring-samples.json"
BATCHES = 20
NEW_KEYS = 3000  # keys per batch, 1000 of them the previous batch's
TTL_MS = 2500  # a key idle for about three batches expires
MEMORY_LIMIT = "4MiB"  # small: the stores spill
PARTITIONS = 2
NOTE = "x" * 64


class KeyActivity(StatefulProcessor):
    """Per key: a count and the last value with a note, both with a TTL; a value divisible by
    seven deletes the key's last value."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n BIGINT", TTL_MS)
        self.last = handle.getValueState("last", "v BIGINT, note STRING", TTL_MS)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        vals = [int(x) for pdf in rows for x in pdf["v"]]
        old = self.count.get()
        n = (old[0] if old else 0) + len(vals)
        self.count.update((n,))
        if vals[-1] % 7 == 0:
            self.last.clear()
        else:
            self.last.update((vals[-1], NOTE))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def close(self) -> None:
        """Nothing to release."""


def _batches() -> list[list[dict[str, Any]]]:
    step = NEW_KEYS - 1000
    return [
        [{"k": f"user{i}", "v": b * NEW_KEYS + i} for i in range(b * step, b * step + NEW_KEYS)]
        for b in range(BATCHES)
    ]


def run(work: Path) -> list[dict[str, Any]]:
    """Run the query under ``work``; the listener's JSON lines, one per batch."""
    from devkit.spark_local import local_session, write_batches
    from fsstate_spark import tiered
    from fsstate_spark.metrics import listen

    spark = local_session(
        "fsstate-monitoring-chart", **{"spark.sql.shuffle.partitions": str(PARTITIONS)}
    )
    try:
        write_batches(work / "input", _batches())
        lines = work / "progress.jsonl"
        listener = listen(spark, str(lines))
        processor = tiered(KeyActivity(), state_uri=str(work / "state"), memory_limit=MEMORY_LIMIT)
        frame = (
            spark.readStream.schema("k STRING, v BIGINT")
            .option("maxFilesPerTrigger", 1)
            .json(str(work / "input"))
        )
        out = frame.groupBy("k").transformWithStateInPandas(
            processor, "k STRING, n BIGINT", "Update", "ProcessingTime"
        )
        query = (
            out.writeStream.format("noop")
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            _await(lines, query)
        finally:
            query.stop()
            spark.streams.removeListener(listener)
    finally:
        spark.stop()
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    return sorted(rows, key=lambda r: int(r["batchId"]))[:BATCHES]


def _await(lines: Path, query: Any, timeout_s: float = 600) -> None:
    """Until the listener wrote the last data batch's line (or the query failed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        if lines.exists() and len(lines.read_text().splitlines()) >= BATCHES:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the listener did not report {BATCHES} batches in {timeout_s} s")


def samples(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per batch, the figures the chart draws (summed over the query's one operator)."""
    out = []
    for line in lines:
        (op,) = line["stateOperators"]
        custom = op["customMetrics"]
        out.append(
            {
                "batchId": line["batchId"],
                "numRowsTotal": op["numRowsTotal"],
                "numRowsUpdated": op["numRowsUpdated"],
                "numRowsRemoved": op["numRowsRemoved"],
                "rowsExpired": custom["rowsExpired"],
                "bytesWritten": custom["bytesWritten"],
                "bytesSpilled": custom["bytesSpilled"],
                "memoryUsedBytes": op["memoryUsedBytes"],
                "commitTimeMs": op["commitTimeMs"],
                "commitTimeMsMax": custom["commitTimeMsMax"],
            }
        )
    return out


def draw(points: list[dict[str, Any]], path: Path) -> None:
    """Three panels over batches: state rows (and rows expired), bytes written (and spilled),
    commit time (summed over partitions, and the slowest partition)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    x = [p["batchId"] for p in points]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    rows, written, commit = axes
    rows.plot(x, [p["numRowsTotal"] for p in points], marker="o", label="live state rows")
    rows.bar(x, [p["rowsExpired"] for p in points], color="tab:orange", alpha=0.6,
             label="rows expired by TTL in the batch")  # fmt: skip
    rows.set_ylabel("rows")
    kib = 1024
    written.bar(x, [p["bytesWritten"] / kib for p in points], label="bytes written")
    written.plot(x, [p["bytesSpilled"] / kib for p in points], color="tab:red", marker="s",
                 label="of which spilled")  # fmt: skip
    written.set_ylabel("KiB per batch")
    commit.plot(x, [p["commitTimeMs"] for p in points], marker="o",
                label="commit time, summed over partitions")  # fmt: skip
    commit.plot(x, [p["commitTimeMsMax"] for p in points], marker="^",
                label="slowest partition's commit")  # fmt: skip
    commit.set_ylabel("ms")
    commit.set_xlabel("batch")
    commit.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes:
        ax.legend(loc="upper left", fontsize="small")
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"A tiered() query, {PARTITIONS} partitions, TTL {TTL_MS / 1000:g} s, "
        f"memory limit {MEMORY_LIMIT}"
    )
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """Run the query, write the samples and draw the chart (``--redraw``: from the samples)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redraw", action="store_true", help="draw from the samples file only")
    args = parser.parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    if args.redraw:
        points = json.loads(SAMPLES.read_text())["batches"]
    else:
        with tempfile.TemporaryDirectory(prefix="fsstate-chart-") as tmp:
            points = samples(run(Path(tmp)))
        settings = {
            "batches": BATCHES,
            "new_keys_per_batch": NEW_KEYS,
            "ttl_ms": TTL_MS,
            "memory_limit": MEMORY_LIMIT,
            "partitions": PARTITIONS,
        }
        doc = {"settings": settings, "batches": points}
        SAMPLES.write_text(json.dumps(doc, indent=1) + "\n")
    draw(points, CHART)
    print(f"wrote {CHART.relative_to(ROOT)} and {SAMPLES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
