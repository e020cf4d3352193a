"""Profiles of the tasks fsstate's keyed loop runs: ``FSSTATE_PROFILE_DIR``.

A diagnostic, off unless the environment variable :data:`PROFILE_DIR_ENV` names a directory in
the Python workers' environment (``spark.executorEnv.FSSTATE_PROFILE_DIR``; in local mode the
driver's environment): then every task of a ``tiered()`` operator on fsstate's keyed loop
(:mod:`fsstate_spark.tiered.fast_loop`) runs under ``cProfile`` and its statistics are written
there as ``<processor class>-s<stage>-p<partition>-a<attempt>-<pid>.prof`` (``pstats``
format), read by ``python -m pstats`` or by the benchmark that breaks a key's time down
(:mod:`bench.suites.spark_key_breakdown`). Like Spark's own ``spark.python.profile``, it
slows the task down (every Python call is counted) and is meant for a test run, not for
production.

Invariants:

* Off, a task pays one environment lookup; nothing else changes.
* A file holds one task attempt (the names never collide: attempt and process id), written
  when the task's loop ends, failed or not; the profile covers the task from its loop's first
  step to its last (reading the input, the processor, the state, the commit, the output).
* A diagnostic file written by ``pstats`` itself, outside fsstate's storage (like
  ``FSSTATE_EPOCH_LOG``); a directory that cannot be written is logged once, never fails the
  task.
"""

from __future__ import annotations

import cProfile
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

PROFILE_DIR_ENV = "FSSTATE_PROFILE_DIR"
_warned: set[str] = set()


def start() -> cProfile.Profile | None:
    """A running profile of this task, or None when profiling is off."""
    if not os.environ.get(PROFILE_DIR_ENV):
        return None
    profile = cProfile.Profile()
    profile.enable()
    return profile


def stop(profile: cProfile.Profile, processor: str) -> None:
    """Stop ``profile`` and write it for the task of ``processor`` (a class name)."""
    profile.disable()
    where = os.environ.get(PROFILE_DIR_ENV)
    if not where:
        return
    from pyspark import TaskContext

    tc = TaskContext.get()
    stage, part, attempt = (
        (tc.stageId(), tc.partitionId(), tc.attemptNumber()) if tc is not None else (-1, -1, 0)
    )
    name = f"{processor}-s{stage:05d}-p{part:05d}-a{attempt}-{os.getpid()}.prof"
    try:
        Path(where).mkdir(parents=True, exist_ok=True)
        profile.dump_stats(str(Path(where) / name))
    except OSError as exc:
        if where not in _warned:
            _warned.add(where)
            log.warning("fsstate: cannot write task profiles to %s: %s", where, exc)
