"""The errors page (docs/errors.md) lists each error where it is imported from, with its bases.

Invariants checked: every error in the page's tables is importable from the module its section
names (``fsstate_spark`` for Spark's state handles, ``fsstate.errors`` for the rest) and is an
``FsStateError``; each class the "also a" column names is one of its bases; every error class
of ``fsstate.errors`` and of ``fsstate_spark`` is on the page.
"""

from __future__ import annotations

import builtins
import inspect
import re
from types import ModuleType

import pyspark.errors

import fsstate.errors
import fsstate_spark
from devkit.repo import ROOT
from fsstate.errors import FsStateError

PAGE = ROOT / "docs" / "errors.md"
SPARK_SECTION = "Spark's state handles"
_ROW = re.compile(r"^\| `(?P<name>\w+)` \| (?P<bases>[^|]*) \|")


def _rows() -> list[tuple[str, str, str]]:
    """(section, error, "also a" cell) of each table row of the page."""
    section, out = "", []
    for line in PAGE.read_text("utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif m := _ROW.match(line):
            out.append((section, m.group("name"), m.group("bases")))
    return out


def _home(section: str) -> ModuleType:
    return fsstate_spark if section == SPARK_SECTION else fsstate.errors


def test_every_error_on_the_page_is_where_its_section_says() -> None:
    rows = _rows()
    assert any(s == SPARK_SECTION for s, _, _ in rows), "the page lost its Spark section"
    problems = []
    for section, name, bases in rows:
        home = _home(section)
        error = getattr(home, name, None)
        if not (inspect.isclass(error) and issubclass(error, FsStateError)):
            problems.append(f"{name} ({section}): no FsStateError {home.__name__}.{name}")
            continue
        for base in re.findall(r"`(\w+)`", bases):
            cls = next(
                (
                    getattr(m, base)
                    for m in (home, fsstate.errors, builtins, pyspark.errors)
                    if hasattr(m, base)
                ),
                None,
            )
            if not (inspect.isclass(cls) and issubclass(error, cls)):
                problems.append(f"{name}: the page says it is also a {base}; it is not")
    assert not problems, "\n".join(problems)


def test_every_error_class_is_on_the_page() -> None:
    listed = {name for _, name, _ in _rows()}
    defined = {
        name
        for module in (fsstate.errors, fsstate_spark)
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and issubclass(obj, FsStateError) and obj is not FsStateError
    }
    assert defined <= listed, f"errors missing from docs/errors.md: {sorted(defined - listed)}"
