"""``python -m fsstate_spark``: the ``fsstate-spark`` command line (:mod:`fsstate_spark.cli`)."""

from __future__ import annotations

from fsstate_spark.cli import main

if __name__ == "__main__":
    main()
