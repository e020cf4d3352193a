"""Rescaling a stopped ``tiered()`` query (:func:`fsstate_spark.rescale_query`): Spark's
checkpoint (Spark's own offline repartition) and fsstate's state together.

The query (:class:`tests.support.rescale_processors.RescaleProbe`: value, list and map state
with TTL, processing-time timers, a (STRING, INT) grouping key) runs its micro-batches with 2
partitions, is stopped and rescaled to 5, runs on, is rescaled to 1 and runs on. Batch by batch
its output must equal the same query run without rescaling, and the same processor on Spark's
own handles rescaled by Spark's repartition alone. Kill points: Spark's part done and fsstate's
not (a query started then fails with PartitionCountError, nothing written, and running the
step again finishes it), and a seeded storage fault inside fsstate's part (the old generation
stays in force; the seed is printed on failure). Local disk and the S3 test server; the
command line (``fsstate-spark rescale``) on the latter.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf
from fsstate.errors import FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.layout import in_force, read_layouts
from fsstate_spark import rescale_query, tiered
from fsstate_spark.cli import cli
from fsstate_spark.pyspark import PYSPARK_MINOR
from fsstate_spark.tiered import query_rescale as rescale_module
from tests.support.faulty_backend import failing_fileio
from tests.support.plugin import s3_options
from tests.support.rescale_processors import (
    PROBE_INPUT,
    PROBE_OUTPUT,
    RescaleProbe,
    probe_batches,
)
from tests.support.stream import StreamRunner

pytestmark = [pytest.mark.slow, pytest.mark.compat_full]  # compat_full: make test-compat-full

# Spark's offline repartition of a checkpoint, which a tiered() rescale runs first, is 4.2+
needs_spark_repartition = pytest.mark.skipif(
    PYSPARK_MINOR < (4, 2),
    reason="rescaling a tiered() query runs Spark's offline repartition (PySpark 4.2+)",
)

SEED = 20261126
BATCHES = probe_batches(SEED, 6)
PLAN = [(2, 2), (2, 5), (2, 1)]  # (data batches, partitions) per run of the query
NAME = "RescaleProbe"
Rows = list[tuple[Any, ...]]
Rescale = Callable[[Path, int], None]


def _by_batch(rows: Rows) -> list[Rows]:
    """Output rows per data batch, in batch order (batch ids differ: each rescale is a batch)."""
    ids = sorted({r[0] for r in rows})
    return [sorted(r[1:] for r in rows if r[0] == b) for b in ids]


class _Query:
    """One query run as restarts over :data:`BATCHES`, its output collected."""

    def __init__(
        self, runner: StreamRunner, make: Callable[[], Any], name: str, partitions: int
    ) -> None:
        self.runner, self.make, self.name, self.partitions = runner, make, name, partitions
        self.total = self.start = 0  # batch ids used, data batches given
        self.rows: Rows = []

    @property
    def checkpoint(self) -> Path:
        return self.runner.root / self.name / "checkpoint"

    def run(self, n: int) -> None:
        """Start the query, give it the next ``n`` data batches, stop it."""
        batches = BATCHES[self.start : self.start + n]
        self.start += n
        self.total += n
        self._run(batches)

    def resume(self) -> None:
        """Start the query again over batches it was given but did not complete."""
        self._run([])

    def repartitioned(self) -> None:
        """Spark's repartition took a batch id."""
        self.total += 1

    def _run(self, batches: list[list[dict[str, Any]]]) -> None:
        spark = self.runner.spark
        with session_conf(spark, **{"spark.sql.shuffle.partitions": str(self.partitions)}):
            self.rows += self.runner.run(
                self.make(),
                batches,
                PROBE_OUTPUT,
                time_mode="ProcessingTime",
                name=self.name,
                total_batches=self.total,
                input_schema=PROBE_INPUT,
                key=["k", "g"],
            )

    def output(self) -> list[Rows]:
        return _by_batch(self.rows)


def _run(query: _Query, plan: list[tuple[int, int]], rescale: Rescale | None) -> list[Rows]:
    """Run ``plan`` as restarts of ``query``; between runs, ``rescale(checkpoint, n)``."""
    for i, (n, parts) in enumerate(plan):
        if i and rescale is not None:
            rescale(query.checkpoint, parts)
            query.repartitioned()
        query.run(n)
    return query.output()


@contextmanager
def _no_data_batches_off(spark: SparkSession) -> Iterator[None]:
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        yield


