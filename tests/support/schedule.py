"""The order test files start in under ``pytest -n 2 --dist loadfile``: the longest first.

xdist's ``loadfile`` gives each worker whole files, by default those with the most tests
first; the suite's longest files hold a test or two each (a kill-and-restart job, a Spark
Connect server, a local-cluster), so they ran last and one worker ran the last of them while
the other idled. Here the files of :data:`FILE_SECONDS` come first, longest first (the
longest-processing-time rule), the rest after them in collection order; ``make test`` and the
compatibility matrix pass ``--no-loadscope-reorder`` so that xdist keeps this order.

Invariants: only the order changes (every collected test runs); a file missing here runs after
the listed ones; the figures are worker seconds from one ``--durations=0`` run of ``make test``
on a 2-core machine (2026-11-29), files of 40 s or more, and only rank the files.
"""

from __future__ import annotations

import pytest

FILE_SECONDS = {
    "tests/fsstate_spark/conformance/test_state_variables.py": 397,
    "tests/fsstate_spark/conformance/test_timers.py": 304,
    "tests/fsstate_spark/conformance/test_basics.py": 297,
    "tests/fsstate_spark/conformance/test_schema_evolution.py": 282,
    "tests/fsstate_spark/operators/test_operator_recovery.py": 266,
    "tests/fsstate_spark/conformance/test_initial_state.py": 248,
    "tests/fsstate/store/test_commit_crash.py": 229,
    "tests/fsstate_spark/operators/test_connect_flows.py": 190,
    "tests/fsstate_spark/tiered/test_lineage.py": 171,
    "tests/fsstate_spark/conformance/test_arrow_batches.py": 169,
    "tests/fsstate_spark/metrics/test_progress.py": 165,
    "tests/fsstate_spark/operators/test_transform_with_state.py": 161,
    "tests/fsstate_spark/operators/test_operators_spark.py": 135,
    "tests/fsstate_spark/operators/test_rescale_flows.py": 135,
    "tests/fsstate_spark/tiered/test_fast_loop.py": 134,
    "tests/fsstate_spark/test_cluster.py": 133,
    "tests/fsstate_spark/tiered/test_rescale.py": 131,
    "tests/fsstate_spark/test_spark_submit.py": 126,
    "tests/fsstate_spark/tiered/test_streaming.py": 126,
    "tests/fsstate_spark/test_connect.py": 126,
    "tests/fsstate_spark/conformance/test_tws_fuzz.py": 111,
    "tests/fsstate_spark/operators/test_operators_types.py": 111,
    "tests/fsstate_spark/test_fork.py": 86,
    "tests/fsstate/test_model_random.py": 70,
    "tests/fsstate_spark/tiered/test_migration.py": 68,
    "tests/fsstate_spark/tiered/test_object_storage.py": 68,
    "tests/fsstate/operators/test_window_memory.py": 65,
    "tests/fsstate_spark/tiered/test_order.py": 53,
    "tests/fsstate/store/test_rescale.py": 50,
    "tests/docs/test_readme.py": 50,
    "tests/fsstate/operators/test_retractions.py": 45,
    "tests/fsstate/test_cli_exit.py": 44,
    "tests/fsstate/test_larger_than_memory.py": 44,
}
"""Worker seconds per file (setup, call and teardown of its tests)."""


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: files of :data:`FILE_SECONDS` first, longest first (a
    stable sort: the tests of a file keep their order)."""
    items.sort(key=lambda item: -FILE_SECONDS.get(item.nodeid.split("::", 1)[0], 0))
