"""``format("fsstate")``'s option resolution over rescaled operator state: the newest batch
reads the newest layout generation; a batch from before a rescale reads the generation in
force then (no Spark session needed: :func:`select` resolves the options in Python)."""

from __future__ import annotations

from pathlib import Path

from fsstate.storage.fileio import FileIO
from fsstate.store import PartitionStore
from fsstate.store.rescale import rescale
from fsstate_spark.sources.selection import select
from tests.support.rescale_state import OP, by_k, write_state


def test_batch_ids_before_and_after_a_rescale_read_their_generation(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    fileio = FileIO(uri)
    v = write_state(fileio, 3, seed=5)
    new = rescale(fileio, OP, partitions=5, keys=["k"], partition_of=by_k(5), version=v).layout
    for p in range(5):  # batch v + 1 on the rescaled stores
        store = PartitionStore.open(fileio, OP, p, v, layout=new.dir)
        store.commit(v + 1)
        store.close()

    opts = {"path": uri, "operatorName": OP, "stateVarName": "plain"}
    newest = select(opts)
    assert newest.version == v + 1 and newest.layout == new.dir
    assert sorted(s.partition for s in newest.stores) == [0, 1, 2, 3, 4]
    at_rescale = select({**opts, "batchId": str(v)})
    assert at_rescale.layout == new.dir and len(at_rescale.stores) == 5
    before = select({**opts, "batchId": str(v - 1)})
    assert before.layout == "" and sorted(s.partition for s in before.stores) == [0, 1, 2]
