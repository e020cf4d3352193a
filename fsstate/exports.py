"""Names a package exports but imports on first use (PEP 562), so importing it stays cheap.

A Spark Python worker imports fsstate afresh whenever Spark replaces it (a worker factory idle
for a minute has its workers stopped; every job's first task), and what it imports is paid by
that task. A package whose ``__init__`` re-exports everything it holds makes every importer pay
for all of it: ``fsstate_spark.tiered``'s keyed loop needs the store and the tables, not the
whole-batch operators, the inspection API, the flow driver or the listener (measured: 0.37 s
of a fresh worker's import of fsstate's loop, ~40 % of it those).

Invariants:

* A lazy name resolves to the same object as an eager import of it would (``from pkg import
  name``, ``pkg.name``, ``from pkg import *`` with the name in ``__all__``), and is cached in
  the package's namespace on first use.
* An unknown name raises :class:`AttributeError`, as for any module.
* A lazy name never shadows a subpackage of the same name (the caller's table lists names,
  not modules): the import system sets a subpackage's attribute when it is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package`` that imports each of ``names`` from its module on
    first use.

    Args:
        package: the package's ``__name__``.
        names: exported name -> the module (full dotted name) it is defined in.
    """

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(where), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
