"""The opt-in per-epoch diagnostic of :func:`fsstate.operators.run_epoch`: ``FSSTATE_EPOCH_LOG``
names a file each committed (or adopted) epoch appends one JSON line to; unset, nothing is
written. The phase times are also in the :class:`fsstate.operators.EpochResult`."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from fsstate.operators import Agg, RetractAggregate, run_epoch
from fsstate.operators.runner import EPOCH_LOG_ENV
from fsstate.storage.fileio import FileIO
from fsstate.store.pool import StorePool


def _batch(keys: list[str]) -> pa.Table:
    return pa.table({"k": keys, "op": pa.array([1] * len(keys), pa.int8())})


def test_epoch_log_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "epochs.jsonl"
    monkeypatch.setenv(EPOCH_LOG_ENV, str(log))
    op = RetractAggregate("counts", keys=["k"], aggs=[Agg("count")])
    fileio = FileIO(str(tmp_path / "state"))
    pool = StorePool()
    first = run_epoch(op, fileio, 0, 0, _batch(["a", "b", "a"]), pool=pool)
    second = run_epoch(op, fileio, 0, 1, _batch(["b"]), pool=pool)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["operator"], x["partition"], x["epoch"]) for x in lines] == [
        ("counts", 0, 0),
        ("counts", 0, 1),
    ]
    assert [x["rows_in"] for x in lines] == [3, 1]
    assert [x["store"] for x in lines] == ["restored", "hit"]  # opened, then reused
    assert [first.store, second.store] == ["restored", "hit"]
    for x, r in zip(lines, (first, second)):
        assert x["rows_out"] == r.output.num_rows
        assert x["adopted"] is False
        assert x["total_ms"] == pytest.approx(r.total_ms, abs=1e-3)
        parts = x["acquire_ms"] + x["process_ms"] + x["commit_ms"]
        assert 0 <= parts <= x["total_ms"] + 1e-3
        assert x["end_unix_ms"] - x["start_unix_ms"] == pytest.approx(x["total_ms"], abs=1e-2)


def test_no_log_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EPOCH_LOG_ENV, raising=False)
    op = RetractAggregate("counts", keys=["k"], aggs=[Agg("count")])
    result = run_epoch(op, FileIO(str(tmp_path / "state")), 0, 0, _batch(["a"]), pool=StorePool())
    assert result.acquire_ms >= 0 and result.commit_ms > 0
    assert list(tmp_path.glob("*.jsonl")) == []


def test_unwritable_log_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EPOCH_LOG_ENV, str(tmp_path / "missing-dir" / "epochs.jsonl"))
    op = RetractAggregate("counts", keys=["k"], aggs=[Agg("count")])
    result = run_epoch(op, FileIO(str(tmp_path / "state")), 0, 0, _batch(["a"]), pool=StorePool())
    assert result.rows_in == 1
