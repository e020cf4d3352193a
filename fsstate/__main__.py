"""``python -m fsstate``: the command line (:mod:`fsstate.cli`)."""

from __future__ import annotations

from fsstate.cli import main

if __name__ == "__main__":
    main()
