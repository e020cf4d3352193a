"""Receipts (:mod:`fsstate_spark.receipts`): merged idempotently, bounded per query, and
``spark.fsstate.metrics=false`` turns the figures off (no accumulator, no summary recorded)."""

from __future__ import annotations

from pathlib import Path

from fsstate_spark.receipts import KEEP_BATCHES, ReceiptParam, batch_receipts, receipt
from fsstate_spark.tiered.settings import resolve_config


def test_receipts_merge_by_key_and_keep_the_newest_batches() -> None:
    param = ReceiptParam()
    acc = param.zero({})
    for b in range(KEEP_BATCHES + 5):
        for p in (0, 1):
            acc = param.addInPlace(acc, {"q": {b: {("op", p): receipt({"rows_total": b}, 1.0)}}})
    acc = param.addInPlace(acc, {"q": {KEEP_BATCHES + 4: {("op", 1): receipt(None, 2.0)}}})
    assert sorted(acc["q"]) == list(range(5, KEEP_BATCHES + 5))
    last = batch_receipts(acc, "q", KEEP_BATCHES + 4)
    assert last[("op", 0)]["summary"] == {"rows_total": KEEP_BATCHES + 4}
    assert last[("op", 1)] == {"summary": None, "commit_ms": 2.0, "branch": ""}
    assert batch_receipts(acc, "other", 0) == {} and batch_receipts(None, "q", 5) == {}


def test_metrics_off_records_no_summary(tmp_path: Path) -> None:
    on = resolve_config("P", str(tmp_path), None, None, {}, conf={})
    off = resolve_config("P", str(tmp_path), None, None, {}, conf={"metrics": "false"})
    assert on.metrics and on.store.record_summary
    assert not off.metrics and not off.store.record_summary
