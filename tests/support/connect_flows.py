"""Every kind of fsstate operator flow, run the same way on a classic session or a Connect client.

:func:`write_inputs` writes the micro-batches (one JSON file per batch and source) once;
:func:`run_flows` runs one ``ops.write_stream`` query per flow (on a classic session all at
once, on Spark Connect one after the other) and returns each flow's rows per micro-batch. The
sink (:class:`FileSink`) writes a batch's rows, as JSON text made by Spark (``to_json``, times
in the session's UTC), to ``<work>/out/<flow>/<batch id>.json``: on Spark Connect it runs in a
Python process of the server, so files are how its rows come back.

Run as a Spark Connect client (``test_connect_flows.py`` does, in its own process: a Python
process is either a classic or a Connect client)::

    SPARK_REMOTE=sc://localhost:PORT/;token=... python -m tests.support.connect_flows \\
        --input DIR --work DIR [--go FILE]

It checks that what a Connect client cannot tell is refused (:func:`refusals`), prepares the
flows' writers, waits for ``FILE`` to exist if given, runs the flows and prints one line
``RESULT {"session", "flows", "refusals"}``. :func:`connect_server` serves Spark Connect from a
classic session's JVM (the suite's), as ``SparkSession.builder.remote("local[2]")`` does from a
JVM of its own; the flows' ``foreachBatch`` functions then run in Python processes that JVM
starts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import faulthandler
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from devkit.spark_local import write_batches
from examples import max_by_category as mbc
from fsstate.errors import ConfigError
from fsstate_spark import operators as ops
from tests.support.batch_processors import RunningStats
from tests.support.driver_processors import EVENT_INPUT, EVENT_OUTPUT, EventTimers
from tests.support.migration_processors import INIT_SCHEMA, Basket
from tests.support.migration_processors import OUTPUT_SCHEMA as BASKET_OUTPUT
from tests.support.processors import ROW_SCHEMA, SINK_BATCHES, RowCounter

EVENTS = "k string, t bigint, v bigint, id string"
BATCHES = 3  # of the event streams
PARTITIONS = 2
AGGS = [ops.Agg("count"), ops.Agg("sum", "v"), ops.Agg("min", "v"), ops.Agg("avg", "v")]
STUCK = "stuck"  # ``<work>/stuck-<flow>``: the flow has run for more than STUCK_S
STUCK_S = 90
# the JVM threads a stuck query waits in: its stream, its foreachBatch runner, tasks, Connect
STUCK_THREADS = ("stream execution", "Executor task launch", "python", "foreach", "grpc")
SINK_ALARM_S = 60  # a flow's process not back in its sink after this prints its threads


def _events(seed: int) -> list[list[dict[str, Any]]]:
    """Rows at about ``100 + 8 * batch`` seconds, up to 20 s early (late rows, closed windows)."""
    rng = random.Random(seed)
    out = []
    for b in range(BATCHES):
        rows = [
            {
                "k": rng.choice(["a", "b", "c", None]),
                "t": 100 + 8 * b + rng.randint(-20, 6),
                "v": None if rng.random() < 0.1 else rng.randint(-50, 50),
                "id": f"{b}-{j}",
            }
            for j in range(8)
        ]
        out.append(rows)
    return out


def _t(seconds: int) -> str:
    return (dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)).isoformat()


TIMED = [  # EventTimers' input: event-time timers, late rows, keys expiring together
    [
        {"k": "a", "v": 1, "t": _t(10)},
        {"k": "b", "v": 4, "t": _t(10)},
        {"k": "c", "v": 2, "t": _t(30)},
    ],
    [
        {"k": "a", "v": 8, "t": _t(40)},
        {"k": "d", "v": 3, "t": _t(40)},
        {"k": "b", "v": 5, "t": _t(5)},
    ],
    [{"k": "e", "v": 12, "t": _t(60)}, {"k": "c", "v": 7, "t": _t(20)}],
]
INIT_ROWS = [
    ("a", "total", 10, None, None, None),
    ("a", "recent", None, ["p", "q"], None, None),
    ("a", "counts", None, None, "p", 2),
    ("c", "total", 7, None, None, None),
    ("e", "total", 3, None, None, None),
]


def write_inputs(root: Path) -> None:
    """Every flow's input files under ``root`` (one directory per source)."""
    write_batches(root / "events", _events(1))
    write_batches(root / "events2", _events(2))
    write_batches(root / "info", [i for i, _ in mbc.SEED_BATCHES])
    write_batches(root / "visit", [v for _, v in mbc.SEED_BATCHES])
    write_batches(root / "timed", TIMED)
    write_batches(root / "rows", SINK_BATCHES)


