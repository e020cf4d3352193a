"""Opening without a version and committing onto a version another writer published (issue 45):
the newest version is opened, never an empty store beside it; another writer's version is a
typed error, while the same epoch's retry still adopts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsstate import PartitionStore
from fsstate.errors import CommitConflictError, ConfigError
from fsstate.store.epoch import EpochRun
from fsstate.store.record import EpochRecord, Writer
from tests.support.engine import KEY, VAL


def _commit(root: str, version: int, label: str, writer: Writer | None) -> PartitionStore:
    """An epoch ``version`` of store (op, 0) from its parent, writing ``label`` under key a."""
    parent = version - 1 if version else None
    store = PartitionStore.open(root, "op", 0, parent)
    store.value_table("v", VAL, KEY).update(("a",), (version, label))
    EpochRun.of_store(store, version, writer=writer).commit(EpochRecord())
    return store


def test_open_without_version_opens_the_newest(tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    empty = PartitionStore.open(root, "op", 0)  # nothing committed: an empty store
    assert empty.version is None
    _commit(root, 0, "zero", None)
    _commit(root, 1, "one", None)
    newest = PartitionStore.open(root, "op", 0)
    assert newest.version == 1
    assert newest.value_table("v", VAL, KEY).get(("a",)) == (1, "one")
    explicit_empty = PartitionStore.open(root, "op", 0, None)  # asked for: still empty
    assert explicit_empty.version is None
    assert explicit_empty.value_table("v", VAL, KEY).get(("a",)) is None
    with pytest.raises(ConfigError, match=r"version=True .* give a committed version"):
        PartitionStore.open(root, "op", 0, True)


def test_engine_commit_onto_a_querys_version_is_refused(tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    query = Writer("run-1", "op-instance")
    _commit(root, 0, "zero", query)
    _commit(root, 1, "query", query)
    tool = PartitionStore.open(root, "op", 0, 0)
    tool.value_table("v", VAL, KEY).update(("a",), (1, "tool"))
    with pytest.raises(CommitConflictError, match=r"version 1 .* published by another writer"):
        tool.commit(1)
    assert tool.version == 0  # not adopted: the caller's writes are still there
    assert tool.value_table("v", VAL, KEY).get(("a",)) == (1, "tool")
    assert PartitionStore.open(root, "op", 0, 1).value_table("v", VAL, KEY).get(("a",)) == (
        1,
        "query",
    )


def test_query_commit_onto_an_engine_version_is_refused(tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    _commit(root, 0, "zero", None)
    _commit(root, 1, "engine", None)
    with pytest.raises(CommitConflictError, match=r"another writer .*no recorded writer"):
        _commit(root, 1, "query", Writer("run-1", "i"))


@pytest.mark.parametrize(
    "retry",
    [Writer("run-1", "i"), Writer("run-2", "i2")],
    ids=["same run (task retry)", "another run (re-run after a restart)"],
)
def test_the_same_epochs_retry_adopts(tmp_path: Path, retry: Writer) -> None:
    root = str(tmp_path / "state")
    first = Writer("run-1", "i")
    _commit(root, 0, "zero", first)
    _commit(root, 1, "first", first)
    again = _commit(root, 1, "retry", retry)
    assert again.version == 1 and not again.dirty
    assert again.value_table("v", VAL, KEY).get(("a",)) == (1, "first")
