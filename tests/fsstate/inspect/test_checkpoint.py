"""fsstate.inspect.checkpoint on real files: a Spark checkpoint's commit log (written here as
Spark writes it: ``metadata``, ``offsets/<batch>``, ``commits/<batch>``) against a query's
stores, through ``fsstate verify --checkpoint``: matching, a batch in flight (exit 0, a
note), partitions behind and ahead (each named, with the remedy; exit 1), no state at all,
and the query's own directory given as the root. (A real Spark query's checkpoint:
``tests/fsstate_spark/tiered/test_verify_checkpoint.py``.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from click.testing import CliRunner, Result

from fsstate import PartitionStore
from fsstate.cli import cli

KEY = pa.schema([("k", pa.string())])
VAL = pa.schema([("n", pa.int64())])
QUERY = "6f1c2e0a-query"


def _checkpoint(path: Path, committed: int, planned: int) -> str:
    """A checkpoint of ``QUERY`` with batches 0..planned planned and 0..committed done."""
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    (path / "metadata").write_text(json.dumps({"id": QUERY}) + "\n")
    conf = {"conf": {"spark.sql.shuffle.partitions": "2"}}
    for b in range(planned + 1):
        (path / "offsets" / str(b)).write_text(f"v1\n{json.dumps(conf)}\n{{}}\n")
    for b in range(committed + 1):
        (path / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
        (path / "commits" / f".{b}.crc").write_bytes(b"\0")  # Hadoop's checksum files
    return f"file:{path}"  # as Spark names a local checkpointLocation


def _state(root: Path, versions: dict[int, int]) -> None:
    """The query's operator 'Counter' with each partition committed up to its version."""
    for p, last in versions.items():
        s = PartitionStore.open(str(root / QUERY), "Counter", p, None)
        t = s.value_table("count", VAL, KEY)
        for v in range(last + 1):
            t.update((f"k{p}",), (v,))
            s.commit(v)
        s.close()


def _verify(*args: str, code: int) -> tuple[Result, Any]:
    res = CliRunner().invoke(cli, ["verify", *args], catch_exceptions=False)
    assert res.exit_code == code, (res.exit_code, res.output, res.stderr)
    doc = CliRunner().invoke(cli, ["--json", "verify", *args], catch_exceptions=False)
    assert doc.exit_code == code, doc.output
    return res, json.loads(doc.stdout)


def test_versions_match_the_commit_log_or_each_partition_off_it_is_named(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _state(state, {0: 3, 1: 3})
    done = _checkpoint(tmp_path / "done", committed=3, planned=3)
    res, doc = _verify(str(state), "--checkpoint", done, code=0)
    said = " ".join(res.stdout.split())  # the verdict wraps at 80 columns
    assert "the checkpoint (query 6f1c2e0a-query, batch 3 committed) matches" in said
    check = doc["checkpoint"]
    assert (check["committed_batch"], check["in_flight_batch"], check["gaps"]) == (3, None, [])
    assert check["stores"] == 2 and check["state"] == str(state / QUERY)
    assert check["operators"][0]["lineages"] == {"0": "", "1": ""}
    # the query's own directory as the root reads the same
    assert _verify(str(state / QUERY), "--checkpoint", done, code=0)[1]["checkpoint"]["stores"] == 2
    assert all(len(line) <= 80 for line in (res.stdout + res.stderr).splitlines())

    # batch 3 planned, not committed: its restart plans it anew (a note, not damage)
    flight = _checkpoint(tmp_path / "flight", committed=2, planned=3)
    res, doc = _verify(str(state), "--checkpoint", flight, code=0)
    assert doc["checkpoint"]["in_flight_batch"] == 3 and doc["ok"]
    assert "batch 3 was planned and not committed" in " ".join(res.stderr.split())

    # a checkpoint restored from an older backup beside state that moved on: a note (its
    # restart goes on on a lineage of its own: fsstate.store.lineage)
    old = _checkpoint(tmp_path / "old", committed=1, planned=1)
    res, doc = _verify(str(state), "--checkpoint", old, code=0)
    said = " ".join(res.stderr.split())
    assert "operator 'Counter' holds versions after batch 1 in partitions [0, 1]" in said
    assert doc["checkpoint"]["ahead"] == {"Counter": [0, 1]} and doc["ok"]

    # a partition whose newest manifests were lost: the checkpoint's batch is missing there
    manifests = state / QUERY / "Counter" / "1" / "manifests"
    for v in (2, 3):
        (manifests / f"{v:020d}.json").unlink()
    res, doc = _verify(str(state), "--checkpoint", done, code=1)
    said = " ".join(res.stderr.split())
    assert "operator 'Counter', batch 3 on the trunk: missing in partition(s) [1] of 2" in said
    assert "fsstate-spark repair <checkpoint>" in said
    assert doc["checkpoint"]["operators"][0]["missing"] == [1] and doc["problems"] == []


def test_a_checkpoint_that_committed_no_batch_is_said_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _state(state, {0: 1})
    nothing = _checkpoint(tmp_path / "nothing", committed=-1, planned=0)
    res, doc = _verify(str(state), "--checkpoint", nothing, code=1)
    assert "committed no batch" in " ".join(res.stderr.split())
    assert doc["checkpoint"]["committed_batch"] is None and not doc["ok"]


def test_no_state_of_the_query_and_another_query_are_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _state(state, {0: 1})
    done = _checkpoint(tmp_path / "ckpt", committed=1, planned=1)
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    res, doc = _verify(str(empty), "--checkpoint", done, code=1)
    assert f"no state of the query is under {empty / QUERY}" in " ".join(res.stderr.split())
    assert doc["checkpoint"]["stores"] == 0 and not doc["ok"]
    res = CliRunner().invoke(cli, ["verify", str(state), "--checkpoint", done, "-q", "other"])
    assert res.exit_code == 2 and "is not the query of checkpoint" in res.stderr
    res = CliRunner().invoke(cli, ["verify", str(state), "--checkpoint", str(empty)])
    assert res.exit_code == 2 and "no streaming checkpoint at" in res.stderr
