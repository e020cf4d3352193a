"""The process-wide memory controller: one byte budget for every store of the process.

It counts what the engine holds: hot views (estimated from a sample of each table), pinned
Arrow segments (exact), the block cache (exact), TTL indexes and run filters (estimated).
Tables report growth (new views, list appends, new map entries); every
``check_every_growth`` growth events the writer's own thread asks the controller to check.
Above the high watermark the controller reclaims, coldest store first, until usage is below
the low watermark:

1. shrink the block cache;
2. release pinned segments of runs already on disk;
3. spill: seal dirty views into a segment, write every unwritten run to Parquet (a commit
   later reuses these files), release the segments and evict the clean views.

Because reclaiming runs in the writer's thread, a writer that outruns spilling is slowed by
the spill itself and memory never grows without bound.

Invariants:

* One controller per process (:func:`get_controller`); :func:`configure` changes its settings
  in place, so every store sees the same budget.
* Reclaiming never loses data: only clean views are evicted and only written runs released.
* Every figure in :meth:`MemoryController.stats` is cheap to compute (no I/O).
* A compaction round reserves its working memory (:meth:`MemoryController.reserved`) for its
  duration, so what it holds counts in the budget too; only writer threads reclaim.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol

from fsstate.compaction import Compactor
from fsstate.config import EngineConfig, parse_bytes
from fsstate.errors import ConfigError
from fsstate.osmem import return_memory_to_os
from fsstate.stats import ProcessStats, StoreStats
from fsstate.storage.cache import BlockCache


class ManagedStore(Protocol):
    """What the controller uses of a store (:class:`fsstate.store.partition.PartitionStore`)."""

    last_used: int

    def memory_bytes(self) -> int:
        """Bytes the store holds in memory."""

    def release_segments(self) -> int:
        """Release pinned segments already on disk; returns the bytes freed."""

    def spill(self) -> tuple[int, int]:
        """Spill every table to Parquet: (bytes freed, bytes written)."""

    def stats(self) -> StoreStats:
        """Per-store figures."""


class MemoryController:
    """The byte budget shared by every store of the process (see the module docstring)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.cache = BlockCache(int(config.memory_limit_bytes * config.block_cache_fraction))
        self.growth = config.check_every_growth
        self._stores: weakref.WeakSet[ManagedStore] = weakref.WeakSet()
        self._clock = 0
        self._lock = threading.RLock()
        self.spills = 0
        self.bytes_spilled = 0
        self.reclaims = 0
        self._compactor: Compactor | None = None
        self.reserved_bytes = 0  # working memory of compaction rounds in progress
        self._reserve_lock = threading.Lock()

    # -- configuration -----------------------------------------------------------------------
    def reconfigure(self, config: EngineConfig) -> None:
        """Apply new settings to this controller (the same object stays in use)."""
        self.config = config
        self.cache.capacity_bytes = int(config.memory_limit_bytes * config.block_cache_fraction)
        self.cache.shrink_to(self.cache.capacity_bytes)
        self.growth = config.check_every_growth

    # -- stores --------------------------------------------------------------------------------
    def register(self, store: ManagedStore) -> None:
        """Count a store in the budget."""
        with self._lock:
            self._stores.add(store)
        self.touch(store)

    def unregister(self, store: ManagedStore) -> None:
        """Stop counting a (closed) store."""
        with self._lock:
            self._stores.discard(store)

    def touch(self, store: ManagedStore) -> None:
        """Mark a store as recently used (reclaiming starts with the least recent)."""
        self._clock += 1
        store.last_used = self._clock

    def stores(self) -> list[ManagedStore]:
        """Registered stores, least recently used first."""
        with self._lock:
            return sorted(self._stores, key=lambda s: s.last_used)

    # -- budget --------------------------------------------------------------------------------
    def usage_bytes(self) -> int:
        """Bytes the engine holds now (estimated for Python objects, exact for Arrow), with
        the working memory reserved by a compaction round in progress."""
        return (
            self.cache.used_bytes
            + self.reserved_bytes
            + sum(s.memory_bytes() for s in self.stores())
        )

    @contextlib.contextmanager
    def reserved(self, nbytes: int) -> Iterator[None]:
        """Count ``nbytes`` of transient working memory (a compaction round) in the budget
        while the block runs: writers then spill earlier instead of the process growing."""
        with self._reserve_lock:
            self.reserved_bytes += nbytes
        try:
            yield
        finally:
            with self._reserve_lock:
                self.reserved_bytes -= nbytes

    def check(self) -> None:
        """Reclaim memory if usage is above the high watermark (called on growth)."""
        self.growth = self.config.check_every_growth
        limit = self.config.memory_limit_bytes
        if self.usage_bytes() > self.config.high_watermark * limit:
            self.reclaim(int(self.config.low_watermark * limit))

    def reclaim(self, target_bytes: int) -> int:
        """Free memory until usage is at most ``target_bytes``; returns the bytes freed."""
        with self._lock:
            self.reclaims += 1
            usage = self.usage_bytes()
            start = usage
            if usage <= target_bytes:
                return 0
            usage -= self.cache.shrink_to(max(0, self.cache.used_bytes - (usage - target_bytes)))
            stores = self.stores()
            for store in stores:
                if usage <= target_bytes:
                    break
                usage -= store.release_segments()
            for store in stores:
                if usage <= target_bytes:
                    break
                freed, written = store.spill()
                usage -= freed
                if written:
                    self.spills += 1
                    self.bytes_spilled += written
            return_memory_to_os()
            return start - usage

    # -- compaction ----------------------------------------------------------------------------
    def compactor(self) -> Compactor:
        """The background compactor (started on first use)."""
        if self._compactor is None:
            self._compactor = Compactor(self)
        return self._compactor

    # -- stats ---------------------------------------------------------------------------------
    def stats(self, per_store: bool = False) -> ProcessStats:
        """Process-wide figures; ``per_store`` adds every store's stats."""
        stores = self.stores()
        store_stats = [s.stats() for s in stores]
        comp = self._compactor
        return ProcessStats(
            memory_limit_bytes=self.config.memory_limit_bytes,
            memory_bytes=self.cache.used_bytes + sum(s.memory_bytes for s in store_stats),
            disk_bytes=sum(s.disk_bytes for s in store_stats),
            stores=len(stores),
            spills=self.spills,
            bytes_spilled=self.bytes_spilled,
            reclaims=self.reclaims,
            compactions=comp.rounds if comp else 0,
            compaction_bytes_written=comp.bytes_written if comp else 0,
            compaction_errors=comp.errors if comp else 0,
            cache=self.cache.stats(),
            store_stats=store_stats if per_store else [],
        )


