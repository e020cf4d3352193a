"""MkDocs hooks of the documentation site (``mkdocs.yml``): the benchmark charts.

The benchmark report (:mod:`bench.harness.report`) writes ``docs/benchmarks.md`` with links to
the charts where the benchmarks write them, ``bench/results/<suite>.png``, outside the docs
directory, so the page reads the same on a repository browser. The site serves each chart as
``assets/bench/<suite>.png`` and rewrites those links in every page to it.

Invariants:

* The hooks only add files and rewrite links; the charts themselves are not copied into
  ``docs/`` (one copy, the benchmarks' own).
* A page that links a chart that does not exist still links a missing file, so the strict
  build fails on it as on any broken link.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

CHARTS_DIR = Path(__file__).resolve().parents[1] / "bench" / "results"
SITE_DIR = "assets/bench"
_CHART_LINK = re.compile(r"\]\((?:\.\./)+bench/results/(?P<name>[\w.-]+\.png)\)")


def on_files(files: Files, config: Any) -> Files:
    """Add every chart of ``bench/results/`` to the site as ``assets/bench/<name>``."""
    for chart in sorted(CHARTS_DIR.glob("*.png")):
        files.append(File.generated(config, f"{SITE_DIR}/{chart.name}", abs_src_path=str(chart)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point the page's links to ``bench/results/*.png`` at the site's copies."""
    base = posixpath.dirname(page.file.src_uri)
    prefix = posixpath.relpath(SITE_DIR, base or ".")
    return _CHART_LINK.sub(lambda m: f"]({prefix}/{m.group('name')})", markdown)
