"""The block cache: decoded row groups, small whole runs and run footers, LRU by bytes.

Invariants:

* The cache never holds more than ``capacity_bytes`` of segments (exact Arrow bytes plus the
  key index of each segment), except a single entry larger than the capacity, which is
  returned to its caller but not kept.
* It is shared by every store of the process and safe to use from the compaction thread: all
  mutations happen under one lock, and segments themselves are immutable.
* Keys are ``(file path, row group)`` (``-1``: the whole file, ``-2``: its footer, key filter
  and row-group bounds); a file is never rewritten, so an entry never goes stale, and a worker
  that opens a store again finds what it already read of the store's files.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, TypeVar

from fsstate.stats import CacheStats


class Cacheable(Protocol):
    """What the cache holds: an immutable object that knows its size."""

    @property
    def nbytes(self) -> int:
        """Bytes held (exact for Arrow data)."""


C = TypeVar("C", bound=Cacheable)


class BlockCache:
    """A byte-bounded LRU cache of decoded segments and run footers."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[tuple[str, int], Cacheable] = OrderedDict()
        self._sizes: dict[tuple[str, int], int] = {}
        self._used = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @property
    def used_bytes(self) -> int:
        """Bytes currently held."""
        return self._used

    def get(self, key: tuple[str, int], load: Callable[[], C]) -> C:
        """The cached object for ``key``, loading (outside the lock) on a miss."""
        with self._lock:
            seg = self._entries.get(key)
            if seg is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return seg  # type: ignore[return-value]  # one kind of object per key
            self.misses += 1
        loaded = load()
        self.put(key, loaded)
        return loaded

    def put(self, key: tuple[str, int], seg: Cacheable) -> None:
        """Insert a segment, evicting least recently used ones to stay within capacity."""
        size = seg.nbytes
        with self._lock:
            if key in self._entries or size > self.capacity_bytes:
                return
            self._entries[key] = seg
            self._sizes[key] = size
            self._used += size
            self._evict_locked(self.capacity_bytes)

    def refresh(self, key: tuple[str, int]) -> None:
        """Re-account an entry whose size changed (a key index was built on it)."""
        with self._lock:
            seg = self._entries.get(key)
            if seg is None:
                return
            new = seg.nbytes
            self._used += new - self._sizes[key]
            self._sizes[key] = new
            self._evict_locked(self.capacity_bytes)

    def _evict_locked(self, target: int) -> int:
        freed = 0
        while self._used > target and self._entries:
            key, _ = self._entries.popitem(last=False)
            size = self._sizes.pop(key)
            self._used -= size
            freed += size
            self.evictions += 1
        return freed

    def shrink_to(self, target_bytes: int) -> int:
        """Evict until at most ``target_bytes`` are held; returns the bytes freed."""
        with self._lock:
            return self._evict_locked(max(0, target_bytes))

    def stats(self) -> CacheStats:
        """Current counters."""
        with self._lock:
            return CacheStats(
                self.capacity_bytes,
                self._used,
                len(self._entries),
                self.hits,
                self.misses,
                self.evictions,
            )
