"""Leases of pending files (:mod:`fsstate.storage.leases`): a dropped store's files released
without a deadlock.

A store dropped without ``close()`` releases its pending files from a finalizer, and the cyclic
collector runs finalizers inside whatever locked region allocated last: once inside the lease
keeper's own lock, where a finalizer that took that lock hung the process (a compaction test
under injected faults waited for ever on the lease book's lock).
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from fsstate.storage.fileio import FileIO
from fsstate.storage.leases import LEASE_DIR, LeaseBook, PendingFiles
from fsstate.storage.location import Location


def _leases(fileio: FileIO) -> list[str]:
    return [e.path for e in fileio.list(LEASE_DIR)]


def test_a_dropped_stores_finalizer_inside_the_books_lock_neither_hangs_nor_keeps_its_lease(
    tmp_path: Path,
) -> None:
    fileio = FileIO(Location.parse(str(tmp_path)))
    book = LeaseBook(rotate_ms=0)
    pending = PendingFiles(fileio, book)
    pending.new_path("data", "", 0)
    assert len(_leases(fileio)) == 1

    def drop_inside_the_lock() -> None:
        nonlocal pending
        with book._lock:  # as the keeper holds it when the collector runs the finalizer
            del pending
            gc.collect()

    worker = threading.Thread(target=drop_inside_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the finalizer waited for the lease book's lock"
    book.rotate()  # the current tag's lease is kept while it is current
    book.keep()  # the keeper releases what the finalizer queued
    assert _leases(fileio) == []
