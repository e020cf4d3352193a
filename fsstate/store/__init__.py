"""Partition stores: the versioned state of one (operator, partition).

:mod:`~fsstate.store.partition` (:class:`PartitionStore`: tables, commit, restore, refresh),
:mod:`~fsstate.store.commit` (what a commit writes, the new manifest's lineage, adoption),
:mod:`~fsstate.store.catchup` (plans that advance a cached copy to a newer version of its
lineage) and :mod:`~fsstate.store.retention` (retained versions, file deletion).
"""

from __future__ import annotations

from fsstate.store.partition import PartitionStore, store_dir_for

__all__ = ["PartitionStore", "store_dir_for"]
