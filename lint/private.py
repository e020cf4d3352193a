"""Private attribute check: PySpark's (and py4j's) privates only in ``fsstate_spark/pyspark/``.

Usage::

    python -m lint.private PATH...

Every ``.py`` file under each PATH (a directory or a file) is parsed, except those under
``fsstate_spark/pyspark/`` (the one package that adapts to PySpark's internals, a module per
minor where they differ). Reported:

* every attribute access ``x._name`` (one leading underscore, not a dunder), also as
  ``getattr`` / ``hasattr`` / ``setattr`` / ``delattr(x, "_name")``, unless it is the
  package's own: on ``self`` or ``cls``, or ``_name`` is defined in a module of the same
  package (directory): a function or class of that name, a module or class body assignment of
  it, or an assignment to ``self._name`` / ``cls._name``. On ``super()`` the name must be
  defined twice in the package (the base's and the override): overriding someone else's
  private method is reported;
* ``__fields__`` (``Row``'s private-by-convention field list), as an attribute or a string;
* ``from module import _name`` of a module outside fsstate, fsstate_spark, pyspark_fsstate;
* an import of PySpark's internal modules (:data:`INTERNAL_MODULES`: the Python worker, its
  serializers, the Arrow/pandas conversion, the state-server client), except in
  ``pyspark_fsstate/`` too: Spark's worker entry module, which must not import fsstate before
  a task's files are on the path (import-linter cannot name an external package's
  submodules, so this check holds that rule).

The public names of ``collections.namedtuple`` (``_replace``, ``_asdict``, ``_fields``,
``_make``, ``_field_defaults``) are not private.

Invariants:

* The verdict depends only on each file's source text, never on what is installed.
* Exit 0 when nothing is reported; 1 when an access is (each on stdout as
  ``path:line: x._name``); 2 on bad usage or a file that does not parse.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

ADAPTER_PACKAGE = "fsstate_spark/pyspark/"
"""Where PySpark's privates may be touched (``/``-separated, matched within a path)."""

NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
PRIVATE_BY_CONVENTION = frozenset({"__fields__"})
OWNERS = frozenset({"self", "cls"})
REFLECTION = frozenset({"getattr", "hasattr", "setattr", "delattr"})
PROJECT = ("fsstate", "fsstate_spark", "pyspark_fsstate")
WORKER_ENTRY = "pyspark_fsstate/"
"""Where PySpark's internal modules may be imported besides :data:`ADAPTER_PACKAGE`."""
INTERNAL_MODULES = (
    "pyspark.worker",
    "pyspark.worker_util",
    "pyspark.serializers",
    "pyspark.sql.pandas",
    "pyspark.sql.conversion",
    "pyspark.sql.streaming.stateful_processor_api_client",
)
"""PySpark's modules that only :data:`ADAPTER_PACKAGE` imports (a module and its submodules)."""


def is_internal(module: str) -> bool:
    """Whether a module is one of (or under one of) :data:`INTERNAL_MODULES`."""
    return any(module == m or module.startswith(m + ".") for m in INTERNAL_MODULES)


def internal_import(node: ast.AST) -> str | None:
    """How an import of PySpark's internal modules reads (None: the node is no such import)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if is_internal(a.name)]
        return f"import {', '.join(names)}" if names else None
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        if is_internal(node.module):
            return f"from {node.module} import ..."
        names = [a.name for a in node.names if is_internal(f"{node.module}.{a.name}")]
        return f"from {node.module} import {', '.join(names)}" if names else None
    return None


def is_private(attr: str) -> bool:
    """Whether an attribute name is another object's private one (see the module docstring)."""
    if attr in PRIVATE_BY_CONVENTION:
        return True
    return attr.startswith("_") and not attr.startswith("__") and attr not in NAMEDTUPLE_API


