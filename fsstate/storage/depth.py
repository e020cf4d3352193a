"""Read depth: how many runs of a table one key may be in, which is what compaction bounds.

A point read skips a run whose key span or Bloom filter excludes the key, so the cost of many
runs is the overlap of their spans, not their number. Time-prefixed state (window panes keyed
by their start, deleted a closed window at a time) writes runs of disjoint first-field spans:
they need no merging, and a closed window's runs are dropped whole at commit
(:meth:`fsstate.tables.base.TableBase.drop_dead_runs`).

Invariants:

* A run whose span is unknown without a read (opened from a manifest, footer not loaded), or
  whose first key field holds a null or NaN, counts as overlapping every key: compaction is
  never skipped for a table this process knows nothing about.
* The number of runs stays bounded too: ``RUNS_PER_DEPTH_MAX`` times ``compaction_max_runs``
  (each run costs a read a span or filter test and holds its footer in memory).
"""

from __future__ import annotations

from typing import Any

from fsstate.storage.runs import Run

RUNS_PER_DEPTH_MAX = 8  # runs of disjoint key spans a table may hold, per compaction_max_runs


def read_depth(runs: list[Run]) -> int:
    """The most runs one key may have rows in: the largest overlap of the runs' first-key-field
    spans (:meth:`Run.lead_span`), plus every run whose span is unknown without a read.

    A point read skips a run whose span or Bloom filter excludes the key, so this, not the
    number of runs, is what compaction bounds: time-prefixed state (window panes, keyed by
    their start) writes runs of disjoint spans that need no merging.
    """
    unknown = 0
    events: list[tuple[Any, int]] = []
    for run in runs:
        span = run.lead_span()
        if span is None:
            unknown += 1
        else:
            events += [(span[0], 0), (span[1], 1)]  # closed spans: a start before an end
    try:
        events.sort()
    except TypeError:  # first fields that do not compare: assume every run overlaps
        return len(runs)
    depth = deepest = 0
    for _, end in events:
        depth += -1 if end else 1
        deepest = max(deepest, depth)
    return unknown + deepest


def needs_merge(runs: list[Run], max_runs: int) -> bool:
    """Whether a table with ``runs`` is due for compaction: more than ``max_runs`` runs that one
    key may be in (:func:`read_depth`), or more than ``RUNS_PER_DEPTH_MAX`` times that many in
    all (each run costs a read a filter test and holds its footer in memory)."""
    n = len(runs)
    return n > max_runs and (n > RUNS_PER_DEPTH_MAX * max_runs or read_depth(runs) > max_runs)
