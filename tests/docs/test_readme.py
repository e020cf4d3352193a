"""The README is short, its links resolve, and its one example runs as shown.

Invariants checked: README.md has at most 170 lines; its Python block is
``examples/running_count.py`` verbatim, its shell block is ``docs/snippets/setup.sh`` and its
output block is ``docs/snippets/running_count_output.txt`` (the Quickstart includes the same
files); running the example as a script in a fresh directory prints that output, and no
warning about fsstate's own state variables on its restart; the Quickstart's commands over the
state it left then succeed; every relative link of the README names a file of the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devkit.repo import ROOT

README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "running_count.py"
SNIPPETS = ROOT / "docs" / "snippets"
MAX_LINES = 170


def _blocks(text: str) -> dict[str, list[str]]:
    """The README's fenced code blocks by language (each language's blocks in order)."""
    out: dict[str, list[str]] = {}
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
        out.setdefault(m.group(1), []).append(m.group(2))
    return out


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text("utf-8")


def test_the_readme_is_short(readme: str) -> None:
    lines = len(readme.splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines: the docs site is the place for more"


def test_the_readme_shows_its_files_verbatim(readme: str) -> None:
    blocks = _blocks(readme)
    assert blocks.pop("python") == [EXAMPLE.read_text("utf-8")]
    assert blocks.pop("sh") == [(SNIPPETS / "setup.sh").read_text("utf-8")]
    assert blocks.pop("text") == [(SNIPPETS / "running_count_output.txt").read_text("utf-8")]
    assert not blocks, f"README code blocks that no test runs: {sorted(blocks)}"


def test_the_readme_links_resolve(readme: str) -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert local, "the README links no page of the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_readme_example_runs_as_shown(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # Spark's workers import fsstate from here
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # the second run restarts from the checkpoint: fsstate reads its lineage marker there,
    # which Spark's state server must not warn about (issue 66)
    warned = [line for line in done.stderr.splitlines() if "WARN" in line and "_fsstate" in line]
    assert not warned, warned
    want = (SNIPPETS / "running_count_output.txt").read_text("utf-8").splitlines()
    got = [line for line in done.stdout.splitlines() if line in want]
    assert got == want, done.stdout
    bin_dir = f"{Path(sys.executable).parent}/"
    for line in (SNIPPETS / "quickstart_inspect.sh").read_text("utf-8").splitlines():
        shown = subprocess.run(
            ["bash", "-c", line.replace(".venv/bin/", bin_dir)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert shown.returncode == 0 and "RunningCount" in shown.stdout, (line, shown.stderr)
