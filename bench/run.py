"""``python -m bench.run --quick|--full [--suite NAME ...] [--only TEXT ...]``: run benchmarks.

The command only; the runner and the suite registry are :mod:`bench.harness.runner`.

Invariants: this module holds no logic of its own, so ``make bench`` / ``make bench-quick``
and ``python -m bench.harness.runner`` behave alike.
"""

from __future__ import annotations

import sys

from bench.harness.runner import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
