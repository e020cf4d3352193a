"""StorePool: the stores of one process, reused across micro-batches of their partitions.

Whoever runs a partition's work once per epoch (the ``tiered()`` adapter, the operator runner)
acquires the store at version ``epoch - 1``, works on it, commits ``epoch`` and releases it.

Invariants:

* A store is reused only if it is open, clean (nothing written since its last commit) and
  either at exactly the wanted version (same manifest checksum) or at an older version the
  wanted one descends from, in which case it catches up in place
  (:meth:`fsstate.store.partition.PartitionStore.refresh`); anything else is closed and the
  version is opened from storage. So a failed attempt's dirty store is never reused, and a
  copy whose version was re-committed by another attempt is never advanced.
* A store still *active* (acquired, not released) when the same key is acquired again
  belongs to an attempt that failed; it is closed, never reused.
* At most ``max_idle`` released stores are kept, least recently used closed first (0: none).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from enum import Enum

from fsstate.config import StoreConfig
from fsstate.storage.fileio import FileIO
from fsstate.store.partition import PartitionStore

PoolKey = tuple[str, str, str, int, str]  # (root, operator, layout dir, partition, branch)


class Outcome(str, Enum):
    """How an acquire got its store."""

    NONE = ""  # nothing acquired yet
    HIT = "hit"  # the pooled copy was at the version
    CAUGHT_UP = "caught_up"  # the pooled copy was advanced to the version
    RESTORED = "restored"  # opened from storage

    def __str__(self) -> str:
        return self.value


class StorePool:
    """Stores of this process: the ones in use and committed idle ones (see the module).

    Args:
        max_idle: idle stores kept at most.
    """

    def __init__(self, max_idle: int = 64) -> None:
        self.max_idle = max_idle
        self._idle: OrderedDict[PoolKey, PartitionStore] = OrderedDict()
        self._active: dict[PoolKey, PartitionStore] = {}
        self._lock = threading.Lock()
        self.hits = 0  # reused (at the version, or caught up)
        self.caught_up = 0  # of the hits, advanced from an older version
        self.restores = 0  # opened from storage
        self.last_outcome = Outcome.NONE  # the latest acquire

    @staticmethod
    def key_of(
        fileio: FileIO, operator: str, partition: int, layout: str = "", branch: str = ""
    ) -> PoolKey:
        """The pool key of a store (of layout generation directory ``layout``, on ``branch``)."""
        return (fileio.describe(""), operator, layout, partition, branch)

    def acquire(
        self,
        fileio: FileIO,
        operator: str,
        partition: int,
        version: int | None,
        config: StoreConfig,
        layout: str = "",
        branch: str = "",
    ) -> PartitionStore:
        """The store of (operator, partition) at committed ``version`` (None: empty), in the
        layout generation directory ``layout`` (``""``: generation 0), on ``branch``.

        Raises:
            VersionNotFoundError: ``version`` was never committed or is no longer retained.
        """
        key = self.key_of(fileio, operator, partition, layout, branch)
        with self._lock:
            stale = self._active.pop(key, None)
            cached = self._idle.pop(key, None)
        if stale is not None:
            stale.close()
        if cached is not None and cached.config == config and self._reuse(cached, version):
            store = cached
        else:
            if cached is not None and not cached.closed:
                cached.close()
            self.restores += 1
            self.last_outcome = Outcome.RESTORED
            store = PartitionStore.open(
                fileio, operator, partition, version, config, layout, branch=branch
            )
        with self._lock:
            self._active[key] = store
        return store

    def _reuse(self, cached: PartitionStore, want: int | None) -> bool:
        """Whether the cached store serves version ``want`` (caught up if needed); else closed."""
        reused = False
        before = cached.version
        try:
            if want is None:
                reused = cached.version is None and not cached.dirty and not cached.closed
            else:
                reused = cached.refresh(want)
                if reused and before != want:
                    self.caught_up += 1
        finally:
            if not reused:
                cached.close()
        if reused:
            self.hits += 1
            self.last_outcome = Outcome.CAUGHT_UP if before != want else Outcome.HIT
        return reused

    def release(self, store: PartitionStore) -> None:
        """The user committed ``store``: keep it idle for the next epoch (or close it)."""
        key = self._key(store)
        evicted: list[PartitionStore] = []
        with self._lock:
            self._drop_active(store)
            if self.max_idle > 0 and not store.closed:
                self._idle[key] = store
                self._idle.move_to_end(key)
                while len(self._idle) > self.max_idle:
                    evicted.append(self._idle.popitem(last=False)[1])
            else:
                evicted.append(store)
        for old in evicted:
            if not old.closed:
                old.close()

    def discard(self, store: PartitionStore) -> None:
        """Forget and close a store whose attempt failed (never reused)."""
        with self._lock:
            self._drop_active(store)
        if not store.closed:
            store.close()

    def _key(self, store: PartitionStore) -> PoolKey:
        return self.key_of(
            store.fileio, store.operator, store.partition, store.layout, store.branch
        )

    def _drop_active(self, store: PartitionStore) -> None:
        """Forget ``store`` as active (under its key, or the key it was acquired under if it
        moved to a branch since: :meth:`PartitionStore.fork_to`); the lock is held."""
        key = self._key(store)
        if self._active.get(key) is store:
            del self._active[key]
            return
        for k, s in list(self._active.items()):
            if s is store:
                del self._active[k]

    def holds(
        self, fileio: FileIO, operator: str, partition: int, layout: str = "", branch: str = ""
    ) -> bool:
        """Whether a store of (operator, partition) on ``branch`` is acquired or idle here."""
        key = self.key_of(fileio, operator, partition, layout, branch)
        with self._lock:
            return key in self._active or key in self._idle

    def clear(self) -> None:
        """Close and forget every store; reset the counters."""
        with self._lock:
            stores = [*self._idle.values(), *self._active.values()]
            self._idle.clear()
            self._active.clear()
            self.hits = self.caught_up = self.restores = 0
        for store in stores:
            if not store.closed:
                store.close()

    def __len__(self) -> int:
        return len(self._idle)


_pool = StorePool()


def store_pool() -> StorePool:
    """The process-wide pool."""
    return _pool
