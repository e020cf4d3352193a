"""Generated code is reviewable: every cursor template renders to lint-clean Python for the test
schemas, and tracebacks, ``inspect.getsource`` and debuggers see the generated lines."""

from __future__ import annotations

import inspect
import linecache
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import Any

import pyarrow as pa
import pytest

from fsstate import PartitionStore
from fsstate.codegen import GENERATED_DIR
from fsstate.format.schema import make_checker
from fsstate.tables.core import TableCore
from fsstate.tables.cursor import render
from fsstate.tables.cursor_templates import LIST_ACCESSORS, MAP_ACCESSORS, VALUE_ACCESSORS
from tests.support.engine import KEY, UKEY, VAL

# value schemas with and without an exact-type test (a timestamp field has none)
SCHEMAS = {
    "int-string": VAL,
    "one-int32": pa.schema([pa.field("n", pa.int32())]),
    "float-bool-bytes": pa.schema(
        [pa.field("f", pa.float64()), pa.field("b", pa.bool_()), pa.field("x", pa.binary())]
    ),
    "timestamp": pa.schema([pa.field("t", pa.timestamp("us"))]),
}
UKEYS = {"string": UKEY, "int-date": pa.schema([("i", pa.int64()), ("d", pa.date32())])}


class _Cursor:
    key: Any = None


def _tables(tmp_path: Path) -> list[tuple[Template, TableCore]]:
    store = PartitionStore.open(str(tmp_path / "state"), "gen", 0)
    out: list[tuple[Template, TableCore]] = []
    for name, schema in SCHEMAS.items():
        out.append((VALUE_ACCESSORS, store.value_table(f"v-{name}", schema, KEY)))
        out.append((LIST_ACCESSORS, store.list_table(f"l-{name}", schema, KEY)))
        for uname, ukey in UKEYS.items():
            out.append((MAP_ACCESSORS, store.map_table(f"m-{name}-{uname}", ukey, schema, KEY)))
    return out


def test_every_rendered_template_is_lint_clean(tmp_path: Path) -> None:
    """ruff (pyflakes, pycodestyle, bugbear) finds nothing in any rendering: no undefined name,
    no unused variable, no syntax slip a ``{{}}``-style escape used to hide."""
    sources = set()
    for template, table in _tables(tmp_path):
        for method in (False, True):
            source, _types = render(template, table, method)
            assert "$" not in source and "{{" not in source
            compile(source, "<check>", "exec")
            sources.add(source)
    assert len(sources) >= 20  # every schema test and both method forms were rendered
    for i, source in enumerate(sorted(sources)):
        path = tmp_path / f"rendered_{i}.py"
        path.write_text(source)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--select",
            "E,F,W,B",
            "--ignore",
            "E501",  # the exact-type test of a wide schema is one long condition
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _raise(*args: Any) -> Any:
    raise RuntimeError("slow path reached")


@pytest.mark.parametrize("clear_cache", [False, True])
def test_a_traceback_names_the_generated_line(tmp_path: Path, clear_cache: bool) -> None:
    """An exception raised through a generated accessor shows the generated file name and the
    source line it passed, also after ``linecache.clearcache()`` (the module's loader)."""
    store = PartitionStore.open(str(tmp_path / "state"), "gen", 0)
    table = store.value_table("v", VAL, KEY)
    cursor = _Cursor()
    cursor.key = ("nobody",)
    get, _update = table.cursor_ops(cursor, _raise, _raise)
    if clear_cache:
        linecache.clearcache()
    with pytest.raises(RuntimeError) as info:
        get()  # not in memory: the accessor calls the slow path, which raises
    text = "".join(traceback.format_exception(info.value))
    assert f'File "{GENERATED_DIR}/value-accessors-' in text, text
    assert "return get_slow()" in text, text
    source = inspect.getsource(get)
    assert source.startswith("    def get():") and "views.get(cursor.key)" in source


def test_generated_checkers_are_inspectable() -> None:
    """The exact-type checkers of format.schema are generated the same way."""
    check: Callable[[Any], tuple[Any, ...]] = make_checker("s", "value", VAL)
    assert check((1, "a")) == (1, "a")
    source = inspect.getsource(check)
    assert source.startswith("def check(v):") and "return slow(v)" in source
    assert inspect.getsourcefile(check).startswith(f"{GENERATED_DIR}/checker-")  # type: ignore[union-attr]
