"""An epoch run's state machine (:class:`fsstate.store.epoch.EpochState`): ``OPEN`` to
``COMMITTED`` through ``COMMITTING``, or to ``FAILED``; a commit or a failure of an epoch no
longer open raises :class:`fsstate.errors.StoreClosedError`; a commit that raises leaves the
run ``FAILED``, its store discarded."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsstate import PartitionStore
from fsstate.errors import CommitError, StoreClosedError
from fsstate.storage.fileio import FileIO
from fsstate.store.epoch import EpochRun, EpochState, StoreAddress, begin_epoch
from fsstate.store.pool import StorePool
from tests.support.engine import KEY, VAL


def _run(tmp_path: Path, pool: StorePool, epoch: int = 0) -> EpochRun:
    return begin_epoch(StoreAddress(FileIO(str(tmp_path)), "op", 0), epoch, pool=pool)


def test_a_committed_epoch_is_final(tmp_path: Path) -> None:
    run = _run(tmp_path, StorePool())
    assert run.state.value == "open" and not run.done
    run.store.value_table("v", VAL, KEY).update(("a",), (0, "zero"))
    run.commit()
    assert run.state is EpochState.COMMITTED and run.done
    with pytest.raises(StoreClosedError, match="already committed"):
        run.fail()
    with pytest.raises(StoreClosedError):
        run.commit()


def test_a_failed_epoch_is_final(tmp_path: Path) -> None:
    pool = StorePool()
    run = _run(tmp_path, pool)
    run.fail()
    assert run.state is EpochState.FAILED
    with pytest.raises(StoreClosedError, match="already failed"):
        run.commit()
    assert not pool.holds(FileIO(str(tmp_path)), "op", 0)


def test_a_commit_that_raises_fails_the_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = StorePool()
    run = _run(tmp_path, pool)

    def broken(self: PartitionStore, version: int) -> None:
        raise CommitError("storage failed")

    monkeypatch.setattr(PartitionStore, "commit", broken)
    with pytest.raises(CommitError), run:
        run.commit()
    assert run.state is EpochState.FAILED
    assert not pool.holds(FileIO(str(tmp_path)), "op", 0)
