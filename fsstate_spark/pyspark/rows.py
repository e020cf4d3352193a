"""Rows as Spark's Python worker hands them to a Row processor, with fast field reads.

Spark's worker makes each input row as ``Row(*names)(*values)``: a ``pyspark.sql.Row`` (a
tuple) whose ``__fields__`` is the Row of the column names; reading a field as an attribute
(``row.v``) goes through ``Row.__getattr__``, a ``__fields__.index`` search and
``Row.__getitem__`` per read, about a third of a simple processor's own time per row.
:func:`row_class` gives, per tuple of column names, a subclass of ``Row`` whose
``__fields__`` is that Row of names (on the class, so no row carries its own) and whose field
names are attributes of the class: ``row.v`` is one C-level read of the tuple's item, the
descriptor ``collections.namedtuple`` uses for its fields (``collections._tuplegetter``; where an
interpreter lacks it, a ``property`` of ``operator.itemgetter``, which goes through
``Row.__getitem__``: right, ten times slower).

Invariants:

* Everything else is ``Row``'s own: ``isinstance(row, Row)``, equality and hashing (the tuple),
  ``row["v"]``, ``row[0]``, ``asDict()``, ``repr``, ``in``, pickling (``Row.__reduce__``
  makes a plain Row of the same fields and values). Only ``type(row)`` differs: the
  subclass (named ``Row`` too), not ``pyspark.sql.Row`` itself.
* An attribute read gives what ``Row.__getattr__`` gives: only names ``Row`` does not have
  already (``count`` and ``index`` stay the tuple's methods, as with a plain Row) and that
  do not start with ``__`` become descriptors, each the value of the *first* column of that
  name (``__fields__.index``); any other name still goes through ``Row.__getattr__``.
* Bounded: at most :data:`CLASSES_MAX` classes are kept per process (oldest dropped).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from pyspark.sql.types import Row


def _property_getter(index: int, doc: str) -> Any:
    return property(itemgetter(index), doc=doc)


try:  # namedtuple's C descriptor: the tuple's item itself, whatever __getitem__ the class has
    from collections import _tuplegetter  # type: ignore[attr-defined]

    _field: Callable[[int, str], Any] = _tuplegetter
except ImportError:  # pragma: no cover - CPython has it (3.8+)
    _field = _property_getter

CLASSES_MAX = 64  # row classes kept per process (one per distinct tuple of column names)

_classes: dict[tuple[str, ...], type] = {}


def row_class(names: tuple[str, ...]) -> type:
    """The ``Row`` subclass of rows with columns ``names`` (see the module docstring); its
    instances are made with ``tuple.__new__(cls, values)``."""
    cls = _classes.get(names)
    if cls is None:
        attrs: dict[str, Any] = {"__slots__": (), "__fields__": Row(*names)}
        for i, name in enumerate(names):
            if name in attrs or name.startswith("__") or hasattr(Row, name):
                continue  # a repeated name reads its first column; Row's own names stay
            attrs[name] = _field(i, f"column {i} ({name!r})")
        cls = type("Row", (Row,), attrs)
        cls.__module__ = Row.__module__
        cls.__qualname__ = "Row"
        if len(_classes) >= CLASSES_MAX:
            del _classes[next(iter(_classes))]
        _classes[names] = cls
    return cls


def row_fields(row: Any) -> Any:
    """The field names a ``Row`` instance carries itself (``Row(*names)(*values)``: the Row of
    names; None for a Row made with keywords or a :func:`row_class` instance)."""
    return row.__dict__.get("__fields__")
