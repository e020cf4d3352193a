"""The local-disk backend: atomic publishing by rename (and link for put-if-absent), durable by
fsync.

Invariants:

* A published file is complete or absent: it is written to a unique temporary name in the same
  directory, flushed, and then renamed over the final name (``put``) or hard-linked to it
  (``put_if_absent``: ``link(2)`` fails if the name exists, atomically with respect to every
  other process on the machine) and the temporary name removed.
* Durable once published (``fsync=True``): the file's data is flushed before it gets its final
  name and its directory right after, so a file a later manifest names survives a power loss
  with it, and a manifest is never durable before its files. New directories' entries are
  flushed once, up to the root.
* Temporary files of a failed write are removed; a crash leaves at most ``.tmp-*`` files, which
  no listing of state files returns and the orphan scan deletes.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow.fs as pafs

from fsstate.storage.backend import Backend, FileEntry, MissingObject, RequestStats, SizeMismatch

TMP_PREFIX = ".tmp-"

# directories can be opened (and fsynced) on POSIX only; elsewhere a rename is left to the OS
_DIR_FLAGS: int | None = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if os.name == "posix" else None


def _fsync(path: str, flags: int) -> None:
    """Flush a local file's (or directory's) data and metadata to disk."""
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalBackend(Backend):
    """Files under a local directory.

    Args:
        root: absolute path of the directory.
        fsync: flush published files and their directory entries to disk.
    """

    def __init__(self, root: str, fsync: bool = True) -> None:
        self.root = root.rstrip("/") or "/"
        self.fsync = fsync
        self.fs = pafs.LocalFileSystem()
        self.stats = RequestStats()
        self._made_dirs: set[str] = set()

    def full(self, key: str) -> str:
        """The filesystem path of a key."""
        return f"{self.root}/{key}" if key else self.root

    def describe(self, key: str) -> str:
        """The absolute path."""
        return self.full(key)

    # -- reads -------------------------------------------------------------------------------
    def read(self, key: str) -> bytes:
        """The whole file."""
        try:
            with open(self.full(key), "rb") as f:
                data = f.read()
        except FileNotFoundError as exc:
            raise MissingObject(key) from exc
        self.stats.add("get", read=len(data))
        return data

    def input_file(self, key: str, size: int | None, verify: bool = True) -> Any:
        """An Arrow file of the path (size checked first when given and ``verify``)."""
        path = self.full(key)
        expected_size = size
        if expected_size is not None and verify:
            try:
                actual = os.stat(path).st_size
            except FileNotFoundError as exc:
                raise MissingObject(key) from exc
            if actual != expected_size:
                raise SizeMismatch(actual)
        try:
            f = self.fs.open_input_file(path)
        except FileNotFoundError as exc:
            raise MissingObject(key) from exc
        self.stats.add("get")
        return f

    def head(self, key: str) -> FileEntry | None:
        """Size and mtime, or None."""
        self.stats.add("head")
        try:
            st = os.stat(self.full(key))
        except FileNotFoundError:
            return None
        return FileEntry(key, st.st_size, st.st_mtime_ns // 1_000_000)

    def list(self, prefix: str, recursive: bool) -> list[FileEntry]:
        """Files under a directory (temporary files left out)."""
        selector = pafs.FileSelector(self.full(prefix), allow_not_found=True, recursive=recursive)
        self.stats.add("list")
        try:
            infos = self.fs.get_file_info(selector)
        except FileNotFoundError:
            return []
        base = self.root + "/"
        out = []
        for info in infos:
            if info.type != pafs.FileType.File or info.base_name.startswith(TMP_PREFIX):
                continue
            rel = info.path[len(base) :] if info.path.startswith(base) else info.path
            mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else None
            out.append(FileEntry(rel, int(info.size or 0), mtime))
        return out

    # -- writes ------------------------------------------------------------------------------
    def makedirs(self, prefix: str) -> None:
        """Create a directory and its parents."""
        self.fs.create_dir(self.full(prefix), recursive=True)

    def put(self, key: str, data: bytes) -> None:
        """Write a temporary file, flush it, rename it over ``key``."""
        target = self.full(key)
        tmp = self._write_temp(target, data)
        try:
            self._publish(tmp, target)
        except BaseException:
            self._discard(tmp)
            raise

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write a temporary file, flush it, hard-link it to ``key`` if no file is there."""
        target = self.full(key)
        tmp = self._write_temp(target, data)
        try:
            try:
                os.link(tmp, target)
            except FileExistsError:
                with open(target, "rb") as f:
                    return f.read() == data  # a retry of a write that landed is no conflict
            self._flush_dir(target)
            return True
        finally:
            self._discard(tmp)

    @contextlib.contextmanager
    def open_output(self, key: str) -> Iterator[Any]:
        """An Arrow output stream to a temporary file, renamed over ``key`` at the end."""
        target = self.full(key)
        tmp = self._temp_name(target)
        published = False
        try:
            self._ensure_parent(target)
            with self.fs.open_output_stream(tmp) as out:
                yield out
            self._publish(tmp, target)
            self.stats.add("put")
            published = True
        finally:
            if not published:
                self._discard(tmp)

    def delete(self, keys: Sequence[str]) -> None:
        """Delete files (missing ones are ignored)."""
        for key in keys:
            self.stats.add("delete")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.full(key))

    # -- internals ---------------------------------------------------------------------------
    def _write_temp(self, target: str, data: bytes) -> str:
        tmp = self._temp_name(target)
        try:
            self._ensure_parent(target)
            with open(tmp, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except BaseException:
            self._discard(tmp)
            raise
        self.stats.add("put", written=len(data))
        return tmp

    def _ensure_parent(self, target: str) -> None:
        parent = target.rpartition("/")[0]
        if parent not in self._made_dirs:
            self.fs.create_dir(parent, recursive=True)
            if self.fsync and _DIR_FLAGS is not None:
                # the entries of directories just made: each ancestor up to the root, once
                d = parent
                while d.startswith(self.root) and d != self.root:
                    d = d.rpartition("/")[0] or "/"
                    _fsync(d, _DIR_FLAGS)
            self._made_dirs.add(parent)

    def _publish(self, tmp: str, target: str) -> None:
        """Rename a complete temporary file to its final name, durably if ``fsync``."""
        if self.fsync:
            _fsync(tmp, os.O_RDONLY)
        os.replace(tmp, target)
        self._flush_dir(target)

    def _flush_dir(self, target: str) -> None:
        if self.fsync and _DIR_FLAGS is not None:
            _fsync(target.rpartition("/")[0] or "/", _DIR_FLAGS)

    @staticmethod
    def _temp_name(target: str) -> str:
        head, _, tail = target.rpartition("/")
        return f"{head}/{TMP_PREFIX}{uuid.uuid4().hex}-{tail}"

    @staticmethod
    def _discard(tmp: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
