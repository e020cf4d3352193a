"""``python -m bench.readme_figures``: check README.md's figures against the rows they cite.

The command only; the citation grammar and the checks are :mod:`bench.harness.readme_figures`
(which ``tests/bench/test_readme_figures.py`` runs too).

Invariants: this module holds no logic of its own; it exits 1 when the checks find a problem.
"""

from __future__ import annotations

import sys

from bench.harness.readme_figures import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
