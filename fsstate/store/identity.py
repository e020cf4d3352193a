"""Identity of a partition store: where it lives and who wrote a version.

Invariants:

* ``store_dir_for(operator, partition, layout)`` is a pure function of its arguments and never
  changes across releases: ``<operator>/<partition>`` for layout generation 0 (``layout=""``,
  every store written before rescaling existed) and ``<operator>/<layout>/<partition>`` for a
  later generation, with the operator made path-safe (:func:`operator_dir`); a name that had
  to be changed gets ``-`` and the first 8 hex digits of its SHA-1 so that two names never
  share a directory. A generation's directory name starts with ``@`` (:data:`LAYOUT_PREFIX`),
  a character no path-safe operator name holds, so readers (:mod:`fsstate.inspect.catalog`)
  tell ``<operator>/<layout>/<partition>`` from ``<prefix>/<operator>/<partition>``. *Which*
  generation holds a version is not a function of the store's name: it is recorded with the
  state (:mod:`fsstate.store.layout`) and resolved by whoever opens a store.
* The store's meta is JSON: what is kept is what the manifest will hold (:func:`json_copy`).
* ``meta[WRITER_META]`` records the committing instance of a run
  (:class:`fsstate.store.record.Writer`): two instances of one run committing the same store are
  two operators sharing it, an error the epoch raises (:mod:`fsstate.store.epoch`); an attempt
  of another run (a re-run after a restart) is not foreign.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from fsstate.errors import ConfigError

__all__ = [
    "LAYOUT_PREFIX",
    "WRITER_META",
    "json_copy",
    "operator_dir",
    "safe_name",
    "store_dir_for",
]

_SAFE = re.compile(r"[^A-Za-z0-9._=-]")
LAYOUT_PREFIX = "@"  # a layout generation's directory starts with it (never in a safe name)
WRITER_META = "writer"  # meta key: who committed a version, {"run": ..., "instance": ...}


def safe_name(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9._=-]`` replaced by ``_``."""
    return _SAFE.sub("_", name)


def json_copy(meta: dict[str, Any], where: str) -> dict[str, Any]:
    """A deep copy of the store's meta through JSON (what the manifest will hold).

    Raises:
        ConfigError: a value is not JSON.
    """
    try:
        return dict(json.loads(json.dumps(meta)))
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"store {where}: meta must hold JSON values (str, int, float, bool, None, lists "
            f"and dicts of them): {exc}"
        ) from None


def operator_dir(operator: str) -> str:
    """Relative directory of an operator's state (the name made path-safe, see the module)."""
    safe = safe_name(operator) or "_"
    if safe != operator:
        safe += "-" + hashlib.sha1(operator.encode()).hexdigest()[:8]
    return safe


def store_dir_for(operator: str, partition: int, layout: str = "") -> str:
    """Relative directory of a partition store of layout generation directory ``layout``
    (``""``: generation 0, the directory of every store written before any rescale)."""
    if layout:
        if not layout.startswith(LAYOUT_PREFIX) or "/" in layout:
            raise ConfigError(
                f"operator {operator!r}: {layout!r} is no layout generation directory (it "
                f"starts with {LAYOUT_PREFIX!r} and holds no '/'); resolve it with "
                "fsstate.store.layout"
            )
        return f"{operator_dir(operator)}/{layout}/{int(partition)}"
    return f"{operator_dir(operator)}/{int(partition)}"
