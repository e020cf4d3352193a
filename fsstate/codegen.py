"""Generated code that stays reviewable: compiled under a descriptive file name, lines kept.

A few hot paths are generated per schema (the exact-type checkers of
:func:`fsstate.format.schema.make_checker`, the key-cursor accessors of
:mod:`fsstate.tables.cursor`): one Python frame and no per-field loop on a hit is measurably
faster (5.6 -> 4.1 µs per Spark state call). Generated code must still read like code, so it
is compiled here and nowhere else.

Invariants:

* Every generated source is compiled by :func:`compile_source` under the file name
  ``fsstate-generated/<what>-<n>.py`` (``n`` numbers distinct sources in this process), and
  its lines are registered in :mod:`linecache`: tracebacks, debuggers and
  ``inspect.getsource`` show the generated lines.
* The compiled module's globals carry a ``__loader__`` that returns the source, so a traceback
  still shows the lines after :func:`linecache.clearcache`.
* The same source compiled twice gets the same file name.
"""

from __future__ import annotations

import itertools
import linecache
import threading
from typing import Any

GENERATED_DIR = "fsstate-generated"

_counter = itertools.count(1)
_names: dict[str, str] = {}
_lock = threading.Lock()


class _SourceLoader:
    """The ``__loader__`` of a generated module: hands its source to linecache."""

    def __init__(self, source: str) -> None:
        self._source = source

    def get_source(self, name: str) -> str:
        """The generated source (whatever module name is asked)."""
        return self._source


def generated_filename(source: str, what: str) -> str:
    """The file name ``source`` is compiled under (registered in linecache on first use)."""
    with _lock:
        filename = _names.get(source)
        if filename is None:
            filename = f"{GENERATED_DIR}/{what}-{next(_counter)}.py"
            _names[source] = filename
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return filename


def compile_source(source: str, what: str, env: dict[str, Any]) -> dict[str, Any]:
    """Compile and run ``source`` in ``env`` (its globals); returns ``env``.

    Args:
        source: Python source defining functions.
        what: a short description for the file name (``"value-accessors"``).
        env: the globals the source runs in (names it needs, besides builtins).
    """
    filename = generated_filename(source, what)
    env.setdefault("__name__", f"fsstate_generated.{what.replace('-', '_')}")
    env["__loader__"] = _SourceLoader(source)
    exec(compile(source, filename, "exec"), env)
    return env
