"""Benchmarks of fsstate: engine micro-benchmarks and (later) end-to-end suites.

Run ``python -m bench.run --quick`` (about a minute) or ``--full`` (a few minutes); see
:mod:`bench.run` for the suite registry and ``docs/benchmarks.md`` for the latest figures.
"""
