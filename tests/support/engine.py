"""Shared test constants and helpers of the engine suites (a plain module: import it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from fsstate import PartitionStore, StoreConfig
from fsstate.storage.location import Location

KEY = pa.schema([pa.field("user", pa.string())])
VAL = pa.schema([pa.field("count", pa.int64()), pa.field("label", pa.string())])
UKEY = pa.schema([pa.field("item", pa.string())])

TIERS = ("memory", "sealed", "spilled", "reopened")
REPO_ROOT = Path(__file__).resolve().parents[2]


def run_report_job(module: str, *args: object, timeout_s: float = 600) -> dict[str, Any]:
    """Run ``python -m module *args`` from the repository root and return the JSON report it
    prints last (the memory jobs measure a process of their own); fails the test, with the
    job's output, if it exits non-zero."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(report)
    return report


def run_probe(code: str, timeout_s: float = 120) -> tuple[dict[str, Any], str]:
    """Run ``code`` in a fresh interpreter, the repository on its path, and return the JSON
    object of the last line it prints as ``PROBE <json>`` and its stderr; fails the test, with
    the output, if it exits non-zero or prints no such line."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=timeout_s, check=False,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    seen: dict[str, Any] = json.loads(lines[-1].removeprefix("PROBE "))
    return seen, proc.stderr


def to_tier(store: PartitionStore, tier: str, version: int) -> PartitionStore:
    """Move everything the store holds to ``tier`` and return the store to read from.

    memory: nothing moves (hot views); sealed: memtables sealed into in-memory Arrow segments
    and views dropped; spilled: sealed, written to Parquet, segments and views dropped;
    reopened: committed and opened again from storage in a fresh store object.
    """
    if tier == "memory":
        return store
    if tier == "sealed":
        for name in store.table_names():
            t = store.table(name)
            t.seal()
            t.evict_clean()
        return store
    if tier == "spilled":
        store.commit(version)
        for name in store.table_names():
            t = store.table(name)
            t.evict_clean()
            for run in t.runs:
                run.release()
        return store
    assert tier == "reopened"
    store.commit(version)
    reopened = PartitionStore.open(
        store.fileio, store.operator, store.partition, version, store.config
    )
    reopened.set_time(store.now_ms)
    return reopened


Factory = Callable[..., PartitionStore]


def store_factory(root: Location) -> Factory:
    """A factory of empty stores under ``root`` (a local directory or an object store prefix)."""

    def make(operator: str = "op", partition: int = 0, **config: Any) -> PartitionStore:
        store = PartitionStore.open(root, operator, partition, None, StoreConfig(**config))
        store.set_time(1_000)
        return store

    return make


def as_another_process(store: PartitionStore) -> None:
    """Empty the block cache ``store`` uses, so later reads see storage as a process that did
    not write its files would (a process caches the small files it writes: write-through)."""
    store.controller.cache.shrink_to(0)


def settle_leases() -> None:
    """Let go of this process's writer leases that protect no pending file (a new tag for what
    is written next): a collection in the test then sees what the writers left as another
    process would once they stopped (:mod:`fsstate.storage.leases`)."""
    from fsstate.storage.leases import lease_book

    lease_book().rotate()
    lease_book().keep()
