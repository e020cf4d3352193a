"""Pending-output leases: files a writer has not published yet are never collected.

A writer (one process) writes data files before a manifest publishes them: a commit's runs, the
spills of a long batch, a background merge that waits for the next commit. Until a manifest
names them only the writer knows they are needed. Each such file carries the writer's lease
*tag* in its name (:mod:`fsstate.storage.naming`), and while any file of a tag is pending under
a root, the writer holds that tag's lease there: an empty object
``<root>/_fsstate/leases/<tag>.<lease_ms>`` whose modification time the writer renews. The
garbage collection (:mod:`fsstate.store.gc`) deletes an unreferenced file only when no lease of
its tag is in force (:func:`read_leases`, :func:`lease_in_force`) and it is older than the grace
time; so a writer that idles for hours with a merged run waiting for its next commit, or a
batch that spills and runs for longer than any grace, loses nothing.

Tags rotate: a process writes under one tag for at most ``rotate_ms``; a tag that is not the
current one and has no pending file left (all published, or forgotten with their closed store)
gets its lease released (deleted), so the files of that tag nobody published (failed attempts,
discarded merges) become collectible by anyone.

Invariants:

* A tag's lease exists under a root before the first file of that tag is written there
  (:meth:`LeaseBook.pending`: one PUT, synchronously, when a root meets a new tag).
* A lease is renewed while it has pending files, every ``lease_ms / 3`` at least (by the keeper
  thread, or inline when a file is registered); renewing writes the object again (one PUT).
* A file whose lease lapsed while it was pending (not renewed in time: the process was frozen
  longer than the lease, or storage refused the renewals) is never published:
  :meth:`LeaseBook.covers` is False for it and the commit refuses
  (:class:`fsstate.errors.CommitError`; a retry writes anew). The lapsed tag is retired at once.
* One keeper thread per process, a daemon, waking at most every ``lease_ms / 4``; its work per
  wake-up is one request per (root, tag) with pending files, plus one delete per released tag.
* A finalizer takes no lock: a store dropped without ``close()`` has its pending files queued
  (:meth:`LeaseBook.forget_later`) and released by the keeper or the next writer, since the
  cyclic collector runs finalizers inside whatever locked region allocated last (the keeper's
  own, once: a deadlock).
* The clock of a lease is the writer's wall clock at the start of the PUT; collectors compare
  the object's modification time plus ``lease_ms`` plus a margin of ``lease_ms`` with theirs, so
  clocks may disagree by up to ``lease_ms`` without a pending file being deleted.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fsstate.errors import FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.naming import Origin, data_path

__all__ = [
    "LEASE_DIR",
    "LEASE_MS",
    "LeaseBook",
    "PendingFiles",
    "lease_book",
    "lease_in_force",
    "read_leases",
]

log = logging.getLogger(__name__)

LEASE_DIR = "_fsstate/leases"  # relative to a store root: <tag>.<lease_ms>
LEASE_MS = 5 * 60 * 1000  # how long a lease holds without renewal
ROTATE_MS = 60 * 1000  # a tag is written under for at most this long


@dataclass
class _Lease:
    """One tag's lease under one root."""

    fileio: FileIO
    tag: str
    pending: int = 0
    expires_ms: int = 0  # by the writer's clock (0: not acquired yet)
    valid_since_ms: int = 0  # files born before this may have been collected
    lapsed: bool = False


@dataclass
class _Tag:
    """The tag a process writes under now."""

    name: str
    since_ms: int


