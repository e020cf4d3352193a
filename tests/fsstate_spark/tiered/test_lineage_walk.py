"""Lineages through Spark, as a user walks them (issue 66): a ``tiered()`` running count over 60
keys, every batch's counts checked exactly against the input of the lineage the checkpoint is
on, on local files and (the first walk) on the S3 server.

* Roll back, re-run on other input, rescale 2 -> 5, run on: every key right.
* Rescale 2 -> 5 -> 2: the first batch at 2 partitions opens the newest generation.
* A copy and its original run the same batch: each run's versions are one lineage, in every
  partition; verify sees no mix; readers default to the lineage committed last, whole.
* Drop the lineage a rolled-back checkpoint runs on: refused without ``--force``; with it,
  ``verify --checkpoint`` fails and ``fsstate-spark repair`` names the way back.
* Delete a partition: ``verify`` and ``show`` exit 1 naming it (``show --partial`` reads the
  rest).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from devkit.spark_local import write_batches
from fsstate.cli import cli as fsstate_cli
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.lineage import list_branches
from fsstate_spark import rescale_query, tiered
from fsstate_spark.cli import cli as spark_cli
from fsstate_spark.fork import rollback_query
from fsstate_spark.pyspark import PYSPARK_MINOR
from tests.support.plugin import s3_options
from tests.support.processors import ROW_SCHEMA, RowCounter
from tests.support.stream import StreamRunner

pytestmark = pytest.mark.spark

KEYS = [f"k{i:02d}" for i in range(60)]

needs_repartition = pytest.mark.skipif(
    PYSPARK_MINOR < (4, 2), reason="Spark's offline repartition of a checkpoint is 4.2+"
)


def _batch(seed: int) -> list[dict[str, Any]]:
    """Each key 1 to 3 times, by seed."""
    return [{"k": k, "v": seed} for i, k in enumerate(KEYS) for _ in range((i + seed) % 3 + 1)]


def _counts(batches: list[list[dict[str, Any]]]) -> dict[str, int]:
    return dict(Counter(r["k"] for b in batches for r in b))


def _last(rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """Each key's count as output last."""
    out: dict[str, int] = {}
    for r in sorted(rows):
        out[r[1]] = r[2]
    return out


class _Walk:
    """One query's runs over batch files, its state under ``state``."""

    def __init__(self, runner: StreamRunner, state: str, options: dict[str, Any]) -> None:
        self.runner, self.state, self.options = runner, state, options
        self.batches = 0

    def run(
        self, name: str, new: list[list[dict[str, Any]]], total: int, **kwargs: Any
    ) -> dict[str, int]:
        make = tiered(RowCounter(), state_uri=self.state, **self.options)
        rows = self.runner.run(
            make, new, ROW_SCHEMA, name=name, total_batches=total, pandas=False, **kwargs
        )
        return _last(rows)

    def checkpoint(self, name: str) -> Path:
        return self.runner.root / name / "checkpoint"

    def replace_input(self, name: str, keep: int, new: list[list[dict[str, Any]]]) -> None:
        """The input files after the first ``keep`` replaced by ``new`` (other input)."""
        folder = self.runner.root / name / "input"
        for path in sorted(folder.glob("batch-*.json"))[keep:]:
            path.unlink()
        write_batches(folder, new)


def _fsstate(*args: str, code: int) -> str:
    res = CliRunner().invoke(fsstate_cli, list(args), catch_exceptions=False)
    assert res.exit_code == code, (args, res.exit_code, res.output)
    return " ".join((res.stdout + res.stderr).split())


def _fsstate_spark(*args: str, code: int) -> str:
    res = CliRunner().invoke(spark_cli, list(args), catch_exceptions=False)
    assert res.exit_code == code, (args, res.exit_code, res.output)
    return " ".join((res.stdout + res.stderr).split())


@needs_repartition
@pytest.mark.parametrize("storage", ["local", "s3"])
def test_roll_back_rerun_on_other_input_rescale_and_go_on(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, storage: str
) -> None:
    """Rolled back to batch 1, batches 2-3 re-run on other input, rescaled 2 -> 5: the batch
    after the rescale counts exactly the rolled-back lineage's input (not the abandoned one's)."""
    if storage == "s3":
        info = request.getfixturevalue("s3_server")
        state = f"s3://{info.bucket}/walk-{tmp_path.name}"
        options: dict[str, Any] = {"storage_options": s3_options(info)}
    else:
        state, options = str(tmp_path / "state"), {}
    walk = _Walk(StreamRunner(spark, tmp_path), state, options)
    first = [_batch(s) for s in range(4)]
    assert walk.run("q", first, 4) == _counts(first)
    rollback_query(str(walk.checkpoint("q")), 1)
    other = [_batch(s) for s in (7, 8)]
    walk.replace_input("q", 2, other)
    kept = first[:2] + other
    assert walk.run("q", [], 4) == _counts(kept)  # batches 2, 3 again, on the other input
    got = rescale_query(spark, str(walk.checkpoint("q")), 5, state_uri=state, **options)
    assert got.batch == 4 and got.previous == 2
    more = [_batch(9)]
    after = walk.run("q", more, 6)  # batch 4 is Spark's repartition batch
    assert after == _counts(kept + more) and len(after) == len(KEYS)


