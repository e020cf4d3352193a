"""Function size check: no function body over 60 lines or 60 statements (``make lint``).

Usage::

    python -m lint.funcsize [--max-lines N] [--max-statements N] [--allow PATH::NAME]... PATH...

Every ``.py`` file under each PATH (a directory or a file) is parsed; each function or method
(nested ones too, named by qualified name: ``PartitionStore.commit``) is measured:

* **lines**: from the first statement after its docstring to its last line, blank lines and
  comments included (what a reader has to hold in view);
* **statements**: every statement in its body, its nested functions' included, the docstring
  not counted.

Invariants:

* The measure depends only on the source text: the same file always gives the same figures,
  and a decorator, a signature or a docstring never counts against a function.
* Exit 0 when every function is within both limits; 1 when one is over (each named on stdout
  as ``path:line: name ...``, with its figures and the limits) or when an ``--allow`` entry is
  stale (its function is gone or within the limits again: the entry must go); 2 on bad usage
  or a file that does not parse.
* ``--allow`` is for functions another change in flight is splitting (a temporary, commented
  list in the Makefile), never a way to keep a long function.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_LINES = 60
MAX_STATEMENTS = 60

_Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class FunctionSize:
    """The size of one function.

    Attributes:
        path: the file, as given on the command line (``/``-separated).
        line: the line of its ``def``.
        name: its qualified name within the module (``Class.method``, ``outer.inner``).
        lines: lines of its body, the docstring excluded.
        statements: statements in its body (nested functions' included), the docstring excluded.
    """

    path: str
    line: int
    name: str
    lines: int
    statements: int

    @property
    def key(self) -> str:
        """How ``--allow`` names it: ``path::name``."""
        return f"{self.path}::{self.name}"


def _body_without_docstring(fn: _Function) -> list[ast.stmt]:
    body = fn.body
    first = body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return body[1:]
    return body


def measure(fn: _Function, path: str, qualname: str) -> FunctionSize:
    """The size of one function node (see the module docstring for the measure)."""
    body = _body_without_docstring(fn)
    if not body:
        return FunctionSize(path, fn.lineno, qualname, 0, 0)
    end = fn.end_lineno if fn.end_lineno is not None else body[-1].lineno
    statements = sum(1 for stmt in body for node in ast.walk(stmt) if isinstance(node, ast.stmt))
    return FunctionSize(path, fn.lineno, qualname, end - body[0].lineno + 1, statements)


def _functions(node: ast.AST, prefix: str) -> Iterator[tuple[_Function, str]]:
    """Every function under ``node`` with its qualified name, outer ones first."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            yield child, name
            yield from _functions(child, f"{name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def sizes_of_source(source: str, path: str) -> list[FunctionSize]:
    """The size of every function in a module's source text."""
    tree = ast.parse(source, filename=path)
    return [measure(fn, path, name) for fn, name in _functions(tree, "")]


def python_files(paths: Sequence[str]) -> list[Path]:
    """The ``.py`` files under ``paths`` (directories searched recursively), sorted."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(path.rglob("*.py")))
        elif path.suffix == ".py" and path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{raw}: not a directory or a .py file")
    return files


def over_limit(
    sizes: Sequence[FunctionSize], max_lines: int = MAX_LINES, max_statements: int = MAX_STATEMENTS
) -> list[FunctionSize]:
    """The functions over either limit."""
    return [s for s in sizes if s.lines > max_lines or s.statements > max_statements]


def check(
    paths: Sequence[str],
    allow: Sequence[str] = (),
    max_lines: int = MAX_LINES,
    max_statements: int = MAX_STATEMENTS,
) -> list[str]:
    """The problems found under ``paths``: one line per function over a limit (unless allowed)
    and per stale ``allow`` entry; empty when everything is within the limits.

    Raises:
        FileNotFoundError: a path is neither a directory nor a ``.py`` file.
        SyntaxError: a file does not parse.
    """
    sizes: list[FunctionSize] = []
    for file in python_files(paths):
        sizes.extend(sizes_of_source(file.read_text(encoding="utf-8"), file.as_posix()))
    long = over_limit(sizes, max_lines, max_statements)
    limits = f"at most {max_lines} lines and {max_statements} statements, docstring excluded"
    problems = [
        f"{s.path}:{s.line}: {s.name} has {s.lines} lines, {s.statements} statements "
        f"({limits}): split it into well-named helpers"
        for s in long
        if s.key not in allow
    ]
    still_long = {s.key for s in long}
    problems += [
        f"{entry}: allowed to be over the size limit but is not (any more): drop the --allow entry"
        for entry in allow
        if entry not in still_long
    ]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; returns the exit code (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m lint.funcsize", description=__doc__)
    parser.add_argument("paths", nargs="+", help="packages, directories or .py files")
    parser.add_argument("--max-lines", type=int, default=MAX_LINES)
    parser.add_argument("--max-statements", type=int, default=MAX_STATEMENTS)
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="PATH::NAME",
        help="a function another change is splitting (temporary; repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        problems = check(args.paths, args.allow, args.max_lines, args.max_statements)
    except (OSError, SyntaxError) as exc:
        print(f"funcsize: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    if problems:
        print(f"funcsize: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
