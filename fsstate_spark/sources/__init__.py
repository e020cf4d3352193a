"""Reading fsstate state back: ``spark.read.format("fsstate")`` / ``format("fsstate-metadata")``
and :func:`state_summary`.

Layers, top down: :mod:`~fsstate_spark.sources.source` (the Python data sources) and
:mod:`~fsstate_spark.sources.summary` (a query's state on storage, for users and the demo) over
:mod:`~fsstate_spark.sources.selection` (options resolved to what is read). Nothing here writes.
"""

from __future__ import annotations

from fsstate_spark.sources.source import register_sources
from fsstate_spark.sources.summary import StateSummary, state_summary

__all__ = ["StateSummary", "register_sources", "state_summary"]
