"""Every code block of the documentation site is a file the tests run (or, for the few that need
a cluster, an object store or a Spark Connect server, compile and resolve).

The pages include their code with pymdownx.snippets (``--8<-- "docs/snippets/x.py:section"``),
so a page shows the file the test ran. A snippet that stops working fails here:

* ``RUN`` snippets run in-process as ``__main__`` in a fresh working directory (the Spark ones
  with the suite's SparkSession, which their ``SparkSession.builder.getOrCreate()`` returns)
  and assert what they show;
* ``SHELL_RUN`` snippets (``fsstate`` command lines) run line by line through the command's
  click group, after the Python snippet that makes the state they read, in its directory;
* ``SHELL_CHECK`` snippets' ``make`` lines must name targets (``make -n``) and their other
  commands must exist;
* ``COMPILE`` snippets compile, and every name they import from fsstate, fsstate_spark or the
  examples exists (each says which test runs what it shows end to end).

Invariants held here: every file under ``docs/snippets/`` is in exactly one of these sets;
every fenced code block of a page is an include of an existing file (and section); nothing
else is code on a page.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devkit.repo import ROOT

DOCS = ROOT / "docs"
SNIPPETS = DOCS / "snippets"
BIN = Path(sys.executable).parent

ENGINE_RUN = ["engine_store.py", "engine_read.py", "errors_catch.py", "errors_spark.py"]
SPARK_RUN = [
    "tiered_settings.py",
    "driver_flow.py",
    "operators_window.py",
    "inspect_spark.py",
    "rescale_flow.py",
]
SHELL_RUN = {"cli.sh": "engine_store.py"}  # the shell snippet, the snippet making its state
SHELL_CHECK = [
    "bench.sh",
    "deploy_submit.sh",
    "install.sh",
    "lineages.sh",
    "monitoring.sh",
    "operations.sh",
    "rescale_query.sh",
    "setup.sh",
]
COMPILE = {
    "deploy_s3.py": "tests/fsstate_spark/test_cluster.py, tests/fsstate_spark/tiered/ on S3",
    "deploy_connect.py": "tests/fsstate_spark/test_connect.py",
    "migrate_from_spark.py": "tests/fsstate_spark/test_migration.py",
    "monitoring_prometheus.py": "tests/fsstate_spark/metrics/test_prometheus.py",
    "rescale_query.py": "tests/fsstate_spark/tiered/test_rescale.py",
    "session_tracker_query.py": "tests/fsstate_spark/tiered/test_streaming.py",
}
# run by tests/docs/test_readme.py after the README's example, in its directory
AFTER_README = ["quickstart_inspect.sh"]
# included text: the reference checked by tests/docs/test_configuration.py, the example's output
# checked by tests/docs/test_readme.py
DATA = ["settings_reference.md", "running_count_output.txt", "layout.txt"]

_INCLUDE = re.compile(r'^\s*-{1,3}8<-{1,3}\s+"(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"\s*$')
_FENCE = re.compile(r"^(\s*)(```+|~~~+)")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name != "benchmarks.md")


def _code_blocks(text: str) -> list[list[str]]:
    """The lines inside each fenced code block of a markdown text."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    fence = ""
    for line in text.splitlines():
        m = _FENCE.match(line)
        if current is None and m:
            current, fence = [], m.group(2)
        elif current is not None and line.strip().startswith(fence):
            blocks.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_every_snippet_is_run_checked_or_compiled() -> None:
    files = sorted(p.name for p in SNIPPETS.iterdir() if p.is_file())
    listed = [*ENGINE_RUN, *SPARK_RUN, *SHELL_RUN, *SHELL_CHECK, *COMPILE, *AFTER_README, *DATA]
    assert sorted(listed) == files, "docs/snippets/ and the lists of this module differ"


def test_every_code_block_of_a_page_is_an_include_of_an_existing_file() -> None:
    problems = []
    for page in _pages():
        for block in _code_blocks(page.read_text("utf-8")):
            lines = [line for line in block if line.strip()]
            for line in lines:
                m = _INCLUDE.match(line)
                if m is None:
                    problems.append(f"{page.name}: inline code {line.strip()!r}: use a snippet")
                    continue
                target = ROOT / m.group("path")
                if not target.is_file():
                    problems.append(f"{page.name}: includes {m.group('path')}, which is missing")
                elif m.group("section") and (
                    f"[start:{m.group('section')}]" not in target.read_text("utf-8")
                ):
                    problems.append(f"{page.name}: {m.group('path')} has no section")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ENGINE_RUN)
def test_engine_snippet_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(SNIPPETS / name), run_name="__main__")


@pytest.mark.parametrize("name", SPARK_RUN)
def test_spark_snippet_runs(
    name: str, spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(SNIPPETS / name), run_name="__main__")


