"""Benchmarks of fsstate: engine micro-benchmarks and end-to-end Spark suites.

Layout (held by ``make lint``: import-linter):

* the commands: ``python -m bench.run --quick|--full`` (:mod:`bench.run`), ``python -m
  bench.report`` (:mod:`bench.report`), ``python -m bench.readme_figures``
  (:mod:`bench.readme_figures`) and ``python -m bench.profile`` (:mod:`bench.profile`, cProfile
  of engine calls on the suites' fixtures);
* :mod:`bench.suites`: one module per suite (a suite too large for one module has parts named
  ``<suite>_<part>``, which only it and :mod:`bench.profile` import);
* :mod:`bench.harness`: what the suites share (results, timing, the runner and the report,
  input data, the Spark session and query plumbing, the processors Spark's workers import).

Invariants: imports go down (commands -> suites -> harness); no suite imports another suite;
nothing here imports ``tests`` or ``examples``: shared support code comes from ``devkit``.

See :mod:`bench.harness.runner` for the suite registry and ``docs/benchmarks.md`` for the latest
figures, with the commit, start and duration of each suite's run (the run time is stated there
only).
"""
