"""The collector settings of fsstate's tasks (:mod:`fsstate.osmem`): a relaxed young threshold
that comes back as it was, and one freeze per process (a fork freezes again)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from fsstate import osmem
from fsstate.osmem import YOUNG_OBJECTS_MAX, freeze_once, gc_paused, gc_relaxed, task_collector


@pytest.fixture()
def thresholds() -> Iterator[None]:
    old = gc.get_threshold()
    yield
    gc.set_threshold(*old)


@pytest.mark.usefixtures("thresholds")
def test_relaxed_collection_raises_only_the_young_threshold_and_restores_it() -> None:
    gc.set_threshold(700, 10, 10)
    with gc_relaxed():
        assert gc.get_threshold() == (YOUNG_OBJECTS_MAX, 10, 10)
        with gc_relaxed(50_000):  # nested: a lower request leaves the higher one
            assert gc.get_threshold() == (YOUNG_OBJECTS_MAX, 10, 10)
        with gc_paused():
            assert not gc.isenabled()
        assert gc.isenabled()
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(RuntimeError), gc_relaxed():
        raise RuntimeError("a failing task")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("thresholds")
def test_a_task_runs_relaxed_with_the_process_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(osmem, "_FROZEN_PID", [])
    gc.set_threshold(700, 10, 10)
    try:
        with task_collector():
            assert gc.get_threshold() == (YOUNG_OBJECTS_MAX, 10, 10)
            assert gc.get_freeze_count() > 1_000
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("thresholds")
@pytest.mark.parametrize("user", [0, 500_000])
def test_relaxed_collection_keeps_a_users_own_choice(user: int) -> None:
    """Automatic collection off (0) stays off; a higher threshold stays."""
    gc.set_threshold(user, 10, 10)
    with gc_relaxed():
        assert gc.get_threshold() == (user, 10, 10)
    assert gc.get_threshold() == (user, 10, 10)


def test_freeze_once_freezes_what_is_alive_once_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(osmem, "_FROZEN_PID", [])
    try:
        freeze_once()
        frozen = gc.get_freeze_count()
        assert frozen > 1_000  # at least the modules
        later = [[i] for i in range(1_000)]  # tracked objects made after the freeze
        freeze_once()  # nothing more: the objects made since are still collectable
        assert any(o is later for o in gc.get_objects())  # (frozen ones are not listed)
        del later
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # a forked worker freezes its own objects again
            mine = [[i] for i in range(1_000)]
            inherited = gc.get_freeze_count()
            freeze_once()
            os.write(write, b"1" if gc.get_freeze_count() >= inherited + len(mine) else b"0")
            os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"1"
        os.waitpid(pid, 0)
        os.close(read)
    finally:
        gc.unfreeze()
