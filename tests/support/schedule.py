"""The order test files start in under ``pytest -n 2 --dist loadfile``: the longest first.

xdist's ``loadfile`` gives each worker whole files, by default those with the most tests
first; the suite's longest files hold a test or two each (a kill-and-restart job, a Spark
Connect server, a local-cluster), so they ran last and one worker ran the last of them while
the other idled. Here the files of :data:`FILE_SECONDS` come first, longest first (the
longest-processing-time rule), the rest after them in collection order; ``make test`` and the
compatibility matrix pass ``--no-loadscope-reorder`` so that xdist keeps this order.

Invariants: only the order changes (every collected test runs); a file missing here runs after
the listed ones; the figures are worker seconds from one ``--durations=0`` run of ``make test``
on a 2-core machine (2026-12-07, under other jobs' load), files of 40 s or more, and only
rank the files.
"""

from __future__ import annotations

import pytest

FILE_SECONDS = {
    "tests/fsstate_spark/operators/test_operator_recovery.py": 358,
    "tests/fsstate_spark/conformance/test_timers.py": 328,
    "tests/fsstate/store/test_commit_crash.py": 245,
    "tests/fsstate_spark/conformance/test_state_variables.py": 222,
    "tests/fsstate_spark/operators/test_rescale_flows.py": 220,
    "tests/fsstate_spark/conformance/test_basics.py": 212,
    "tests/fsstate_spark/tiered/test_rescale.py": 200,
    "tests/fsstate_spark/operators/test_operators_spark.py": 192,
    "tests/fsstate_spark/conformance/test_schema_evolution.py": 191,
    "tests/fsstate_spark/conformance/test_initial_state.py": 175,
    "tests/fsstate_spark/test_cluster.py": 158,
    "tests/fsstate_spark/operators/test_transform_with_state.py": 152,
    "tests/fsstate_spark/tiered/test_lineage.py": 150,
    "tests/fsstate_spark/operators/test_operators_types.py": 146,
    "tests/fsstate_spark/tiered/test_streaming.py": 141,
    "tests/fsstate_spark/test_spark_submit.py": 138,
    "tests/fsstate_spark/operators/test_connect_flows.py": 127,
    "tests/fsstate/test_model_random.py": 116,
    "tests/fsstate_spark/metrics/test_progress.py": 107,
    "tests/fsstate_spark/tiered/test_fast_loop.py": 98,
    "tests/fsstate/operators/test_window_memory.py": 95,
    "tests/fsstate/tables/test_scan.py": 89,
    "tests/fsstate_spark/conformance/test_arrow_batches.py": 79,
    "tests/fsstate/cli/test_exit.py": 77,
    "tests/fsstate_spark/tiered/test_migration.py": 77,
    "tests/fsstate_spark/operators/test_tasks.py": 72,
    "tests/fsstate_spark/tiered/test_object_storage.py": 71,
    "tests/fsstate_spark/sources/test_state_source.py": 66,
    "tests/fsstate/test_larger_than_memory.py": 65,
    "tests/fsstate_spark/test_connect.py": 55,
    "tests/fsstate/operators/test_retractions.py": 44,
    "tests/fsstate_spark/tiered/test_batch_and_config.py": 44,
    "tests/fsstate_spark/test_fork.py": 42,
}
"""Worker seconds per file (setup, call and teardown of its tests)."""


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: files of :data:`FILE_SECONDS` first, longest first (a
    stable sort: the tests of a file keep their order)."""
    items.sort(key=lambda item: -FILE_SECONDS.get(item.nodeid.split("::", 1)[0], 0))
