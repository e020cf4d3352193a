"""The flow driver's owner record and planning times without Spark
(:mod:`fsstate_spark.operators.lineage`): who claims a state URI, who is refused, and what the
checkpoint's offsets entry says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fsstate.errors import ConfigError
from fsstate.inspect.checkpoint import batch_timestamp_ms
from fsstate.storage.fileio import FileIO
from fsstate.store.record import Writer
from fsstate_spark.operators.lineage import OWNER_FILE, FlowLineage, Owner
from fsstate_spark.operators.settings import resolve_flow_settings, resolved_checkpoint


def _checkpoint(path: Path, query: str = "q-1", batches: dict[int, int] | None = None) -> Path:
    """A checkpoint directory as Spark writes it: ``metadata`` and offsets entries."""
    (path / "offsets").mkdir(parents=True, exist_ok=True)
    (path / "metadata").write_text(json.dumps({"id": query}) + "\n")
    for b, ms in (batches or {}).items():
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": ms, "conf": {}}
        (path / "offsets" / str(b)).write_text(f"v1\n{json.dumps(meta)}\n{{}}\n")
    return path


def _lineage(checkpoint: Path, state: Path | None) -> tuple[FlowLineage, FileIO]:
    config = resolve_flow_settings(
        str(checkpoint), 2, None if state is None else str(state), None, {}, conf={}
    )
    return FlowLineage(config), FileIO(config.root)


def test_resolved_checkpoint_names_one_place_one_way(tmp_path: Path) -> None:
    assert resolved_checkpoint(f"file:{tmp_path}/c/") == str(tmp_path / "c")
    assert resolved_checkpoint(f"file://{tmp_path}/c") == str(tmp_path / "c")
    assert resolved_checkpoint("s3a://bucket/c/") == "s3://bucket/c"
    assert resolved_checkpoint("hdfs://nn/c/") == "hdfs://nn/c"
    assert resolved_checkpoint("dbfs:/c/") == "dbfs:/c"


def test_the_first_run_claims_the_state_and_another_checkpoint_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    a = _checkpoint(tmp_path / "A")
    lineage, fileio = _lineage(a, state)
    lineage.claim(fileio)
    lineage.claim(fileio)  # a restart
    owner = Owner.from_bytes(fileio.read_bytes(OWNER_FILE), OWNER_FILE)
    assert owner == Owner(str(a), "q-1", str(state))
    record = (state / OWNER_FILE).read_bytes()
    b = _checkpoint(tmp_path / "B")  # a copy: the same query id
    other, _ = _lineage(b, state)
    with pytest.raises(ConfigError, match="belongs to the query whose checkpoint is") as err:
        other.claim(fileio)
    assert str(a) in str(err.value) and str(b) in str(err.value)
    assert "\n" not in str(err.value)
    assert (state / OWNER_FILE).read_bytes() == record


def test_a_new_checkpoint_at_the_owners_place_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    lineage, fileio = _lineage(_checkpoint(tmp_path / "A"), state)
    lineage.claim(fileio)
    shutil.rmtree(tmp_path / "A")
    again, _ = _lineage(_checkpoint(tmp_path / "A", query="q-2"), state)
    with pytest.raises(ConfigError, match=r"belongs to query q-1 .* is now query q-2"):
        again.claim(fileio)


def test_a_copied_state_directory_is_claimed_by_the_checkpoint_pointed_at_it(
    tmp_path: Path,
) -> None:
    lineage, fileio = _lineage(_checkpoint(tmp_path / "A"), tmp_path / "state")
    lineage.claim(fileio)
    shutil.copytree(tmp_path / "state", tmp_path / "fork")
    b = _checkpoint(tmp_path / "B")
    fork, fork_io = _lineage(b, tmp_path / "fork")
    fork.claim(fork_io)
    assert Owner.from_bytes(fork_io.read_bytes(OWNER_FILE), "") == Owner(
        str(b), "q-1", str(tmp_path / "fork")
    )


def test_the_default_state_follows_its_checkpoint_and_guards_it(tmp_path: Path) -> None:
    a = _checkpoint(tmp_path / "A")
    lineage, fileio = _lineage(a, None)
    assert lineage.config.state_in_checkpoint
    lineage.claim(fileio)
    shutil.copytree(a, tmp_path / "B")  # a copied checkpoint carries its state: it goes on
    copy, copy_io = _lineage(tmp_path / "B", None)
    copy.claim(copy_io)
    assert Owner.from_bytes(copy_io.read_bytes(OWNER_FILE), "").checkpoint == str(tmp_path / "B")
    # a checkpoint pointed at another's own state is refused
    c = _checkpoint(tmp_path / "C")
    intruder, intruder_io = _lineage(c, a / "fsstate")
    assert not intruder.config.state_in_checkpoint
    with pytest.raises(ConfigError, match="belongs to the query whose checkpoint is"):
        intruder.claim(intruder_io)


def test_each_batch_is_recorded_with_its_planning_time(tmp_path: Path) -> None:
    a = _checkpoint(tmp_path / "A", batches={0: 1_000, 1: 2_000})
    lineage, _ = _lineage(a, tmp_path / "state")
    assert lineage.writer(Writer("run", "op"), 1) == Writer("run", "op", 2_000)
    assert batch_timestamp_ms(FileIO(str(a)), 0) == 1_000
    (a / "offsets" / "2").write_text("v1\n{}\n")
    with pytest.raises(ConfigError, match="gives no batchTimestampMs"):
        batch_timestamp_ms(FileIO(str(a)), 2)
    with pytest.raises(ConfigError, match="no offsets entry for batch 3"):
        batch_timestamp_ms(FileIO(str(a)), 3)


def test_an_unreadable_checkpoint_records_no_planning_and_checks_nothing(tmp_path: Path) -> None:
    config = resolve_flow_settings("hdfs://nn/ckpt", 2, str(tmp_path / "s"), None, {}, conf={})
    lineage = FlowLineage(config)
    assert lineage.planned_ms(0) is None
    lineage.claim(FileIO(config.root))  # recorded by location, without a query id
    owner = Owner.from_bytes((tmp_path / "s" / OWNER_FILE).read_bytes(), "")
    assert owner == Owner("hdfs://nn/ckpt", None, str(tmp_path / "s"))
    lineage.check(FileIO(config.root), [("op", "")], 0, None)
    assert not lineage.checking
