"""An epoch works with the pool its caller gives, an empty one included (a pool with no idle
store is falsy: ``len`` counts its idle stores), and never with the process's pool then."""

from __future__ import annotations

from pathlib import Path

from fsstate import PartitionStore
from fsstate.storage.fileio import FileIO
from fsstate.store.epoch import EpochRun, StoreAddress, begin_epoch
from fsstate.store.pool import Outcome, StorePool, store_pool
from tests.support.engine import KEY, VAL


def test_begin_epoch_uses_the_given_empty_pool(tmp_path: Path) -> None:
    fileio = FileIO(str(tmp_path / "state"))
    ref = StoreAddress(fileio, "op", 0)
    mine, other = StorePool(), StorePool()
    assert not mine  # empty: falsy
    run = begin_epoch(ref, 0, pool=mine)
    run.store.value_table("v", VAL, KEY).update(("a",), (0, "zero"))
    run.commit()
    assert mine.holds(fileio, "op", 0) and len(mine) == 1
    assert not store_pool().holds(fileio, "op", 0)
    # another worker's pool commits version 1; the first pool's store catches up to it
    run = begin_epoch(ref, 1, pool=other)
    assert run.outcome == Outcome.RESTORED
    run.store.value_table("v", VAL, KEY).update(("a",), (1, "one"))
    run.commit()
    run = begin_epoch(ref, 2, pool=mine)
    assert run.outcome == Outcome.CAUGHT_UP
    assert run.store.value_table("v", VAL, KEY).get(("a",)) == (1, "one")
    run.fail()
    assert not store_pool().holds(fileio, "op", 0)


def test_of_store_releases_to_the_given_empty_pool(tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    pool = StorePool()
    store = PartitionStore.open(root, "op", 0, None)
    store.value_table("v", VAL, KEY).update(("a",), (0, "zero"))
    EpochRun.of_store(store, 0, pool=pool).commit()
    assert len(pool) == 1  # the committed store is idle in the caller's pool, for reuse
