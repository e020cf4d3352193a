"""Native Spark state vs tiered fsstate state: the same processor, the same micro-batches, the
same output, over several micro-batches (pandas and Row flavours, TTL, timers, retries,
restarts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fsstate_spark.conftest import Tiered
from tests.support.processors import (
    ROW_SCHEMA,
    SINK_BATCHES,
    SINK_SCHEMA,
    TTL_SCHEMA,
    KitchenSink,
    RowCounter,
    TtlTimers,
)
from tests.support.stream import StreamRunner, memo_run, query_versions

# the compatibility matrix (devkit/compat_matrix.py): every other minor and every other Python
pytestmark = [pytest.mark.compat, pytest.mark.compat_python]


def _query_dirs(state_uri: Path) -> list[Path]:
    return [p for p in state_uri.iterdir() if p.is_dir()]


def test_value_list_map_match_native_with_a_failed_attempt(
    tiered_loop: Tiered,
    spark: Any,
    runner: StreamRunner,
    native_results: dict[str, list[tuple[Any, ...]]],
    tmp_path: Path,
) -> None:
    """Key 'b' fails once in batch 1 after writing state; the retry must not see the writes."""
    native = memo_run(
        runner,
        native_results,
        "sink",
        processor=KitchenSink(fail_key="b"),
        batches=SINK_BATCHES,
        output_schema=SINK_SCHEMA,
    )
    state_uri = tmp_path / "state"
    marker = tmp_path / "failure-injected"
    processor = KitchenSink(fail_key="b", marker=str(marker))
    got = runner.run(tiered_loop(processor, state_uri=str(state_uri)), SINK_BATCHES, SINK_SCHEMA)
    assert marker.exists()
    assert got == native
    assert {r[0] for r in got} == {0, 1, 2}
    # one store per partition, one committed version per micro-batch
    (query_dir,) = _query_dirs(state_uri)
    for partition in (0, 1):
        versions = query_versions(str(query_dir), "KitchenSink", partition)
        assert versions == [0, 1, 2]


def test_restart_restores_state_from_storage(
    tiered_loop: Tiered,
    spark: Any,
    runner: StreamRunner,
    native_results: dict[str, list[tuple[Any, ...]]],
    tmp_path: Path,
) -> None:
    """Two batches, stop, one more batch from the same checkpoint; no store reuse at all."""
    native = memo_run(
        runner,
        native_results,
        "sink",
        processor=KitchenSink(fail_key="b"),
        batches=SINK_BATCHES,
        output_schema=SINK_SCHEMA,
    )
    state_uri = str(tmp_path / "state")
    first = runner.run(
        tiered_loop(KitchenSink(), state_uri=state_uri, max_cached_stores=0),
        SINK_BATCHES[:2],
        SINK_SCHEMA,
        name="restart",
    )
    second = runner.run(
        tiered_loop(KitchenSink(), state_uri=state_uri, max_cached_stores=0),
        SINK_BATCHES[2:],
        SINK_SCHEMA,
        name="restart",
        total_batches=3,
    )
    assert sorted(first + second) == native
    assert {r[0] for r in first} == {0, 1} and {r[0] for r in second} == {2}  # every batch seen


def test_ttl_and_timers_match_native(
    tiered_loop: Tiered, spark: Any, runner: StreamRunner, tmp_path: Path
) -> None:
    """Short-TTL state written in one batch is never visible in the next; timers read state."""
    batches = [
        [{"k": "a", "v": 1}, {"k": "b", "v": 2}],
        [{"k": "a", "v": 3}, {"k": "c", "v": 4}, {"k": "a", "v": 8}],
        [{"k": "a", "v": 5}, {"k": "b", "v": 6}, {"k": "c", "v": 7}],
    ]
    kwargs: dict[str, Any] = {"time_mode": "ProcessingTime"}
    native = runner.run(TtlTimers(), batches, TTL_SCHEMA, **kwargs)
    got = runner.run(
        tiered_loop(TtlTimers(), state_uri=str(tmp_path / "state")), batches, TTL_SCHEMA, **kwargs
    )
    assert got == native
    inputs = [r for r in got if r[2] == "input"]
    timers = [r for r in got if r[2] == "timer"]
    assert len(inputs) == 7 and len(timers) == 3
    # columns: batch, k, kind, long, short_exists, short, slist, smap, lmap, timers
    assert all(r[4] is False and r[5] == -1 and r[6] == 0 and r[7] == 0 for r in inputs)
    assert ("a", 12) in {(r[1], r[3]) for r in inputs if r[0] == 2}


def test_row_flavour_matches_native(
    tiered_loop: Tiered, spark: Any, runner: StreamRunner, tmp_path: Path
) -> None:
    """transformWithState (Row in, Row out) with value, list and map state."""
    batches = [
        [{"k": "x", "v": 1}, {"k": "y", "v": 2}, {"k": "x", "v": 1}],
        [{"k": "x", "v": 3}, {"k": "y", "v": 2}, {"k": "z", "v": 9}],
    ]
    native = runner.run(RowCounter(), batches, ROW_SCHEMA, pandas=False)
    got = runner.run(
        tiered_loop(RowCounter(), state_uri=str(tmp_path / "state")),
        batches,
        ROW_SCHEMA,
        pandas=False,
    )
    assert got == native
    assert (1, "x", 3, "1,1,3", "1:2;3:1") in got


def test_session_tracker_example_matches_native(
    tiered_loop: Tiered, spark: Any, runner: StreamRunner, tmp_path: Path
) -> None:
    """The example processor (value + list + map state, all with TTL) in ProcessingTime mode."""
    from examples.session_tracker import INPUT_SCHEMA, OUTPUT_SCHEMA, SessionTracker

    pages = ["home", "cart", "help", "search"]
    batches = [
        [
            {"user": f"u{(i * 7 + b) % 5}", "page": pages[(i + b) % 4], "ms": b * 1000 + i}
            for i in range(12)
        ]
        for b in range(3)
    ]
    kwargs: dict[str, Any] = {
        "time_mode": "ProcessingTime",
        "input_schema": INPUT_SCHEMA,
        "key": "user",
    }
    native = runner.run(SessionTracker(), batches, OUTPUT_SCHEMA, **kwargs)
    got = runner.run(
        tiered_loop(SessionTracker(), state_uri=str(tmp_path / "state")),
        batches,
        OUTPUT_SCHEMA,
        **kwargs,
    )
    assert got == native
    assert len(got) == 15
