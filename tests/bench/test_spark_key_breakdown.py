"""The key breakdown's charging of profiled time to phases
(:func:`bench.harness.key_phases.phase_times`, which ``spark_key_breakdown`` and
``spark_scale`` use): entry points take their subtree, a shared helper is split by its
callers' shares, everything is charged once."""

from __future__ import annotations

import cProfile
import pstats

import pytest

from bench.harness import key_phases as kb

_clock = [0.0]  # the profiler's clock: only _spin moves it, so every figure is exact


def _spin(seconds: float) -> None:
    _clock[0] += seconds


def helper(seconds: float) -> None:
    _spin(seconds)


def commit_phase() -> None:
    helper(0.06)


def read_phase() -> None:
    helper(0.02)
    _spin(0.02)


def task() -> None:
    commit_phase()
    read_phase()


def test_time_is_charged_to_the_nearest_entry_point_and_split_by_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here = __file__.replace("\\", "/").split("/tests/")[-1]
    monkeypatch.setattr(
        kb,
        "PHASES",
        [("commit", here, "commit_phase"), ("state reads", here, "read_phase")],
    )
    prof = cProfile.Profile(lambda: _clock[0])
    prof.runcall(task)
    stats = pstats.Stats(prof)
    got = kb.phase_times(stats)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    assert sum(got.values()) == pytest.approx(total, rel=1e-6)
    assert got["commit"] == pytest.approx(0.06)
    assert got["state reads"] == pytest.approx(0.04)
    assert got.get("other", 0.0) == pytest.approx(0.0)