@dataclass
class LeaseBook:
    """The leases of one process (use :func:`lease_book`; see the module docstring).

    Attributes:
        lease_ms: how long a lease holds without renewal.
        rotate_ms: the longest a tag is written under.
        clock: the wall clock in ms (tests give their own).
    """

    lease_ms: int = LEASE_MS
    rotate_ms: int = ROTATE_MS
    clock: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    writer: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    _leases: dict[tuple[str, str], _Lease] = field(default_factory=dict)
    _current: _Tag | None = None
    _gen: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    # stores dropped without close(), queued by their finalizers (see forget_later)
    _orphans: deque[tuple[FileIO, dict[str, tuple[str, int]], threading.Lock]] = field(
        default_factory=deque
    )

    # -- writers ---------------------------------------------------------------------------
    def tag(self) -> str:
        """The tag new files are written under (rotated after ``rotate_ms``)."""
        now = self.clock()
        with self._lock:
            cur = self._current
            if cur is None or now - cur.since_ms >= self.rotate_ms:
                self._gen += 1
                cur = self._current = _Tag(f"{self.writer}g{self._gen}", now)
            return cur.name

    def rotate(self) -> None:
        """Write new files under a new tag from now on (the current one is released by the
        keeper once nothing of it is pending)."""
        with self._lock:
            self._current = None
        self._wake.set()

    def pending(self, fileio: FileIO, tag: str) -> None:
        """A file of ``tag`` is about to be written under ``fileio``'s root: hold its lease
        (acquired or renewed now if it would not hold for ``lease_ms * 2 / 3`` more).

        Raises:
            StorageError: the lease could not be written (nothing was written).
        """
        self._release_orphans()
        key = (fileio.describe(""), tag)
        with self._lock:
            lease = self._leases.get(key)
            if lease is None:
                lease = self._leases[key] = _Lease(fileio, tag)
            lease.pending += 1
            due = lease.expires_ms - self.clock() < self.lease_ms * 2 // 3
        if due:
            try:
                self._renew(lease)
            except BaseException:
                self.done(fileio, tag)
                raise
        self._start()

    def done(self, fileio: FileIO, tag: str, n: int = 1) -> None:
        """``n`` pending files of ``tag`` were published, or will never be (forgotten)."""
        with self._lock:
            lease = self._leases.get((fileio.describe(""), tag))
            if lease is not None:
                lease.pending = max(0, lease.pending - n)
        if lease is not None and not lease.pending:
            self._wake.set()

    def forget_later(
        self, fileio: FileIO, files: dict[str, tuple[str, int]], lock: threading.Lock
    ) -> None:
        """A store's pending ``files`` (guarded by ``lock``) will never be published: its
        :class:`PendingFiles` was dropped without ``forget()``. Called by a finalizer, which
        the cyclic collector may run inside any locked region of any thread (this book's own
        included): so it takes no lock and sets no event, it only queues; the keeper (or the
        next writer) releases them, at most ``lease_ms / 4`` later."""
        self._orphans.append((fileio, files, lock))

    def _release_orphans(self) -> None:
        """Release what :meth:`forget_later` queued (called with no lock held)."""
        while self._orphans:
            try:
                fileio, files, lock = self._orphans.popleft()
            except IndexError:  # another thread drained it
                return
            _forget(self, fileio, files, lock)

    def covers(self, fileio: FileIO, tag: str, birth_ms: int) -> bool:
        """Whether a pending file of ``tag`` written at ``birth_ms`` may be published: its lease
        has held since (no collector can have deleted it)."""
        with self._lock:
            lease = self._leases.get((fileio.describe(""), tag))
            if lease is None:
                return False
            now = self.clock()
            if lease.lapsed or now >= lease.expires_ms:
                return False
            return birth_ms >= lease.valid_since_ms

    # -- the keeper ------------------------------------------------------------------------
    def _renew(self, lease: _Lease) -> None:
        """Write ``lease`` again (one PUT); a renewal after its expiry marks it lapsed."""
        start = self.clock()
        lease.fileio.publish_bytes(_path(lease.tag, self.lease_ms), b"")
        with self._lock:
            if lease.expires_ms and start >= lease.expires_ms:
                lease.lapsed = True  # its files may be gone: never published
                if self._current is not None and self._current.name == lease.tag:
                    self._current = None  # new files get a new tag
            if not lease.expires_ms:
                lease.valid_since_ms = start
            lease.expires_ms = start + self.lease_ms

    def keep(self) -> None:
        """One pass of the keeper: renew the leases with pending files that are due, release
        the ones without (not the current tag's). Errors are logged, never raised."""
        self._release_orphans()
        now = self.clock()
        with self._lock:
            current = self._current.name if self._current is not None else None
            leases = list(self._leases.items())
        for key, lease in leases:
            try:
                if lease.pending and lease.expires_ms - now < self.lease_ms * 2 // 3:
                    self._renew(lease)
                elif not lease.pending and (lease.tag != current or lease.lapsed):
                    with self._lock:
                        if lease.pending or self._leases.get(key) is not lease:
                            continue
                        del self._leases[key]
                    lease.fileio.delete_many([_path(lease.tag, self.lease_ms)])
            except FsStateError as exc:
                log.warning("fsstate: lease %s under %s: %s", lease.tag, key[0], exc)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._loop, name="fsstate-leases", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.lease_ms / 4000)
            self._wake.clear()
            self.keep()
            with self._lock:
                if not self._leases:
                    self._thread = None
                    return