class FileSink:
    """``sink(df, batch_id)``: the batch's rows as sorted JSON texts, in one file per batch."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # the flow's process prints its threads' stacks if it is still in this batch, or has not
        # reached the next batch's sink, after SINK_ALARM_S (each call sets the alarm again)
        faulthandler.dump_traceback_later(SINK_ALARM_S, exit=False)
        rows = sorted(r[0] for r in df.select(F.to_json(F.struct(*df.columns))).collect())
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, self.directory / f"{batch_id:04d}.json")


def flows(spark: SparkSession, root: Path) -> dict[str, ops.Flow]:
    """Every operator kind as a flow over the inputs under ``root``."""

    def read(name: str, schema: str) -> DataFrame:
        return (
            spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(root / name))
        )

    def events(name: str = "events") -> DataFrame:
        return read(name, EVENTS).withColumn("t", F.timestamp_seconds("t"))

    wm = ("t", "5 seconds")
    window = ops.Window(size_ms=10_000)
    sliding = ops.Window(size_ms=10_000, slide_ms=5_000)
    joined = ops.interval_join(
        ops.source(events(), watermark=wm),
        ops.source(events("events2"), watermark=("t", "3 seconds")),
        on=["k"],
        left_time="t",
        right_time="t",
        lower_ms=4_000,
        upper_ms=6_000,
        how="left_outer",
    )
    init = spark.createDataFrame(INIT_ROWS, INIT_SCHEMA).groupBy("k")
    timed = read("timed", EVENT_INPUT).withWatermark("t", "10 seconds").groupBy("k")
    timers = ops.transform_with_state_in_pandas(  # event-time timers, then Basket's input
        timed, EventTimers(), EVENT_OUTPUT, "Update", "EventTime"
    ).transform(lambda df: df.select("k", F.col("kind").alias("item"), F.col("total").alias("v")))
    counted = ops.transform_with_state(
        read("rows", "k STRING, v BIGINT").groupBy("k"), RowCounter(), ROW_SCHEMA, "Update", "None"
    )
    return {  # one query each: several operator kinds in a chain where it is natural
        "deduplicate_window_tumbling_append": ops.source(events(), watermark=wm)
        .deduplicate(keys=["k", "v"], time="t")
        .window_aggregate(keys=["k"], time="t", window=window, aggs=AGGS),
        "window_sliding_update": ops.source(events(), watermark=wm).window_aggregate(
            keys=["k"], time="t", window=sliding, aggs=AGGS, mode="update"
        ),
        "session_aggregate": ops.source(events(), watermark=("t", "4 seconds")).session_aggregate(
            keys=["k"], time="t", gap_ms=3_000, aggs=AGGS
        ),
        "interval_join": joined.transform(
            lambda df: df.select(F.col("left.id").alias("l_id"), F.col("right.id").alias("r_id"))
        ),
        "changelog_join_retract_aggregate": mbc.flow(*mbc.streams(spark, root)),
        "transform_with_state_process": counted.transform(
            lambda df: df.select(
                "k",
                F.col("count").alias("v"),
                F.when(F.col("count") % 3 == 0, "reset").otherwise("add").alias("op"),
            )
        ).process(RunningStats(), keys=["k"]),
        "transform_with_state_in_pandas_twice": ops.transform_with_state_in_pandas(
            timers.group_by("k"), Basket(), BASKET_OUTPUT, "Update", "None", initialState=init
        ),
    }


def run_flows(
    spark: SparkSession, root: Path, work: Path, *, together: bool, go: Path | None = None
) -> dict[str, list[list[str]]]:
    """Every flow's rows per micro-batch (``[batch 0 rows, batch 1 rows, ...]``).

    ``together``: start every query at once (classic). On Spark Connect each query's
    ``foreachBatch`` function runs in a new Python process of the server, which must connect
    back within Spark's fixed 10 s: queries run one after the other there, so that no start
    competes with running queries for the CPU. ``go``: a file whose existence starts the
    queries, once their writers are ready (the test runs the classic flows meanwhile).
    """
    writers = {
        name: ops.write_stream(
            flow,
            checkpoint_location=str(work / "ckpt" / name),
            sink=FileSink(work / "out" / name),
            partitions=PARTITIONS,
        ).trigger(availableNow=True)
        for name, flow in flows(spark, root).items()
    }
    while go is not None and not go.exists():
        time.sleep(0.2)
    out: dict[str, list[list[str]]] = {}
    started = []
    t0 = time.monotonic()
    for name, writer in writers.items():
        started.append((name, _start(writer, name)))
        if not together:
            _finish(*started.pop(), work, out, writer)
            print(f"{name}: {time.monotonic() - t0:.1f} s", flush=True)
    for name, query in started:
        _finish(name, query, work, out)
    faulthandler.cancel_dump_traceback_later()  # the sinks' alarm, where they ran here
    print(f"flows took {time.monotonic() - t0:.1f} s", flush=True)
    return out


def _start(writer: Any, name: str, attempts: int = 6) -> Any:
    """``writer.start()``, again when Spark's Python process for the query's ``foreachBatch``
    did not connect back within Spark's fixed 10 s: its imports (pyspark from Spark's zip, not
    byte-compiled) take 2-3 s of CPU, more than 10 s on a machine busy with other work. Waits
    longer after each failure, for the load to pass."""
    for attempt in range(1, attempts + 1):
        try:
            return writer.start()
        except Exception as exc:
            if "connect back" not in str(exc) or attempt == attempts:
                raise
            print(f"flow {name!r}: foreachBatch worker too slow to start, again", flush=True)
            time.sleep(5 * attempt)
    raise AssertionError("unreachable")


def _finish(
    name: str,
    query: Any,
    work: Path,
    out: dict[str, list[list[str]]],
    writer: Any = None,
    timeout_s: float = 300,
) -> None:
    """Wait for ``query`` to end, then read its batches' files.

    A query still running after ``STUCK_S`` (a flow takes a few seconds) is stuck: it writes
    ``<work>/stuck-<name>``, waits for the test to save the JVM's threads
    (``<work>/<name>.dumped``), and, given its ``writer``, is stopped and started again from
    its checkpoint, once (a batch of one flow hung now and then in the full suite, cause not
    found: the re-run must give the same rows, and the test reports the restart with the
    threads). A query still running after ``timeout_s`` is stopped and named.
    """
    t0 = time.monotonic()
    while not query.awaitTermination(5):
        waited = time.monotonic() - t0
        if waited > STUCK_S and not (work / f"{STUCK}-{name}").exists():
            print(f"flow {name!r} running for {waited:.0f} s: {query.status}", flush=True)
            mark_stuck(work, name)
            if writer is not None:  # once: the stuck file now exists
                query.stop()
                query = _start(writer, name)
        if waited > timeout_s:
            status = query.status
            query.stop()
            raise AssertionError(f"flow {name!r} still running after {timeout_s} s: {status}")
    if query.exception() is not None:
        raise RuntimeError(f"flow {name!r} failed: {query.exception()}")
    files = sorted((work / "out" / name).glob("*.json"))
    assert [int(f.stem) for f in files] == list(range(len(files))), (name, files)
    out[name] = [json.loads(f.read_text()) for f in files]


def mark_stuck(work: Path, name: str, wait_s: float = 30) -> None:
    """Say that ``name`` is stuck (``<work>/stuck-<name>``) and wait until the test saved the
    JVM's threads (``<work>/<name>.dumped``, written by :func:`await_client`) or ``wait_s``
    passed."""
    (work / f"{STUCK}-{name}").touch()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not (work / f"{name}.dumped").exists():
        time.sleep(0.5)


def await_client(
    client: subprocess.Popen[bytes], work: Path, spark: SparkSession, timeout_s: float = 900
) -> dict[str, str]:
    """Wait for a Connect client process (at most ``timeout_s``); whenever it says something
    is stuck (:func:`mark_stuck`), save the stack of every JVM thread that such a wait can be
    in (:data:`STUCK_THREADS`) to ``<work>/<name>.threads``. Returns those dumps by name."""
    deadline = time.monotonic() + timeout_s
    while client.poll() is None and time.monotonic() < deadline:
        for stuck in work.glob(f"{STUCK}-*"):
            name = stuck.name.removeprefix(f"{STUCK}-")
            if not (work / f"{name}.dumped").exists():
                (work / f"{name}.threads").write_text(jvm_threads(spark, *STUCK_THREADS))
                (work / f"{name}.dumped").touch()
        time.sleep(1)
    return {t.stem: t.read_text() for t in work.glob("*.threads")}


def refusals(spark: SparkSession, root: Path) -> dict[str, str]:
    """What a Connect client cannot tell about a grouped DataFrame: each case's ConfigError."""
    df = spark.readStream.schema(EVENT_INPUT).json(str(root / "timed"))
    twice = df.withWatermark("t", "1 second").withWatermark("t", "2 seconds")
    df.withWatermark("t", "10 seconds").createOrReplaceTempView("watermarked")
    cases: dict[str, Callable[[], Any]] = {
        "expression": lambda: df.groupBy(df.v + 1),
        "rollup": lambda: df.rollup("k"),
        "two watermarks": lambda: twice.groupBy("k"),
        "months": lambda: df.withWatermark("t", "1 month").groupBy("k"),
        "sql": lambda: spark.sql("select * from watermarked").groupBy("k"),
    }
    got = {}
    for case, grouped in cases.items():
        try:
            ops.transform_with_state(grouped(), RowCounter(), ROW_SCHEMA, "Update", "None")
            got[case] = "accepted"
        except ConfigError as exc:
            got[case] = f"ConfigError: {exc}"
    return got


