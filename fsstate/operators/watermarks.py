"""Watermarks across partitions and epochs, with Spark's rules, computed from version meta.

Spark (``WatermarkTracker``, ``IncrementalExecution``): each watermark input's watermark is its
largest event time so far minus its delay; the query's watermark is the minimum over the inputs
(``spark.sql.streaming.multipleWatermarkPolicy`` = min; ``max`` is supported too), an input that
has seen no row counting as 0, and it never moves back (it starts at 0). Epoch ``b`` evicts
with the watermark computed after epoch ``b - 1`` and treats input at or below the previous
epoch's watermark as late.

The partitions' stores record what a driver needs in each version's meta
(:mod:`fsstate.operators.runner`): so the watermarks of epoch ``b`` come from reading the
manifests of version ``b - 1`` of every partition of the operators that see the inputs, and no
data is read.

Invariants: :func:`next_watermark` is monotonic and equals Spark's for the same per-epoch
maxima; :func:`read_epoch` raises :class:`fsstate.errors.VersionNotFoundError` naming the
partition if any partition lacks the version (an epoch that did not complete everywhere).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fsstate.errors import ConfigError
from fsstate.operators.base import EVENT_TIME_META, WATERMARK_META
from fsstate.operators.combining import merge_stats
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.store.identity import store_dir_for

POLICIES = ("min", "max")
READ_THREADS_MAX = 16  # manifests read at once (object stores: one GET each)


@dataclass(frozen=True)
class WatermarkSpec:
    """The watermark inputs of a query: name -> delay in ms, and the policy across them."""

    delays_ms: dict[str, int]
    policy: str = "min"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"watermark policy must be one of {POLICIES}, got {self.policy!r}")
        for name, d in self.delays_ms.items():
            if not isinstance(d, int) or d < 0:
                raise ConfigError(f"watermark delay of input {name!r} must be an int >= 0 ms")


@dataclass(frozen=True)
class EpochMeta:
    """What the versions of one epoch say: the watermark used, the event-time maxima and the
    combine record (:mod:`fsstate.operators.combining`; None if a partition has none)."""

    watermark_ms: int
    event_time_max_ms: dict[str, int]
    combine: dict[str, int] | None = None


def next_watermark(previous_ms: int, maxima: dict[str, int], spec: WatermarkSpec) -> int:
    """The watermark after an epoch whose cumulative maxima per input are ``maxima``."""
    if not spec.delays_ms:
        return previous_ms
    values = [maxima[n] - d if n in maxima else 0 for n, d in spec.delays_ms.items()]
    candidate = min(values) if spec.policy == "min" else max(values)
    return max(previous_ms, candidate)


def merge_meta(metas: Iterable[EpochMeta]) -> EpochMeta:
    """Combine the partitions' metas of one epoch (max watermark, max per input, the combine
    records summed)."""
    wm = 0
    maxima: dict[str, int] = {}
    records = []
    for m in metas:
        wm = max(wm, m.watermark_ms)
        for n, v in m.event_time_max_ms.items():
            maxima[n] = max(maxima.get(n, v), v)
        records.append(m.combine)
    return EpochMeta(wm, maxima, merge_stats(records) if records else None)


def read_epoch(
    fileio: FileIO, operator: str, partitions: int, version: int, layout: str = ""
) -> EpochMeta:
    """The merged meta of ``version`` of every partition of ``operator`` (one GET each), in the
    layout generation directory ``layout`` (``""``: generation 0).

    Raises:
        VersionNotFoundError: a partition has no such version.
    """

    def one(p: int) -> EpochMeta:
        meta = read_manifest(fileio, store_dir_for(operator, p, layout), version).meta
        seen = meta.get(EVENT_TIME_META) or {}
        return EpochMeta(int(meta.get(WATERMARK_META) or 0), {k: int(v) for k, v in seen.items()})

    if partitions <= 1:
        return merge_meta(one(p) for p in range(partitions))
    with ThreadPoolExecutor(min(READ_THREADS_MAX, partitions)) as pool:
        return merge_meta(pool.map(one, range(partitions)))
