"""Support code shared by the tests, the benchmarks and the examples (not shipped in the wheel).

* :mod:`devkit.repo`: the repository root, and putting it on the ``PYTHONPATH`` Spark's Python
  workers inherit (processors under ``tests/``, ``bench/`` and ``examples/`` are imported there
  by module name).
* :mod:`devkit.spark_local`: a small local SparkSession from ``conf/spark-defaults.conf``, its
  SQL settings changed for a block, and micro-batch input files.
* :mod:`devkit.s3_server`: a throwaway, credential-checking S3 server on loopback (SeaweedFS).
* :mod:`devkit.jvm_archive` (with :mod:`devkit.jvm_archive_job`): the test suite's class-data
  archive of Spark's driver JVM, so its many short-lived JVMs map Spark's classes.
* :mod:`devkit.python_forkserver` (with ``devkit/bin/forkserver_client.py``): the test suite's
  fork server for the driver-side Python runner of each ``transformWithState`` query start.

Invariants: ``devkit`` imports ``fsstate`` and ``fsstate_spark`` at most, never ``tests``,
``bench`` or ``examples`` (held by ``make lint``: import-linter); the tests, the benchmarks and
the examples take what they share from here and nothing from one another.
"""
