"""Benchmarks of fsstate: engine micro-benchmarks and end-to-end Spark suites.

Run ``python -m bench.run --quick`` or ``--full``; see :mod:`bench.run` for the suite registry
and ``docs/benchmarks.md`` for the latest figures, with the commit, start and duration of each
suite's run (the run time is stated there only).
"""