@pytest.fixture(scope="module")
def unrescaled(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> list[Rows]:
    """The query's output without rescaling (2 partitions throughout)."""
    root = tmp_path_factory.mktemp("unrescaled")
    runner = StreamRunner(spark, root)
    state = str(root / "state")
    query = _Query(runner, lambda: tiered(RescaleProbe(), state_uri=state), "q", 2)
    with _no_data_batches_off(spark):
        out = _run(query, [(6, 2)], None)
    assert len(out) == 6 and all(out)
    assert any(r[2] == "timer" for b in out[1:] for r in b)  # timers fired
    return out


def _layout(state: str | FileIO, query_dir: str | None = None) -> Any:
    fileio = state if isinstance(state, FileIO) else FileIO(Location.parse(state))
    if query_dir is not None:
        fileio = fileio.child(query_dir)
    return in_force(read_layouts(fileio, NAME))


def _query_id(checkpoint: Path) -> str:
    return str(json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"])


@needs_spark_repartition
def test_tiered_query_rescaled_2_5_1_equals_unrescaled_and_spark_handles(
    spark: SparkSession, tmp_path: Path, unrescaled: list[Rows]
) -> None:
    runner = StreamRunner(spark, tmp_path)
    state = str(tmp_path / "state")
    results = []

    def ours(checkpoint: Path, n: int) -> None:
        result = rescale_query(spark, str(checkpoint), n, state_uri=state)
        assert result.spark_repartitioned and result.partitions == n
        (op,) = result.operators
        layout = _layout(state, _query_id(checkpoint))
        assert (layout.partitions, layout.since, op.rows > 0) == (n, result.batch, True)
        results.append(result)

    def spark_only(checkpoint: Path, n: int) -> None:
        spark._streamingCheckpointManager.repartition(str(checkpoint), n)

    with _no_data_batches_off(spark):
        got = _run(
            _Query(runner, lambda: tiered(RescaleProbe(), state_uri=state), "q", 2), PLAN, ours
        )
        native = _run(_Query(runner, RescaleProbe, "native", 2), PLAN, spark_only)
    assert [r.batch for r in results] == [2, 5]  # after data batches 0-1 and 3-4
    assert got == unrescaled
    assert native == unrescaled
    # running the step again with the count it has does nothing
    again = rescale_query(spark, str(tmp_path / "q" / "checkpoint"), 1, state_uri=state)
    assert (again.batch, again.operators, again.spark_repartitioned) == (None, (), False)


@needs_spark_repartition
@pytest.mark.parametrize("seed", [1, 2])
def test_an_interrupted_rescale_is_refused_at_restart_and_finished_by_running_it_again(
    spark: SparkSession, tmp_path: Path, unrescaled: list[Rows], seed: int
) -> None:
    rng = random.Random(seed)
    state = str(tmp_path / "state")
    query = _Query(
        StreamRunner(spark, tmp_path), lambda: tiered(RescaleProbe(), state_uri=state), "q", 2
    )
    fail_at = rng.randrange(1, 9)
    with _no_data_batches_off(spark):
        query.run(2)
        query_dir = _query_id(query.checkpoint)
        # killed after Spark's part: a restarted query refuses to run, nothing written
        spark._streamingCheckpointManager.repartition(str(query.checkpoint), 5)
        query.repartitioned()
        files = sorted(p for p in Path(state).rglob("*") if p.is_file())
        with pytest.raises(RuntimeError, match="PartitionCountError"):
            query.run(2)
        assert sorted(p for p in Path(state).rglob("*") if p.is_file()) == files
        done = rescale_query(spark, str(query.checkpoint), 5, state_uri=state)
        assert not done.spark_repartitioned and done.previous == 2 and done.batch == 2
        query.resume()
        # killed inside fsstate's part: a storage fault at a seeded write
        before = _layout(state, query_dir)
        with failing_fileio(rescale_module, fail_at) as faulty, pytest.raises(FsStateError):
            rescale_query(spark, str(query.checkpoint), 1, state_uri=state)
        assert faulty is not None and faulty.writes >= fail_at, f"seed {seed}: no fault injected"
        assert _layout(state, query_dir) == before, f"seed {seed}: a half rescale is in force"
        done = rescale_query(spark, str(query.checkpoint), 1, state_uri=state)
        assert not done.spark_repartitioned and done.previous == 5 and done.batch == 5
        assert _layout(state, query_dir).partitions == 1
        query.repartitioned()
        query.run(2)
    assert query.output() == unrescaled, f"seed {seed}: fault at write {fail_at}"


@needs_spark_repartition
def test_tiered_state_on_s3_rescaled_by_the_command_line(
    spark: SparkSession, tmp_path: Path, unrescaled: list[Rows], s3_uri: str, s3_server: Any
) -> None:
    runner = StreamRunner(spark, tmp_path)
    options = s3_options(s3_server)
    cli_runner = CliRunner()
    outputs: list[dict[str, Any]] = []

    def by_cli(checkpoint: Path, n: int) -> None:
        args = ["--json"]
        for k, v in options.items():
            args += ["-o", f"{k}={v}"]
        args += ["rescale", str(checkpoint), str(n), "--state-uri", s3_uri]
        res = cli_runner.invoke(cli, args)
        assert res.exit_code == 0, res.output
        outputs.append(json.loads(res.output))

    def make() -> Any:
        return tiered(RescaleProbe(), state_uri=s3_uri, storage_options=options)

    with _no_data_batches_off(spark):
        got = _run(_Query(runner, make, "q", 2), PLAN[:2], by_cli)
    assert got == unrescaled[:4]
    (doc,) = outputs
    assert (doc["previous_partitions"], doc["partitions"], doc["spark_repartitioned"]) == (
        2,
        5,
        True,
    )
    assert doc["operators"][0]["operator"] == NAME and doc["operators"][0]["rows"] > 0
    # a refused step is one line and exit code 2
    res = cli_runner.invoke(cli, ["rescale", str(tmp_path / "nowhere"), "3"])
    assert res.exit_code == 2 and "no streaming checkpoint" in res.output
    assert len(res.output.strip().splitlines()) == 1
