"""Spark's state API over engine tables, shared by the products that run user processors.

Layers, top down: :mod:`~fsstate_spark.state.handles` (``ValueState`` / ``ListState`` /
``MapState`` objects and the handle, bound to the current grouping key) over
:mod:`~fsstate_spark.state.schemas` (Spark schemas to Arrow) and
:mod:`~fsstate_spark.state.map_order` (Spark's MapState iteration order). Spark's camelCase
stops at this package; the engine below is snake_case.
"""

from __future__ import annotations
