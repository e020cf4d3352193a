"""``python -m bench.report``: rebuild docs/benchmarks.md from bench/results/*.json.

The command only; the page, the suite JSON files and their format are
:mod:`bench.harness.report`.

Invariants: this module holds no logic of its own and runs no benchmark, so ``make
bench-report`` and ``python -m bench.harness.report`` behave alike.
"""

from __future__ import annotations

import sys

from bench.harness.report import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
