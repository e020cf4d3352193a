"""A FileIO backend that fails one chosen write, for killing an operation at a seeded point.

    faulty = FaultyBackend(fileio.backend, fail_at=7)
    fileio.backend = faulty    # the 7th write (put, conditional put, output stream, delete)
    ...                        # raises OSError (FileIO turns it into a StorageError)
    fileio.backend = faulty.inner

Invariants: reads pass through untouched; only the ``fail_at``-th write fails, the ones before
and after it go through (``fail_at=-1`` counts writes and fails none); ``writes`` counts the
writes tried, the failed one included.

:func:`failing_fileio` puts one in every FileIO a module gets from its ``fileio_for`` (the
process's FileIO per state root) for a block, writes counted across them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["FaultyBackend", "failing_fileio"]


class FaultyBackend:
    """Wraps a :class:`fsstate.storage.backend.Backend` (see the module docstring)."""

    WRITES = ("put", "put_if_absent", "open_output", "delete")

    def __init__(self, inner: Any, fail_at: int) -> None:
        self.inner, self.fail_at, self.writes = inner, fail_at, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in self.WRITES:
            return attr

        def write(*args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            if self.writes == self.fail_at:
                raise OSError(f"injected fault at write {self.writes}")
            return attr(*args, **kwargs)

        return write


@contextmanager
def failing_fileio(module: Any, fail_at: int | None) -> Iterator[FaultyBackend | None]:
    """``module.fileio_for`` hands out FileIOs whose writes share one :class:`FaultyBackend`
    failing its ``fail_at``-th write (None: nothing patched, yields None)."""
    if fail_at is None:
        yield None
        return
    real = module.fileio_for
    faulty = FaultyBackend(None, fail_at)

    def patched(*args: Any, **kwargs: Any) -> Any:
        io = real(*args, **kwargs)
        faulty.inner = io.backend
        wrapped = copy.copy(io)
        wrapped.backend = faulty
        return wrapped

    module.fileio_for = patched
    try:
        yield faulty
    finally:
        module.fileio_for = real
