"""fsstate's keyed loop as Spark's Python worker (:mod:`fsstate_spark.tiered.fast_loop`): keys
grouped as the JVM groups them, and PySpark's own loop, with the same rows, wherever fsstate's
cannot run (another PySpark version, a failing import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import GroupedData, SparkSession
from pyspark.sql import functions as F

from devkit.repo import ROOT
from devkit.spark_local import write_batches
from fsstate.osmem import YOUNG_OBJECTS_MAX
from fsstate_spark import tiered
from fsstate_spark.pyspark import minor
from fsstate_spark.pyspark.worker import ADAPTERS
from tests.fsstate_spark.conftest import Tiered
from tests.support.engine import run_probe
from tests.support.processors import GC_PROBE_SCHEMA, INPUT_SCHEMA, GcProbe
from tests.support.worker_job import OUTPUT, Totals, key_text, module_logs

# every other minor runs the file (devkit/compat_matrix.py); the other Pythons all but the test
# that simulates another PySpark minor and a broken import in two jobs of their own, on the very
# PySpark make test runs it on (the others are marked compat_python one by one)
pytestmark = pytest.mark.compat

BATCHES = [
    [{"k": 1, "v": 1}, {"k": None, "v": 2}, {"k": 2, "v": 3}, {"k": None, "v": 4}],
    [{"k": None, "v": 5}, {"k": 1, "v": 6}, {"k": 3, "v": 7}],
]


def _counts(rows: list[Any]) -> dict[str, int]:
    return {key_text(r[0]): int(r[1]) for r in rows}


@pytest.mark.compat_python
@pytest.mark.parametrize("column", ["k", "d"])
def test_null_and_nan_keys_group_as_the_jvm_groups_them(
    spark: SparkSession, tiered_loop: Tiered, tmp_path: Path, column: str
) -> None:
    """A null integer key (which pandas makes NaN) and a NaN double key are one group each, as
    in Spark's own aggregation; PySpark's own pandas loop splits them into a group per row."""
    rows = [dict(r, v=i) for i, r in enumerate(BATCHES[0] * 3)]
    write_batches(tmp_path / "input", [rows])
    df = (
        spark.readStream.schema("k BIGINT, v BIGINT")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "input"))
        .withColumn("d", F.when(F.col("k").isNull(), F.lit(float("nan"))).otherwise(F.col("k")))
        .select(F.col(column).alias("k"), "v")
    )
    out = df.groupBy("k").transformWithStateInPandas(
        tiered_loop(Totals(), state_uri=str(tmp_path / "state")), OUTPUT, "Update", "None"
    )
    got: list[Any] = []
    query = (
        out.writeStream.foreachBatch(
            lambda d, b: got.extend((r.k, r["count"]) for r in d.collect())
        )
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    batch = spark.read.schema("k BIGINT, v BIGINT").json(str(tmp_path / "input"))
    batch = batch.withColumn(
        "d", F.when(F.col("k").isNull(), F.lit(float("nan"))).otherwise(F.col("k"))
    )
    jvm = [(r[0], r[1]) for r in batch.groupBy(column).count().collect()]
    fast = tiered_loop(Totals()).config.fast_loop
    if fast or minor() == (4, 0):  # 4.0's JVM sends one key per batch
        assert sorted(got) == sorted((key_text(k), n) for k, n in jvm)
    else:  # PySpark 4.1+'s own pandas loop: one group per null row (a stock defect)
        assert len(got) > len(jvm)
        assert _counts([(k, n) for k, n in got if k != "null"]) == _counts(
            [(k, n) for k, n in jvm if key_text(k) != "null"]
        )


@pytest.mark.compat_python
@pytest.mark.skipif(
    not hasattr(GroupedData, "transformWithState") or minor() not in ADAPTERS,
    reason="fsstate's keyed loop runs Row processors from PySpark 4.1 on",
)
def test_keyed_loop_tasks_collect_young_objects_rarely_and_freeze_the_modules(
    spark: SparkSession, tmp_path: Path
) -> None:
    """While fsstate's loop runs a key, the worker collects its young generation every
    :data:`~fsstate.osmem.YOUNG_OBJECTS_MAX` allocations and the objects alive at the task's
    start are frozen (:mod:`fsstate.osmem`); PySpark's loop keeps Python's thresholds."""
    rows = [{"k": f"k{i % 7}", "v": i} for i in range(40)]
    write_batches(tmp_path / "input", [rows])
    got: dict[bool, list[Any]] = {}
    for fast in (True, False):
        df = (
            spark.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "input"))
        )
        proc = tiered(GcProbe(), state_uri=str(tmp_path / f"state-{fast}"), fast_loop=fast)
        out = df.groupBy("k").transformWithState(proc, GC_PROBE_SCHEMA, "Update", "None")
        seen = got.setdefault(fast, [])
        query = (
            out.writeStream.foreachBatch(lambda d, b, seen=seen: seen.extend(d.collect()))
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{fast}"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
    assert sorted(r.k for r in got[True]) == [f"k{i}" for i in range(7)]
    assert {r.young for r in got[True]} == {YOUNG_OBJECTS_MAX}
    assert min(r.frozen for r in got[True]) > 10_000  # the modules (tens of thousands)
    assert len(got[False]) == 7
    assert max(r.young for r in got[False]) < YOUNG_OBJECTS_MAX


FALLBACKS = {
    "pyspark_fsstate_other_version": (
        "from fsstate_spark.pyspark import worker as adapters\n"
        "adapters.adapter_for = lambda minor: None  # a PySpark minor without an adapter\n"
        "from pyspark_fsstate.worker import main\n",
        "tiered() runs on PySpark's own loop",
    ),
    "pyspark_fsstate_broken": (
        "import sys\n"
        "sys.modules['fsstate_spark.tiered.fast_loop'] = None  # importing fsstate's loop fails\n"
        "from pyspark_fsstate.worker import main\n",
        "fsstate's keyed loop is off in this worker (ModuleNotFoundError",
    ),
}


def _running_totals(batches: list[list[dict[str, Any]]]) -> list[list[Any]]:
    """The job's rows by a model: ``[batch, key, count, total]`` of every key a batch touched,
    sorted as the job sorts them."""
    totals: dict[str, tuple[int, int]] = {}
    rows: list[list[Any]] = []
    for b, batch in enumerate(batches):
        touched: dict[str, None] = {}
        for r in batch:
            key = key_text(r["k"])
            count, total = totals.get(key, (0, 0))
            totals[key] = (count + 1, total + r["v"])
            touched[key] = None
        rows += [[b, key, *totals[key]] for key in touched]
    return sorted(rows, key=repr)


def _jobs(names: list[str], inputs: Path, work: Path, modules: Path) -> dict[str, Any]:
    """One job that runs the query under each worker module of ``names`` in turn (a
    SparkContext each, one JVM): module -> (its rows, its part of the job's log)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(modules), str(ROOT), env.get("PYTHONPATH", "")])
    each = [arg for name in names for arg in ("--module", name)]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.worker_job", *each,
         "--input", str(inputs), "--work", str(work)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows: dict[str, list[Any]] = json.loads(lines[-1].removeprefix("RESULT "))["rows"]
    logs = module_logs(proc.stderr, names)
    return {name: (rows[name], logs[name]) for name in names}


def test_another_pyspark_or_a_failing_import_runs_pysparks_loop_with_the_same_rows(
    tmp_path: Path,
) -> None:
    """The worker module never fails a task: on a PySpark version it was not built for, or when
    fsstate's loop does not import, PySpark's own loop runs (said once in the worker log), and
    the query's rows are the running totals fsstate's loop gives (a model of them here: the
    same job on fsstate's loop is held to Spark's handles by the streaming tests)."""
    modules = tmp_path / "modules"
    modules.mkdir()
    for name, (source, _) in FALLBACKS.items():
        (modules / f"{name}.py").write_text(source)
    inputs = tmp_path / "input"
    batches = [[dict(r, k=r["k"] or 0) for r in b] for b in BATCHES]
    write_batches(inputs, batches)
    want = _running_totals(batches)
    assert len(want) == 6
    ran = _jobs(list(FALLBACKS), inputs, tmp_path / "work", modules)
    for name, (_, said) in FALLBACKS.items():
        rows, log = ran[name]
        assert rows == want, name
        assert said in log, log[-2000:]
        assert "runs on PySpark's per-key loop" in log, log[-2000:]


# what a worker running tiered() tasks never needs (imported by a driver, on first use:
# fsstate.exports): the whole-batch operators, the inspection API, the flow driver, the
# listener, the state sources, forks and rescales, Spark's Python data source API
DRIVER_SIDE = (
    "fsstate.inspect",
    "fsstate.operators.windows",
    "fsstate.operators.runner",
    "fsstate_spark.operators",
    "fsstate_spark.metrics",
    "fsstate_spark.sources",
    "fsstate_spark.fork",
    "fsstate_spark.tiered.query_rescale",
    "pyspark.sql.datasource",
)

HOOK_PROBE = f"""
import json, sys
DRIVER_SIDE = {DRIVER_SIDE!r}
import pyspark.worker as w
from pyspark.util import PythonEvalType

calls = []
w.read_udfs = lambda *args: calls.append(args[2]) or "stock"
import pyspark_fsstate.worker  # noqa: F401
seen = {{"after_import": sorted(m for m in sys.modules if m.startswith("fsstate"))}}
seen["other"] = w.read_udfs(None, None, PythonEvalType.SQL_SCALAR_PANDAS_UDF, {{}}, {{}})
seen["still_no_fsstate"] = not any(m.startswith("fsstate") for m in sys.modules)
tws = PythonEvalType.SQL_TRANSFORM_WITH_STATE_PANDAS_UDF
seen["tws"] = w.read_udfs(None, None, tws, {{}}, {{}})
seen["driver_side"] = sorted(m for m in sys.modules if m.startswith(DRIVER_SIDE))
from fsstate_spark.pyspark import minor
from fsstate_spark.pyspark.worker import ADAPTERS
from fsstate_spark.tiered import fast_loop
seen["installed"] = fast_loop.installed()
seen["calls"] = calls
print("PROBE " + json.dumps(seen))
"""


@pytest.mark.compat_python
def test_the_worker_module_loads_fsstate_at_the_first_transform_with_state_task() -> None:
    """Importing the worker module (as Spark's daemon does, before a task's ``--py-files`` are on
    the path) imports no fsstate; another eval type runs PySpark's own function and still imports
    none; the first transformWithState task installs fsstate's loop, which hands a task it cannot
    plan to PySpark's function; installing it imports none of the driver-side modules
    (:data:`DRIVER_SIDE`: a worker Spark replaces, after a minute without tasks, pays its imports
    again)."""
    seen, stderr = run_probe(HOOK_PROBE)
    assert seen["after_import"] == [] and seen["still_no_fsstate"], seen
    assert seen["other"] == "stock" and seen["tws"] == "stock", seen
    assert len(seen["calls"]) == 2, seen
    assert seen["driver_side"] == [], seen
    if minor() in ADAPTERS:
        assert seen["installed"] is True, seen
        assert "a task's set-up failed" in stderr, stderr[-2000:]
    else:  # PySpark 4.0: PySpark's own loop, said once
        assert seen["installed"] is False, seen
        assert "runs on PySpark's own loop" in stderr, stderr[-2000:]