_controller: MemoryController | None = None
_controller_lock = threading.Lock()


def _env_config() -> EngineConfig:
    limit = os.environ.get("FSSTATE_MEMORY_LIMIT")
    if limit:
        return EngineConfig(memory_limit_bytes=parse_bytes(limit, "FSSTATE_MEMORY_LIMIT"))
    return EngineConfig()


def get_controller() -> MemoryController:
    """The process's memory controller (created on first use; FSSTATE_MEMORY_LIMIT applies)."""
    global _controller
    if _controller is None:
        with _controller_lock:
            if _controller is None:
                _controller = MemoryController(_env_config())
    return _controller


def configure(memory_limit: int | str | None = None, **settings: Any) -> MemoryController:
    """Change the process-wide settings; returns the controller.

    Args:
        memory_limit: the byte budget, as bytes or a string like ``"256MiB"``.
        **settings: any other :class:`EngineConfig` field.

    Raises:
        ConfigError: a setting is invalid (nothing changes then).
    """
    ctl = get_controller()
    changes = dict(settings)
    if memory_limit is not None:
        changes["memory_limit_bytes"] = parse_bytes(memory_limit, "memory_limit")
    try:
        config = replace(ctl.config, **changes)
    except TypeError as exc:
        raise ConfigError(f"unknown engine setting: {exc}") from None
    ctl.reconfigure(config)
    return ctl
