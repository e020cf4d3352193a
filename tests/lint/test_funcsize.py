"""The function size check of ``make lint`` (:mod:`lint.funcsize`).

Invariants checked: a body of 60 lines and 60 statements passes and one more of either fails;
the docstring, the signature and decorators never count; a nested function's statements count
in the function that holds it, and it is checked itself under its qualified name; an allowed
function is not reported, a stale allowance is; the exit code says which.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lint.funcsize import check, main, sizes_of_source


def _function(name: str, body_lines: int, docstring: bool = True) -> str:
    doc = '    """A docstring\n\n    of three lines."""\n' if docstring else ""
    body = "".join(f"    x{i} = {i}\n" for i in range(body_lines))
    return f"@decorator\ndef {name}(\n    a: int,\n) -> None:\n{doc}{body}"


def test_sixty_lines_pass_and_sixty_one_fail(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(_function("ok", 60) + "\n\n" + _function("long", 61))
    [size_ok, size_long] = sizes_of_source((tmp_path / "m.py").read_text(), "m.py")
    assert (size_ok.lines, size_ok.statements) == (60, 60)
    assert (size_long.lines, size_long.statements) == (61, 61)
    [problem] = check([str(tmp_path)])
    assert problem.startswith(f"{tmp_path.as_posix()}/m.py:")
    assert "long has 61 lines, 61 statements" in problem


def test_statements_count_even_on_few_lines() -> None:
    source = "def dense():\n    " + "; ".join(f"x{i} = {i}" for i in range(61)) + "\n"
    [size] = sizes_of_source(source, "m.py")
    assert (size.lines, size.statements) == (1, 61)


def test_a_function_without_docstring_counts_from_its_first_statement() -> None:
    [size] = sizes_of_source(_function("f", 5, docstring=False), "m.py")
    assert (size.lines, size.statements) == (5, 5)


def test_nested_functions_count_in_their_holder_and_by_themselves() -> None:
    source = (
        "class C:\n"
        "    def outer(self):\n"
        "        def inner():\n"
        "            if True:\n"
        "                return 1\n"
        "        return inner\n"
    )
    sizes = {s.name: (s.lines, s.statements) for s in sizes_of_source(source, "m.py")}
    assert sizes == {"C.outer": (4, 4), "C.outer.inner": (2, 2)}


def test_allowed_functions_pass_and_stale_allowances_fail(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(_function("long", 70) + "\n\n" + _function("short", 3))
    path = f"{tmp_path.as_posix()}/m.py"
    assert check([str(tmp_path)], allow=[f"{path}::long"]) == []
    [stale] = check([str(tmp_path)], allow=[f"{path}::long", f"{path}::short"])
    assert stale.startswith(f"{path}::short: allowed") and "drop the --allow entry" in stale


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.py").write_text(_function("ok", 10))
    assert main([str(tmp_path)]) == 0
    (tmp_path / "long.py").write_text(_function("long", 61))
    assert main([str(tmp_path)]) == 1
    assert "long has 61 lines" in capsys.readouterr().out
    (tmp_path / "bad.py").write_text("def (:\n")
    assert main([str(tmp_path)]) == 2
    assert main([str(tmp_path / "missing")]) == 2