def _is_owner(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in OWNERS


def _assigned(target: ast.expr) -> Iterator[str]:
    """The names an assignment target binds: plain names, ``self.x`` / ``cls.x``."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute) and _is_owner(target.value):
        yield target.attr
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _assigned(element)


def definitions(tree: ast.Module) -> list[str]:
    """The names a module defines (a name once per definition): its functions and classes (at
    any depth), the names its module and class bodies assign, and what it assigns to ``self`` /
    ``cls`` attributes."""
    names: list[str] = []
    bodies: list[list[ast.stmt]] = [tree.body]
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        if isinstance(node, ast.ClassDef):
            bodies.append(node.body)
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute):
                    names.extend(_assigned(target))
    for body in bodies:
        for stmt in body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    names.extend(_assigned(target))
            elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
                names.extend(_assigned(stmt.target))
    return names


def _is_super(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def _access(node: ast.AST) -> tuple[ast.expr, str, str] | None:
    """(object, name, how it reads) of a private access node, None for any other node."""
    if isinstance(node, ast.Attribute) and is_private(node.attr):
        base = ast.unparse(node.value)
        return node.value, node.attr, f"{base if len(base) <= 40 else '...'}.{node.attr}"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in REFLECTION
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and is_private(node.args[1].value)
    ):
        base = ast.unparse(node.args[0])
        name = node.args[1].value
        return node.args[0], name, f"{node.func.id}({base}, {name!r})"
    return None


def _foreign_import(node: ast.AST) -> str | None:
    if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
        return None
    if node.module.split(".")[0] in PROJECT:
        return None
    private = [a.name for a in node.names if is_private(a.name)]
    return f"from {node.module} import {', '.join(private)}" if private else None


def _reported(node: ast.AST, defined: dict[str, int]) -> str | None:
    """How a node reads if it is reported (see the module docstring), else None."""
    if isinstance(node, ast.Constant) and node.value in PRIVATE_BY_CONVENTION:
        return repr(node.value)
    imported = _foreign_import(node)
    if imported is not None:
        return imported
    access = _access(node)
    if access is None:
        return None
    base, name, text = access
    if name in PRIVATE_BY_CONVENTION:
        return text
    if _is_super(base):
        return None if defined.get(name, 0) >= 2 else text
    return None if _is_owner(base) or name in defined else text


def accesses_of_source(source: str, path: str, package: dict[str, int] | None = None) -> list[str]:
    """Every reported access of one module's source, as ``path:line: x._name``; ``package``
    counts the definitions of each name in the package's modules (default: this one's)."""
    tree = ast.parse(source, filename=path)
    defined = package if package is not None else _count(definitions(tree))
    worker_entry = WORKER_ENTRY in path
    found = []
    for node in ast.walk(tree):
        text = _reported(node, defined)
        if text is None and not worker_entry:
            text = internal_import(node)
        if text is not None:
            line = getattr(node, "lineno", 0)
            found.append((line, f"{path}:{line}: {text}"))
    return [text for _, text in sorted(found)]


def _count(names: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return counts


def _files(paths: Sequence[str]) -> Iterator[Path]:
    for given in paths:
        root = Path(given)
        candidates = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in candidates:
            if ADAPTER_PACKAGE not in path.as_posix() + ("/" if path.is_dir() else ""):
                yield path


def check(paths: Sequence[str]) -> list[str]:
    """Every reported access under ``paths`` (see the module docstring)."""
    files = list(_files(paths))
    trees = {
        path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for path in files
    }
    packages: dict[Path, list[str]] = {}
    for directory in {path.parent for path in files}:
        names: list[str] = []
        for sibling in sorted(directory.glob("*.py")):
            tree = trees.get(sibling) or ast.parse(sibling.read_text(encoding="utf-8"))
            names += definitions(tree)
        packages[directory] = names
    problems = []
    for path in files:
        problems += accesses_of_source(
            path.read_text(encoding="utf-8"), path.as_posix(), _count(packages[path.parent])
        )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m lint.private", description=__doc__)
    parser.add_argument("paths", nargs="+", metavar="PATH")
    args = parser.parse_args(argv)
    try:
        problems = check(args.paths)
    except SyntaxError as exc:
        print(f"{exc.filename}:{exc.lineno}: does not parse: {exc.msg}")
        return 2
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"{len(problems)} private access(es) or internal import(s) outside {ADAPTER_PACKAGE}: "
            "move them behind a function of fsstate_spark.pyspark"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