def _command(line: str) -> str:
    """A shell line as the test runs it: ``.venv/bin/`` is this interpreter's scripts dir."""
    return line.replace(".venv/bin/", f"{BIN}/")


@pytest.mark.parametrize(("name", "maker"), sorted(SHELL_RUN.items()))
def test_shell_snippet_runs(
    name: str, maker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each line is an ``fsstate`` command, run in-process through its click group (the console
    script's entry point) to keep the test quick."""
    from click.testing import CliRunner

    from fsstate.cli import cli

    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(SNIPPETS / maker), run_name="__main__")
    for line in (SNIPPETS / name).read_text("utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "fsstate", f"{name}: {line}: only fsstate commands run here"
        done = CliRunner().invoke(cli, words[1:], catch_exceptions=False)
        assert done.exit_code == 0, f"{line}\n{done.output}"


@pytest.mark.parametrize("name", SHELL_CHECK)
def test_shell_snippet_names_real_targets_and_commands(name: str) -> None:
    text = (SNIPPETS / name).read_text("utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0].endswith("="):
            continue
        if words[0] == "make":
            targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            done = subprocess.run(
                ["make", "-n", "-o", ".venv/.installed", *targets],
                cwd=ROOT,
                capture_output=True,
            )
            assert done.returncode == 0, f"{name}: {line}\n{done.stderr.decode()}"
        else:
            program = _command(words[0])
            assert shutil.which(program, path=f"{BIN}{os.pathsep}{os.environ['PATH']}"), (
                f"{name}: {line}: {words[0]} is not a command here"
            )
            _check_options(name, line, words)


def _check_options(name: str, line: str, words: list[str]) -> None:
    """An ``fsstate`` or ``fsstate-spark`` line names one of its commands and only options
    that command's ``--help`` lists."""
    prog = Path(words[0]).name
    if prog not in ("fsstate", "fsstate-spark") or len(words) < 2:
        return
    done = subprocess.run(
        [f"{BIN}/{prog}", words[1], "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{name}: {line}: no command {words[1]!r}\n{done.stderr}"
    for word in words[2:]:
        option = word.split("=", 1)[0]
        if option.startswith("-") and len(option) > 1:
            assert re.search(rf"(^|[\s,]){re.escape(option)}([\s,=]|$)", done.stdout), (
                f"{name}: {line}: {prog} {words[1]} has no option {option}"
            )


def _missing_imports(tree: ast.AST) -> list[str]:
    """The names ``tree`` imports from fsstate, fsstate_spark or the examples that do not
    exist (a name is an attribute of its module, or a submodule imported by name)."""
    missing = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] in ("fsstate", "fsstate_spark", "examples")
        ):
            module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    continue
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    missing.append(f"from {node.module} import {alias.name}")
    return missing


@pytest.mark.parametrize("name", sorted(COMPILE))
def test_compile_only_snippet_compiles_and_its_imports_exist(name: str) -> None:
    source = (SNIPPETS / name).read_text("utf-8")
    tree = ast.parse(source, name)
    compile(tree, name, "exec")
    assert not _missing_imports(tree), _missing_imports(tree)


def _included_python(page: Path) -> list[tuple[str, Path, str]]:
    """(include, file, source shown) of each Python file (or section of one) a page shows."""
    out = []
    for block in _code_blocks(page.read_text("utf-8")):
        for line in block:
            m = _INCLUDE.match(line)
            if m is None or not m.group("path").endswith(".py"):
                continue
            path = ROOT / m.group("path")
            text = path.read_text("utf-8")
            section = m.group("section")
            if section:
                start, end = f"[start:{section}]", f"[end:{section}]"
                text = text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0]
            out.append((line.strip(), path, text))
    return out


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_every_name_a_page_imports_exists(page: Path) -> None:
    """What a page shows importing from fsstate, fsstate_spark or the examples imports from
    there: the section it shows, not only its file (which may import elsewhere)."""
    problems = []
    for include, path, source in _included_python(page):
        try:
            tree = ast.parse(textwrap.dedent(source))
        except SyntaxError:  # a section that is not whole statements: its file's imports
            tree = ast.parse(path.read_text("utf-8"))
        problems += [f"{include}: {m}" for m in _missing_imports(tree)]
    assert not problems, "\n".join(problems)


def test_a_page_showing_commands_shows_what_makes_their_state() -> None:
    """A page that shows a shell snippet of SHELL_RUN also shows the snippet making the state
    it reads (so the page's examples run in order, from the page alone)."""
    problems = []
    for page in _pages():
        shown = {
            Path(m.group("path")).name
            for block in _code_blocks(page.read_text("utf-8"))
            for line in block
            if (m := _INCLUDE.match(line))
        }
        problems += [
            f"{page.name} shows {name} but not {maker}, which makes its state"
            for name, maker in SHELL_RUN.items()
            if name in shown and maker not in shown
        ]
    assert not problems, "\n".join(problems)
