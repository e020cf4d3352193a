"""The support table on the docs' compatibility page is the one the compatibility matrix tests.

``docs/compatibility.md`` holds the table :func:`devkit.compat_matrix.support_table` generates
from the matrix (``make test-compat``'s entries) and the worker's adapters; the README and the
package metadata name the same ranges.
"""

from __future__ import annotations

import re
import tomllib

from devkit.compat_matrix import DEFAULT, MATRIX, support_table
from devkit.repo import ROOT

PAGE = ROOT / "docs" / "compatibility.md"


def test_the_page_holds_the_generated_support_table() -> None:
    text = PAGE.read_text("utf-8")
    found = re.search(r"<!-- support-table:[^>]*-->\n(.*?)\n<!-- /support-table -->", text, re.S)
    assert found, "docs/compatibility.md lost its support-table markers"
    assert found.group(1) == support_table(), (
        "the support table is stale: paste devkit.compat_matrix.support_table()'s output"
    )


def test_the_package_declares_the_tested_ranges() -> None:
    """``requires-python`` and the ``spark`` extra admit every tested Python and PySpark."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    pythons = sorted({e.python for e in (DEFAULT, *MATRIX)})
    assert meta["requires-python"] == f">={pythons[0]}"
    (spark,) = meta["optional-dependencies"]["spark"]
    minors = sorted({e.minor for e in (DEFAULT, *MATRIX)})
    low, high = minors[0], minors[-1]
    nxt = f"{high.split('.')[0]}.{int(high.split('.')[1]) + 1}"
    assert spark == f"pyspark[connect]>={low}.0,<{nxt}", spark
    readme = (ROOT / "README.md").read_text("utf-8")
    assert f"Python {pythons[0]} to {pythons[-1]}" in readme
    assert f"PySpark {low} to {high}" in readme
