"""Fork and roll-back of a stopped query (issue 45, item 2): a checkpoint cut at a committed
batch restarts exactly as a copy of the checkpoint taken after that batch does, with Spark's
own handles (so the cut is right for Spark) and with ``tiered()`` (whose state follows in
O(metadata): no data file is copied), batch by batch; and bad input is refused with nothing
changed; a fork target inside its source checkpoint, or holding it, is refused with nothing
written (issue 66)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from devkit.spark_local import write_batches
from fsstate.errors import ConfigError
from fsstate_spark import fork_query, rollback_query, tiered
from fsstate_spark.cli import cli
from tests.support.processors import SINK_SCHEMA, KitchenSink
from tests.support.stream import StreamRunner

BATCHES = [
    [{"k": "a", "v": 1}, {"k": "b", "v": 1}],
    [{"k": "a", "v": 2}],
    [{"k": "b", "v": 3}, {"k": "c", "v": 3}],
    [{"k": "a", "v": 4}, {"k": "c", "v": 4}],
]
MORE = [[{"k": "b", "v": 7}, {"k": "d", "v": 7}], [{"k": "a", "v": 8}]]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _runs(spark: Any, root: Path, make: Any) -> dict[str, list[tuple[Any, ...]]]:
    """The original runs 4 batches (a copy of its checkpoint taken after batch 1); then the
    copy, a fork at batch 1 and a roll-back to batch 1 each run the same two more files, two
    files per batch (so their batch 2 differs from the original's)."""
    runner = StreamRunner(spark, root)
    runner.run(make(), BATCHES[:2], SINK_SCHEMA, name="q")
    checkpoint = root / "q" / "checkpoint"
    shutil.copytree(checkpoint, root / "copy" / "checkpoint")
    runner.run(make(), BATCHES[2:], SINK_SCHEMA, name="q", total_batches=4)
    fork_query(str(checkpoint), str(root / "fork" / "checkpoint"), batch=1)
    write_batches(root / "q" / "input", MORE)  # files 4 and 5, read by each of the three
    out = {}
    for name in ("copy", "fork"):
        out[name] = runner.run(
            make(), [], SINK_SCHEMA, name=name, input_of="q", total_batches=4,
            files_per_trigger=2,
        )  # fmt: skip
    cut = rollback_query(str(checkpoint), 1)
    assert (cut.batch, cut.copied) == (1, 0) and cut.removed > 0
    out["rollback"] = runner.run(
        make(), [], SINK_SCHEMA, name="q", total_batches=4, files_per_trigger=2
    )
    return out


@pytest.mark.compat  # every other minor runs it (devkit/compat_matrix.py)
def test_fork_and_rollback_equal_a_copied_checkpoint(spark: Any, tmp_path: Path) -> None:
    native = _runs(spark, tmp_path / "native", KitchenSink)
    # batches 2 and 3: the original's files 2 and 3, then the new ones (two per batch)
    assert native["fork"] == native["copy"] == native["rollback"]
    assert {r[0] for r in native["copy"]} == {2, 3}
    state = tmp_path / "state"
    got = _runs(spark, tmp_path / "tiered", lambda: tiered(KitchenSink(), state_uri=str(state)))
    assert got == native


def test_bad_cuts_are_refused_with_nothing_changed(spark: Any, tmp_path: Path) -> None:
    runner = StreamRunner(spark, tmp_path)
    runner.run(KitchenSink(), BATCHES[:2], SINK_SCHEMA, name="q")
    checkpoint = tmp_path / "q" / "checkpoint"
    before = _files(checkpoint)
    with pytest.raises(ConfigError, match=r"batch 5 of checkpoint .*: give a committed batch"):
        rollback_query(str(checkpoint), 5)
    with pytest.raises(ConfigError, match=r"no streaming checkpoint at"):
        rollback_query(str(tmp_path / "nothing"), 0)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(ConfigError, match=r"fork target .* is not empty"):
        fork_query(str(checkpoint), str(tmp_path / "busy"))
    assert _files(checkpoint) == before
    # the command line: one line, exit 2
    res = CliRunner().invoke(cli, ["rollback", str(checkpoint), "--batch", "9"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(cli, ["--json", "fork", str(checkpoint), str(tmp_path / "f")])
    assert res.exit_code == 0 and '"restarts_at": 2' in res.output


def _checkpoint(path: Path, committed: int = 1) -> Path:
    """A stopped query's checkpoint (as Spark writes it) with batches 0..committed committed."""
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    (path / "metadata").write_text(json.dumps({"id": "q-fork"}) + "\n")
    for b in range(committed + 1):
        (path / "offsets" / str(b)).write_text('v1\n{"conf": {}}\n{}\n')
        (path / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return path


def _entries(root: Path) -> set[str]:
    """Every file and directory under ``root``."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run(*args: str, code: int = 0) -> Result:
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    return res


def _refused(*args: str) -> str:
    res = _run(*args, code=2)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and res.stdout == "", res.stderr
    assert lines[0].startswith("Error: ConfigError: "), lines
    return lines[0]


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("ckpt/fork", "is inside the source checkpoint"),
        ("ckpt/sources/0/deep", "is inside the source checkpoint"),
        ("ckpt", "is the source checkpoint"),
        (".", "holds the source checkpoint"),
        ("link/fork", "is inside the source checkpoint"),
    ],
    ids=["inside", "deep-inside", "same", "holding", "inside-through-a-link"],
)
def test_a_fork_target_overlapping_its_source_is_refused(
    tmp_path: Path, target: str, words: str
) -> None:
    """``fsstate-spark fork SOURCE TARGET`` copied a checkpoint into itself (a target inside
    it); a target holding it was refused as 'not empty'. One line naming both, nothing written."""
    source = _checkpoint(tmp_path / "ckpt")
    (tmp_path / "link").symlink_to(source)
    before = _entries(tmp_path)
    line = _refused("fork", str(source), str(tmp_path / target))
    assert words in line and "give a new location outside the source checkpoint" in line, line
    assert _entries(tmp_path) == before
    with pytest.raises(ConfigError, match=words):
        fork_query(str(source), str(tmp_path / target))
    assert _entries(tmp_path) == before


def test_a_fork_beside_its_source_still_works(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "ckpt")
    doc = json.loads(_run("--json", "fork", str(source), str(tmp_path / "ckpt-fork")).stdout)
    assert doc["restarts_at"] == 2 and (tmp_path / "ckpt-fork" / "metadata").exists()
