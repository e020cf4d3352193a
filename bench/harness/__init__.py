"""What the benchmark suites share: the runner, results and report, and the plumbing of a run.

* :mod:`~bench.harness.common`: result records, the run context, timing and machine info;
* :mod:`~bench.harness.runner` (the suite registry, ``python -m bench.run``),
  :mod:`~bench.harness.report` (suite JSON files and docs/benchmarks.md),
  :mod:`~bench.harness.chart` (a suite's PNG) and :mod:`~bench.harness.readme_figures`
  (citations of published rows in the README and the docs pages);
* :mod:`~bench.harness.datagen`: deterministic keys, values and Arrow tables;
* Spark: :mod:`~bench.harness.spark` (the session, handing in batch files, stopping queries),
  :mod:`~bench.harness.spark_procs` and :mod:`~bench.harness.spark_runner` (the
  transformWithState queries of ``spark_e2e`` and ``spark_storage``),
  :mod:`~bench.harness.operator_queries` (the windowed count and running aggregate of the
  operator suites), :mod:`~bench.harness.processor_queries` (the cells' shape, the running
  aggregate's checksums, sink and batch wait for ``spark_driver``, ``spark_jvm`` and
  ``spark_scale``), :mod:`~bench.harness.processor_sides` (starting the running aggregate on
  each side: ``tiered()``, Spark's handles, the flow driver, Java; the fast-loop check),
  :mod:`~bench.harness.java_processor` (the Java processor), :mod:`~bench.harness.key_phases`
  (profiled time charged to phases), :mod:`~bench.harness.matrix` (the shapes and running
  queries of ``spark_matrix`` and the suites measured on its cells);
* :mod:`~bench.harness.s3`: the S3 server of the storage suites.

Invariants: the harness never imports a suite (:mod:`bench.harness.runner` loads them by name
when they run); a name here is public because two suites or more use it.
"""
