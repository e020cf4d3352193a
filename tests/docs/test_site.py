"""The documentation site builds strictly, and what it must document is there.

Invariants checked: ``mkdocs build --strict`` of ``mkdocs.yml`` succeeds (never with ``-q``:
MkDocs 1.6 then does not count warnings, and a broken link passes) (so ``make test`` and
CI build the site); a broken link or a broken anchor fails that build (a
copy of the pages with one such fault is built and must fail, naming it); the errors page has a
row for every error type the packages define; the API page renders every public name of the
packages' ``__all__``.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import fsstate
import fsstate.errors
import fsstate_spark
import fsstate_spark.operators
import fsstate_spark.state.handles
from devkit.repo import ROOT

DOCS = ROOT / "docs"
CONFIG = ROOT / "mkdocs.yml"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site``, run from the checkout's root (the
    includes' base)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = _build(CONFIG, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "performance.html").is_file()
    assert (tmp_path / "site" / "assets" / "bench" / "spark_driver.png").is_file()


def _broken_copy(tmp_path: Path, faults: dict[str, tuple[str, str]]) -> Path:
    """A copy of the site's pages and config, each page of ``faults`` with its ``old`` text
    replaced by ``new``."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    for page, (old, new) in faults.items():
        text = (docs / page).read_text("utf-8")
        assert old in text
        (docs / page).write_text(text.replace(old, new, 1), "utf-8")
    config = CONFIG.read_text("utf-8")
    config = config.replace("docs_dir: docs", f"docs_dir: {docs}")
    config = config.replace("devkit/docs_hooks.py", str(ROOT / "devkit" / "docs_hooks.py"))
    path = tmp_path / "mkdocs.yml"
    path.write_text(config, "utf-8")
    return path


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    config = _broken_copy(
        tmp_path,
        {
            "index.md": ("(quickstart.md)", "(quickstart-gone.md)"),
            "tiered.md": ("(architecture.md#the-epoch)", "(architecture.md#no-such-anchor)"),
        },
    )
    done = _build(config, tmp_path / "site")
    assert done.returncode != 0, "the strict build passed a broken link"
    assert "quickstart-gone.md" in done.stderr and "no-such-anchor" in done.stderr, done.stderr


def test_the_errors_page_has_a_row_for_every_error() -> None:
    page = (DOCS / "errors.md").read_text("utf-8")
    errors = [
        name
        for module in (fsstate.errors, fsstate_spark.state.handles)
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, fsstate.errors.FsStateError)
        and obj.__module__ == module.__name__
        and name != "FsStateError"
    ]
    missing = [name for name in errors if f"| `{name}` |" not in page]
    assert len(errors) > 15 and not missing, f"errors without a row on docs/errors.md: {missing}"


def test_the_api_page_renders_every_public_name() -> None:
    page = (DOCS / "api.md").read_text("utf-8")
    rendered = {line.split()[-1].rsplit(".", 1)[-1] for line in page.splitlines() if "::: " in line}
    rendered |= {n for n in dir(fsstate.errors) if "::: fsstate.errors" in page}
    public = {*fsstate.__all__, *fsstate_spark.__all__, *fsstate_spark.operators.__all__}
    missing = sorted(public - rendered)
    assert not missing, f"public names docs/api.md does not render: {missing}"