@contextmanager
def connect_server(spark: SparkSession) -> Iterator[str]:
    """A Spark Connect server in ``spark``'s JVM, on a free port of the loopback interface with a
    random token; yields the URL a client connects with and stops the server after."""
    jvm, sc = spark._jvm, spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    token = uuid.uuid4().hex
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": "0",
        "spark.connect.authenticate.token": token,
    }
    for key, value in settings.items():
        sc.conf().set(key, value)
    package = jvm.org.apache.spark.sql.connect.service
    package.SparkConnectService.start(sc)
    service = getattr(getattr(package, "SparkConnectService$"), "MODULE$")
    try:
        yield f"sc://localhost:{service.localPort()}/;token={token}"
    finally:
        none = getattr(getattr(jvm.scala, "None$"), "MODULE$")
        service.stop(none, none)
        for key in settings:
            sc.conf().remove(key)


def jvm_threads(spark: SparkSession, *names: str) -> str:
    """The stack of every thread of ``spark``'s JVM whose name contains one of ``names``."""
    jvm: Any = spark._jvm
    out = []
    for entry in jvm.java.lang.Thread.getAllStackTraces().entrySet().toArray():
        thread = entry.getKey()
        if any(n in thread.getName() for n in names):
            frames = [f"    at {frame.toString()}" for frame in list(entry.getValue())[:40]]
            out.append(f"{thread.getName()} ({thread.getState().toString()})\n" + "\n".join(frames))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run every flow from the Spark Connect client of ``$SPARK_REMOTE``; print ``RESULT``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--go", help="a file whose existence starts the queries")
    args = parser.parse_args(argv)
    go = Path(args.go) if args.go else None
    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    spark.conf.set("spark.sql.streaming.stopTimeout", "60s")  # a stuck query's stop: an error
    result = {
        "session": type(spark).__module__,
        "refusals": refusals(spark, Path(args.input)),
        "flows": run_flows(spark, Path(args.input), Path(args.work), together=False, go=go),
    }
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