def _path(tag: str, lease_ms: int) -> str:
    return f"{LEASE_DIR}/{tag}.{lease_ms}"


def read_leases(fileio: FileIO) -> dict[str, int]:
    """The leases under ``fileio``'s root: tag -> the time (ms, storage's clock) until which a
    collector keeps the tag's unreferenced files (the lease's modification time plus twice its
    duration: see the module docstring). One LIST.

    Raises:
        StorageError: the listing failed.
    """
    out: dict[str, int] = {}
    for entry in fileio.list(LEASE_DIR):
        name = entry.path.rsplit("/", 1)[-1]
        tag, _, lease_ms = name.rpartition(".")
        if not tag or not lease_ms.isdigit() or entry.mtime_ms is None:
            continue
        out[tag] = max(out.get(tag, 0), entry.mtime_ms + 2 * int(lease_ms))
    return out


def lease_in_force(leases: dict[str, int], tag: str, now_ms: int) -> bool:
    """Whether ``tag``'s files are still protected by a lease in ``leases``."""
    until = leases.get(tag)
    return until is not None and now_ms < until


_book = LeaseBook()


def lease_book() -> LeaseBook:
    """The process's lease book."""
    return _book


class PendingFiles:
    """The data files one store wrote that no manifest it published names yet, with their
    lease tags and when they were written (see the module docstring).

    Thread-safe: a store's commit and the background compactor both write files.
    """

    def __init__(self, fileio: FileIO, book: LeaseBook | None = None) -> None:
        self.fileio = fileio
        self.book = book or _book
        self._files: dict[str, tuple[str, int]] = {}  # path -> (tag, written at, ms)
        self._lock = threading.Lock()
        # a store dropped without close() forgets its files too (no lease held for ever)
        weakref.finalize(self, self.book.forget_later, fileio, self._files, self._lock)

    def new_path(self, prefix: str, lineage: str, birth: int) -> str:
        """A path for a new data file of the store (relative to the store directory), held
        under the writer's lease from now on.

        Raises:
            StorageError: the lease could not be written.
        """
        tag = self.book.tag()
        self.book.pending(self.fileio, tag)
        path = data_path(prefix, Origin(lineage, birth, tag))
        with self._lock:
            self._files[path] = (tag, self.book.clock())
        return path

    def published(self, paths: Iterable[str]) -> None:
        """A manifest naming ``paths`` was published: those of them pending are no more."""
        self._drop([p for p in paths if p in self._files])

    def discard(self, paths: Iterable[str]) -> None:
        """Of ``paths``, the pending ones will never be published (a commit that lost its
        version to another attempt, a merge thrown away)."""
        self._drop([p for p in paths if p in self._files])

    def forget(self) -> None:
        """The store is closed: nothing pending will be published by it."""
        with self._lock:
            paths = list(self._files)
        self._drop(paths)

    def uncovered(self, paths: Iterable[str]) -> list[str]:
        """Of ``paths``, the pending ones whose lease lapsed since they were written."""
        out = []
        with self._lock:
            held = [(p, self._files[p]) for p in paths if p in self._files]
        for path, (tag, born) in held:
            if not self.book.covers(self.fileio, tag, born):
                out.append(path)
        return out

    def __len__(self) -> int:
        return len(self._files)

    def _drop(self, paths: list[str]) -> None:
        _release(self.book, self.fileio, self._files, self._lock, paths)


def _release(
    book: LeaseBook,
    fileio: FileIO,
    files: dict[str, tuple[str, int]],
    lock: threading.Lock,
    paths: Iterable[str],
) -> None:
    """Forget ``paths`` of ``files`` (pending files of one store) and tell ``book``."""
    tags: dict[str, int] = {}
    with lock:
        for p in paths:
            got = files.pop(p, None)
            if got is not None:
                tags[got[0]] = tags.get(got[0], 0) + 1
    for tag, n in tags.items():
        book.done(fileio, tag, n)


def _forget(
    book: LeaseBook, fileio: FileIO, files: dict[str, tuple[str, int]], lock: threading.Lock
) -> None:
    with lock:
        paths = list(files)
    _release(book, fileio, files, lock, paths)
