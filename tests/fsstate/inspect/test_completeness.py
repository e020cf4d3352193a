"""``fsstate verify`` sees what a file check cannot (issue 66), local and on the S3 server: a
lineage missing in one partition, a deleted middle manifest, a fork without its mark, a store
with branches and no ``forked.json``, a corrupt layout record (reported, the rest still
checked), and with a checkpoint, a deleted ``operator.json`` and partition against the
checkpoint's partition count. Each exits 1 naming it; the state as written verifies clean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsstate.cli import cli
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import manifest_path
from fsstate.store.layout import Layout, publish_layout
from fsstate.store.lineage import FORKED_PATH, FORKS_DIR, fork_marks
from tests.support.lineages import OPERATOR, two_lineages
from tests.support.plugin import s3_options

QUERY = "q1"


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, list[str], FileIO]:
    if request.param == "local":
        uri = str(tmp_path / "state")
        return uri, [], FileIO(uri)
    info = request.getfixturevalue("s3_server")
    uri = request.getfixturevalue("s3_uri")
    opts = s3_options(info)
    return uri, [f"-o{k}={v}" for k, v in opts.items()], FileIO(Location.parse(uri, opts))


def _verify(uri: str, opts: list[str], *more: str, code: int) -> tuple[str, Any]:
    res = CliRunner().invoke(cli, ["verify", uri, *more, *opts], catch_exceptions=False)
    assert res.exit_code == code, (res.stdout, res.stderr)
    doc = CliRunner().invoke(cli, ["--json", "verify", uri, *more, *opts])
    return " ".join(res.stderr.split()), json.loads(doc.stdout)


def _state(fileio: FileIO) -> tuple[FileIO, str]:
    q = fileio.child(QUERY)
    branch = two_lineages(q)
    publish_layout(q, OPERATOR, Layout(0, 2, kind="tiered"))
    return q, branch


def test_the_state_as_written_verifies_clean(root: tuple[str, list[str], FileIO]) -> None:
    uri, opts, fileio = root
    _state(fileio)
    _, doc = _verify(uri, opts, code=0)
    assert doc["gaps"] == [] and doc["ok"]


def test_a_lineage_missing_in_one_partition_is_named(root: tuple[str, list[str], FileIO]) -> None:
    uri, opts, fileio = root
    q, branch = _state(fileio)
    store = f"{OPERATOR}/1"
    for e in q.list(f"{store}/branches/{branch}"):
        q.delete(e.path)
    said, doc = _verify(uri, opts, code=1)
    assert f"branch {branch} (generation 0) is in partitions [0] but not in [1]" in said
    assert [g["kind"] for g in doc["gaps"]] == ["partition"]


def test_a_deleted_middle_manifest_is_named(root: tuple[str, list[str], FileIO]) -> None:
    uri, opts, fileio = root
    q, _branch = _state(fileio)
    q.delete(manifest_path(f"{OPERATOR}/0", 1))
    said, doc = _verify(uri, opts, code=1)
    assert "partition 0: version 1 of the trunk is gone, between retained versions 0 and 2" in said
    assert [g["kind"] for g in doc["gaps"]] == ["version"]


def test_a_fork_without_its_mark_or_forked_json_is_named(
    root: tuple[str, list[str], FileIO],
) -> None:
    uri, opts, fileio = root
    q, branch = _state(fileio)
    for m in fork_marks(q, f"{OPERATOR}/0"):
        q.delete(f"{OPERATOR}/0/{FORKS_DIR}/_/{m.version:020d}~{m.lineage}.json")
    said, doc = _verify(uri, opts, code=1)
    assert f"partition 0: branch {branch} forked version 0 of the trunk and its fork mark" in said
    q.delete(f"{OPERATOR}/1/{FORKED_PATH}")
    said, doc = _verify(uri, opts, code=1)
    assert f"partition 1 holds branches ['{branch}'] but no forked.json" in said
    assert sorted(g["kind"] for g in doc["gaps"]) == ["fork", "fork"]


def test_a_corrupt_layout_record_is_reported_and_the_rest_checked(
    root: tuple[str, list[str], FileIO],
) -> None:
    uri, opts, fileio = root
    q, _ = _state(fileio)
    other = fileio.child("q2")
    two_lineages(other)  # another query, intact
    q.publish_bytes(f"{OPERATOR}/operator.json", b"{not json")
    said, doc = _verify(uri, opts, code=1)
    assert "the layout record" in said and "is unreadable" in said
    assert [g["query"] for g in doc["gaps"]] == [QUERY]
    assert doc["versions"] == 24 and doc["problems"] == []  # both queries' files all read


def _checkpoint(path: Path, committed: int, partitions: int) -> str:
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    (path / "metadata").write_text(json.dumps({"id": QUERY}) + "\n")
    conf = {"conf": {"spark.sql.shuffle.partitions": str(partitions)}}
    for b in range(committed + 1):
        (path / "offsets" / str(b)).write_text(f"v1\n{json.dumps(conf)}\n{{}}\n")
        (path / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return str(path)


def test_a_deleted_record_and_partition_fail_against_the_checkpoint(tmp_path: Path) -> None:
    """``operator.json`` and partition 1 deleted: the checkpoint records 2 partitions, so its
    batch is missing in partition 1 (no record can tell that any more), exit 1."""
    uri = str(tmp_path / "state")
    q, _ = _state(FileIO(uri))
    ckpt = _checkpoint(tmp_path / "ckpt", 2, 2)
    _verify(uri, [], "--checkpoint", ckpt, code=0)
    q.delete(f"{OPERATOR}/operator.json")
    for e in q.list(f"{OPERATOR}/1", recursive=True):
        q.delete(e.path)
    said, doc = _verify(uri, [], "--checkpoint", ckpt, code=1)
    assert "batch 2 on" in said and "missing in partition(s) [1] of 2" in said
    assert not doc["checkpoint"]["operators"][0]["lineages"].get("1")
