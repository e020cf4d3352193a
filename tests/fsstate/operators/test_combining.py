"""The per-epoch combine decision (:mod:`fsstate.operators.combining`): combine while it folds
rows away, stop when it does not, retry only after a while, and decide the same from the same
committed records."""

from __future__ import annotations

import dataclasses

from fsstate.operators.combining import KEEP_FRACTION_MAX, RETRY_EPOCHS, batch_stats, decide
from fsstate.store.record import CombineRecord


def _record(rows: int, received: int, groups: int, combined: bool, skip: int = 0) -> CombineRecord:
    return dataclasses.replace(batch_stats(rows, received, groups, combined), skip_until=skip)


def test_without_a_record_an_epoch_combines() -> None:
    assert decide(None, 0) == (True, 0)
    assert decide(None, 7) == (True, 0)


def test_combining_goes_on_while_it_folds_rows_away() -> None:
    # 400 raw rows became 20 partials: keep combining
    assert decide(_record(400, 20, 20, True), 5) == (True, 0)
    kept = int(400 * KEEP_FRACTION_MAX)
    assert decide(_record(400, kept, 20, True), 5) == (True, 0)


def test_a_combine_that_keeps_most_rows_stops_for_a_while() -> None:
    combine, skip = decide(_record(100, 60, 50, True), 5)
    assert (combine, skip) == (False, 5 + RETRY_EPOCHS)
    # the skip is carried until it ends, whatever the records say meanwhile
    for epoch in range(6, 5 + RETRY_EPOCHS):
        assert decide(_record(100, 100, 5, False, skip), epoch) == (False, skip)
    # then the uncombined record decides: few groups per row -> try combining again
    assert decide(_record(100, 100, 5, False, skip), skip) == (True, 0)
    assert decide(_record(100, 100, 50, False, skip), skip) == (False, 0)


def test_uncombined_epochs_combine_again_only_when_groups_are_few() -> None:
    assert decide(_record(1000, 1000, 900, False), 3) == (False, 0)
    assert decide(_record(1000, 1000, 100, False), 3) == (True, 0)


def test_an_empty_epoch_keeps_the_previous_choice() -> None:
    assert decide(_record(0, 0, 0, True), 4) == (True, 0)
    assert decide(_record(0, 0, 0, False), 4) == (False, 0)


def test_partition_records_are_summed_and_a_missing_one_gives_none() -> None:
    merged = CombineRecord.merge([_record(10, 5, 5, True), _record(30, 30, 20, False, 9)])
    assert merged is not None
    assert merged.to_meta() == {
        "rows": 40,
        "input": 35,
        "groups": 25,
        "combined": 1,
        "skip_until": 9,
    }
    assert CombineRecord.merge([_record(10, 5, 5, True), None]) is None
    assert CombineRecord.from_meta({"rows": "x"}) is None
