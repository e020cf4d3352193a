"""Inspecting stored state without writing it: the catalog of stores under a root, any
retained version of a table as a ``pyarrow.Table``, diffs and change feeds between versions,
and verification of every file a version references.

:mod:`~fsstate.inspect.catalog` (:func:`find_stores`), :mod:`~fsstate.inspect.snapshot`
(:func:`read_table`, :class:`Snapshot`), :mod:`~fsstate.inspect.changes`
(:func:`read_changes`, :func:`diff_tables`), :mod:`~fsstate.inspect.verify`
(:func:`verify_stores`) and :mod:`~fsstate.inspect.checkpoint` (a Spark checkpoint's commit
log against a ``tiered()`` query's versions). The command line (:mod:`fsstate.cli`) and the
Spark data sources (:mod:`fsstate_spark.sources.source`) are built on these.
"""

from __future__ import annotations

from fsstate.inspect.catalog import BranchRef, Fork, StoreRef, find_stores
from fsstate.inspect.changes import diff_tables, read_changes
from fsstate.inspect.snapshot import Snapshot, read_table
from fsstate.inspect.verify import (
    MissingPartition,
    Problem,
    Skew,
    VerifyReport,
    missing_partitions,
    skews,
    verify_stores,
)

__all__ = [
    "BranchRef",
    "Fork",
    "MissingPartition",
    "Problem",
    "Skew",
    "Snapshot",
    "StoreRef",
    "VerifyReport",
    "diff_tables",
    "find_stores",
    "missing_partitions",
    "read_changes",
    "read_table",
    "skews",
    "verify_stores",
]
