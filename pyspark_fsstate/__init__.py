"""Spark's Python worker with fsstate's keyed loop: ``spark.python.worker.module`` names
:mod:`pyspark_fsstate.worker` (Spark's daemon imports a worker module only when its name starts
with ``pyspark``). Nothing else lives here; the loop is :mod:`fsstate_spark.tiered.fast_loop`."""

from __future__ import annotations