@needs_repartition
def test_rescale_there_and_back_opens_the_newest_generation(spark: Any, tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    walk = _Walk(StreamRunner(spark, tmp_path), state, {})
    data = [_batch(s) for s in range(5)]
    assert walk.run("q", data[:2], 2) == _counts(data[:2])
    rescale_query(spark, str(walk.checkpoint("q")), 5, state_uri=state)  # batch 2
    assert walk.run("q", data[2:3], 4) == _counts(data[:3])
    rescale_query(spark, str(walk.checkpoint("q")), 2, state_uri=state)  # batch 4
    got = walk.run("q", data[3:5], 7)  # the first batch at 2 partitions: generation 2
    assert got == _counts(data)


def test_a_copy_and_its_original_run_the_same_batch_on_lineages_of_their_own(
    spark: Any, tmp_path: Path
) -> None:
    """A copied checkpoint (cp -r) and its original both run batch 2 (the copy two files a
    batch): each run commits on a lineage of its own in every partition; verify sees nothing
    wrong; readers show the lineage committed last, whole."""
    state = tmp_path / "state"
    walk = _Walk(StreamRunner(spark, tmp_path), str(state), {})
    data = [_batch(s) for s in range(4)]
    assert walk.run("a", data[:2], 2) == _counts(data[:2])
    shutil.copytree(walk.checkpoint("a"), walk.checkpoint("c"))
    assert walk.run("a", data[2:3], 3) == _counts(data[:3])
    # the copy reads its original's source (as Spark's file source recorded it), files 2+3
    assert walk.run("c", data[3:4], 3, input_of="a", files_per_trigger=2) == _counts(data)
    assert walk.run("a", [], 4) == _counts(data)  # file 3
    (query,) = [p.name for p in state.iterdir()]
    fileio = FileIO(Location.parse(str(state / query)))
    lines = [set(list_branches(fileio, f"RowCounter/{p}")) for p in range(2)]
    assert lines[0] == lines[1] and len(lines[0]) == 4  # runs: a's three, c's one
    _fsstate("verify", str(state), code=0)
    shown = CliRunner().invoke(
        fsstate_cli, ["--json", "show", str(state), "RowCounter", "count", "-n", "-1"]
    )
    assert {r["k"]: r["c"] for r in json.loads(shown.stdout)["shown"]} == _counts(data)


def test_dropping_the_lineage_a_checkpoint_runs_on_and_repairing(
    spark: Any, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    runner = StreamRunner(spark, tmp_path)
    walk = _Walk(runner, str(state), {})
    data = [_batch(s) for s in range(4)]
    walk.run("q", data, 4)
    ckpt = str(walk.checkpoint("q"))
    rollback_query(ckpt, 1)
    walk.replace_input("q", 2, [_batch(7)])
    walk.run("q", [], 3)  # batch 2 again: a lineage of this run's own
    (_query,) = [p.name for p in state.iterdir()]
    _fsstate("verify", str(state), "--checkpoint", ckpt, code=0)
    ran = json.loads(
        CliRunner()
        .invoke(fsstate_cli, ["--json", "verify", str(state), "--checkpoint", ckpt])
        .stdout
    )
    (lineage,) = set(ran["checkpoint"]["operators"][0]["lineages"].values())
    # watch follows the lineage the rolled-back checkpoint runs on, not the abandoned one
    watched = CliRunner().invoke(
        spark_cli, ["--json", "watch", ckpt, "--state-uri", str(state), "--once"]
    )
    (op,) = json.loads(watched.stdout)["operators"]
    assert (op["branch"], op["latestVersion"]) == (lineage, 2), op
    drop = ["drop-branch", str(state), "--operator", "RowCounter", "--branch", lineage, "--yes"]
    said = _fsstate(*drop, "--checkpoint", ckpt, code=1)
    assert f"runs on branch {lineage}" in said
    said = _fsstate(*drop, code=1)
    assert "is a live lineage" in said
    _fsstate(*drop, "--force", code=0)
    said = _fsstate("verify", str(state), "--checkpoint", ckpt, code=1)
    assert "missing in partition(s) [0, 1]" in said and "fsstate-spark repair" in said
    dry = _fsstate_spark("repair", ckpt, "--state-uri", str(state), code=0)
    assert "batch 1 is the newest whole batch" in dry
    _fsstate_spark("repair", ckpt, "--state-uri", str(state), "--apply", code=0)
    walk.replace_input("q", 2, [_batch(8)])
    assert walk.run("q", [], 3) == _counts([*data[:2], _batch(8)])
    _fsstate("verify", str(state), "--checkpoint", ckpt, code=0)


def test_a_deleted_partition_is_refused_by_verify_and_the_readers(
    spark: Any, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    walk = _Walk(StreamRunner(spark, tmp_path), str(state), {})
    data = [_batch(s) for s in range(2)]
    walk.run("q", data, 2)
    (query,) = [p.name for p in state.iterdir()]
    shutil.rmtree(state / query / "RowCounter" / "1")
    said = _fsstate("verify", str(state), code=1)
    assert "partition 1" in said
    show = ["show", str(state), "RowCounter", "count", "-n", "-1"]
    said = _fsstate(*show, code=1)
    assert "partitions [1] hold no version" in said and "--partial" in said
    _fsstate("stats", str(state), "--live-rows", code=1)
    part = json.loads(CliRunner().invoke(fsstate_cli, ["--json", *show, "--partial"]).stdout)
    assert 0 < len(part["shown"]) < len(KEYS)
