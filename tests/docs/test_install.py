"""The install commands (docs/snippets/install.sh, on the Deploying page) match the package.

Invariants checked: the wheel they install is the one ``make dist`` builds (its name from
pyproject's name and version, and ``make dist`` runs ``pip wheel`` into ``dist/``); every extra
they name is one of pyproject's; the packages the page names are the ones the wheel holds.
"""

from __future__ import annotations

import re
import subprocess
import tomllib

from devkit.repo import ROOT

SNIPPET = (ROOT / "docs" / "snippets" / "install.sh").read_text("utf-8")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]


def test_the_wheel_installed_is_the_one_make_dist_builds() -> None:
    wheel = f"dist/{PROJECT['name']}-{PROJECT['version']}-py3-none-any.whl"
    assert wheel in SNIPPET, f"install.sh should install {wheel}"
    dry = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", "dist"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.search(r"-m pip wheel .*--wheel-dir dist \.", dry), dry


def test_the_extras_named_exist() -> None:
    named = {e for group in re.findall(r"\[([\w,]+)\]", SNIPPET) for e in group.split(",")}
    assert named and named <= set(PROJECT["optional-dependencies"]), named


def test_the_packages_named_are_the_ones_packaged() -> None:
    include = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    packages = sorted(p.rstrip("*") for p in include["packages"]["find"]["include"])
    page = (ROOT / "docs" / "deploying.md").read_text("utf-8")
    section = page.split("## Installing", 1)[1].split("\n## ", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", section.split(")", 1)[0])) == packages
