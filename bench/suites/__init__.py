"""The benchmark suites, one module each, registered in :mod:`bench.harness.runner`.

Each suite is a module with ``run(ctx: BenchContext) -> list[Result]``. A suite too large for
one module is split into parts named ``<suite>_<part>`` (``engine_batch`` and
``engine_storage`` of ``engine``, ``spark_driver_cost`` of ``spark_driver``,
``spark_e2e_memory`` and ``spark_e2e_rows`` of ``spark_e2e``, ``spark_jvm_cells`` and
``spark_jvm_loop`` of ``spark_jvm``, ``spark_scale_plan``, ``spark_scale_data``,
``spark_scale_state`` and ``spark_scale_rows`` of ``spark_scale``), which only that suite's
modules (and :mod:`bench.profile`, for its fixtures) import.

Invariants (held by ``make lint``: import-linter): no suite imports another suite; what two
suites share lives in :mod:`bench.harness` under a public name.
"""
