"""``format("fsstate")`` over a query's state with two live lineages: option ``branch`` reads
that lineage (snapshots and change feeds; ``''`` the trunk); without it the lineage committed
last is read with one warning naming the other; an unknown or malformed branch is a
ConfigError naming the option."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from fsstate.errors import ConfigError
from fsstate.storage.fileio import FileIO
from fsstate_spark import register_sources
from fsstate_spark.sources.selection import select
from tests.support.lineages import STATE, two_lineages


def _state(tmp_path: Path) -> tuple[str, str]:
    uri = str(tmp_path / "state")
    return uri, two_lineages(FileIO(uri).child("q1"))


def test_the_branch_option_selects_a_lineage_and_the_default_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri, branch = _state(tmp_path)
    opts = {"path": uri, "stateVarName": STATE}
    with caplog.at_level(logging.WARNING, logger="fsstate_spark.sources.selection"):
        newest = select(opts)
    warned = [r.getMessage() for r in caplog.records if "fsstate source" in r.getMessage()]
    assert len(warned) == 1 and branch in warned[0] and "the trunk" in warned[0]
    assert "option branch" in warned[0]
    assert newest.branch == branch and newest.version == 2
    assert select({**opts, "branch": ""}).branch == ""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fsstate_spark.sources.selection"):
        on = select({**opts, "branch": branch, "batchId": "1"})
    assert not [r for r in caplog.records if "fsstate source" in r.getMessage()]
    assert on.branch == branch and on.version == 1
    assert {s.branch for s in on.stores} == {branch} and len(on.stores) == 2
    with pytest.raises(ConfigError, match=f"no branch 'nope' \\(its branches: {branch}\\)"):
        select({**opts, "branch": "nope"})
    with pytest.raises(ConfigError, match="branch name"):
        select({**opts, "branch": "../x"})


@pytest.mark.spark
def test_spark_reads_a_branch_and_its_change_feed(spark: SparkSession, tmp_path: Path) -> None:
    uri, branch = _state(tmp_path)
    register_sources(spark)

    def load(**options: str) -> set[tuple[object, ...]]:
        reader = spark.read.format("fsstate").option("path", uri)
        for name, value in options.items():
            reader = reader.option(name, value)
        return {tuple(r) for r in reader.load().select("key.user", "value.count").collect()}

    assert load(branch="") == {("a0", 3), ("a1", 3)}
    assert load() == load(branch=branch) == {("a0", 1), ("b0", 10), ("a1", 1), ("b1", 10)}
    assert load(branch=branch, batchId="1") == {("a0", 1), ("b0", 9), ("a1", 1), ("b1", 9)}
    feed = (
        spark.read.format("fsstate")
        .option("path", uri)
        .option("branch", branch)
        .option("readChangeFeed", "true")
        .option("changeStartBatchId", "2")
        .load()
    )
    got = {(r.batch_id, r.change_type, r.key.user, r.value["count"]) for r in feed.collect()}
    assert got == {(2, "update", "b0", 10), (2, "update", "b1", 10)}
