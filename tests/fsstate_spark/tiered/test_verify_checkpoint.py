"""``fsstate verify --checkpoint`` on a real ``tiered()`` query: its state matches its
checkpoint's commit log after a run and a restart; a checkpoint restored from a backup taken
before the last batch, beside the state that moved on, gets a note (its restart goes on on a
lineage of its own, exit 0); the state restored from that backup beside the newer checkpoint
lacks the checkpoint's batch (exit 1, with the remedy). The checkpoint is read as files: the
command imports no Spark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from fsstate.cli import cli
from tests.support.processors import SINK_BATCHES, SINK_SCHEMA, KitchenSink
from tests.support.stream import StreamRunner


def _verify(state: Path, checkpoint: Path, code: int) -> tuple[str, Any]:
    args = ["verify", str(state), "--checkpoint", str(checkpoint)]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == code, (res.stdout, res.stderr)
    doc = CliRunner().invoke(cli, ["--json", *args], catch_exceptions=False)
    return res.stderr, json.loads(doc.stdout)


def test_verify_compares_a_tiered_querys_state_with_its_checkpoint(
    runner: StreamRunner, tmp_path: Path
) -> None:
    from fsstate_spark import tiered

    state = tmp_path / "state"
    runner.run(tiered(KitchenSink(), state_uri=str(state)), SINK_BATCHES[:2], SINK_SCHEMA, name="q")
    checkpoint = tmp_path / "q" / "checkpoint"
    shutil.copytree(checkpoint, tmp_path / "ckpt-backup")  # backups after batch 1
    shutil.copytree(state, tmp_path / "state-backup")
    _, doc = _verify(state, checkpoint, 0)
    assert doc["checkpoint"]["committed_batch"] == 1 and doc["ok"]
    runner.run(
        tiered(KitchenSink(), state_uri=str(state)),
        SINK_BATCHES[2:],
        SINK_SCHEMA,
        name="q",
        total_batches=3,
    )
    _, doc = _verify(state, checkpoint, 0)
    check = doc["checkpoint"]
    (query,) = [p.name for p in state.iterdir()]
    assert (check["query"], check["committed_batch"], check["gaps"]) == (query, 2, [])
    assert check["stores"] >= 2 and doc["problems"] == [] and doc["skews"] == []

    # the checkpoint restored from the backup, beside the state that moved on: a note (its
    # restart goes on on a lineage of its own: test_lineage.py)
    err, doc = _verify(state, tmp_path / "ckpt-backup", 0)
    check = doc["checkpoint"]
    assert check["committed_batch"] == 1 and check["gaps"] == [] and check["ahead"]
    assert "the checkpoint is older than its state" in " ".join(err.split())
    # the state restored from the backup, beside the newer checkpoint: its batch is missing
    err, doc = _verify(tmp_path / "state-backup", checkpoint, 1)
    [op] = doc["checkpoint"]["operators"]
    assert doc["checkpoint"]["committed_batch"] == 2 and op["missing"] == [0, 1]
    said = " ".join(err.split())
    assert "batch 2" in said and "missing in partition(s) [0, 1]" in said
    assert "restore the state directory and the checkpoint from one backup" in said
