"""A FileIO backend that fails one chosen write, for killing an operation at a seeded point.

    faulty = FaultyBackend(fileio.backend, fail_at=7)
    fileio.backend = faulty    # the 7th write (put, conditional put, output stream, delete)
    ...                        # raises OSError (FileIO turns it into a StorageError)
    fileio.backend = faulty.inner

Invariants: reads pass through untouched; only the ``fail_at``-th write fails, the ones before
and after it go through (``fail_at=-1`` counts writes and fails none); ``writes`` counts the
writes tried, the failed one included.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FaultyBackend"]


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
