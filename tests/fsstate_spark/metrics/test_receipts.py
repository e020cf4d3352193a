"""Receipts (:mod:`fsstate_spark.receipts`): merged idempotently, bounded per query, a batch's
receipts asked for by run (a re-run's replace the earlier run's), and
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


def test_a_batchs_receipts_are_its_runs() -> None:
    """A re-run of batch 3 by another run (a roll-back's, on a branch) replaces the earlier
    run's receipt of each partition it committed; asked for a run, only that run's receipts
    come back (a receipt naming no run, a flow driver's, is any run's)."""
    param = ReceiptParam()
    acc = param.zero({})
    first = {("op", p): receipt({"rows_total": 1}, 1.0, "", "run1") for p in (0, 1)}
    acc = param.addInPlace(acc, {"q": {3: first}})
    again = receipt({"rows_total": 2}, 1.0, "v2-abc", "run2")
    acc = param.addInPlace(acc, {"q": {3: {("op", 0): again}}})
    assert batch_receipts(acc, "q", 3, "run2") == {("op", 0): again}
    assert batch_receipts(acc, "q", 3, "run1") == {("op", 1): first[("op", 1)]}
    assert batch_receipts(acc, "q", 3) == {("op", 0): again, ("op", 1): first[("op", 1)]}
    assert again["run"] == "run2" and "run" not in receipt(None, 1.0)
    flow = {"q": {3: {("stage", 0): receipt({"rows_total": 5}, 1.0)}}}
    assert batch_receipts(flow, "q", 3, "run9") == flow["q"][3]
