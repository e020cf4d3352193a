"""What epoch ``b`` runs with, from what epoch ``b - 1`` committed: the per-epoch rules of every
driver (:class:`fsstate.operators.local.LocalQuery` and the Spark flow driver).

A driver runs a query's stages (operators, each over ``partitions`` stores) epoch after epoch.
Before epoch ``b`` it needs the watermarks and, per stage that combines before its shuffle,
whether to combine; both follow from the records of version ``b - 1``
(:class:`fsstate.store.record.EpochRecord`) of every partition of every stage, which an
:class:`EpochPlanner` keeps from the epoch it saw complete, or reads (one manifest per
partition) when it did not see it (a restart).

Watermarks, with Spark's rules (``WatermarkTracker``, ``IncrementalExecution``): each watermark
input's watermark is its largest event time so far minus its delay; the query's watermark is the
minimum over the inputs (``spark.sql.streaming.multipleWatermarkPolicy`` = min; ``max`` is
supported too), an input that has seen no row counting as 0, and it never moves back (it starts
at 0). Epoch ``b`` evicts with the watermark computed after epoch ``b - 1`` and treats input at or
below the previous epoch's watermark as late. An input's event times are recorded by one stage
(:class:`WatermarkInput`: the stage and the operator's input name).

Combining: :func:`fsstate.operators.combining.decide` on the stage's merged combine record of
``b - 1``.

Invariants: :func:`next_watermark` is monotonic and equals Spark's for the same per-epoch maxima;
a plan depends only on the committed versions ``b - 1``, so every attempt of ``b`` plans the same;
:meth:`EpochPlanner.plan` raises :class:`fsstate.errors.VersionNotFoundError` when a partition
lacks ``b - 1`` (an epoch that did not complete everywhere).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fsstate.errors import ConfigError, VersionNotFoundError
from fsstate.operators.combining import decide
from fsstate.storage.fileio import FileIO
from fsstate.store.record import EpochRecord, Receipts, read_records

__all__ = [
    "POLICIES",
    "EpochPlan",
    "EpochPlanner",
    "PlannedStage",
    "WatermarkInput",
    "WatermarkSpec",
    "next_watermark",
]

POLICIES = ("min", "max")


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
class WatermarkInput:
    """One watermark input: its name, the stage that records its event times under the
    operator's input name ``input``, and its delay."""

    name: str
    stage: str
    input: str
    delay_ms: int


@dataclass(frozen=True)
class PlannedStage:
    """A stage as the planner sees it: its operator's name, partition count and layout
    generation directory."""

    name: str
    partitions: int
    layout: str = ""


@dataclass(frozen=True)
class EpochPlan:
    """What epoch ``epoch`` runs with.

    Attributes:
        epoch: the epoch.
        late_ms: the previous epoch's watermark (input at or below it is late).
        evict_ms: the watermark this epoch evicts with.
        previous: each stage's merged record of ``epoch - 1`` (empty for epoch 0).
    """

    epoch: int
    late_ms: int = 0
    evict_ms: int = 0
    previous: Mapping[str, EpochRecord] = field(default_factory=dict)

    def combine(self, stage: str) -> tuple[bool, int]:
        """Whether ``stage`` combines this epoch's input before its shuffle, and the
        ``skip_until`` its epochs record (:func:`fsstate.operators.combining.decide`)."""
        record = self.previous.get(stage)
        return decide(record.combine if record is not None else None, self.epoch)


def next_watermark(previous_ms: int, maxima: dict[str, int], spec: WatermarkSpec) -> int:
    """The watermark after an epoch whose cumulative maxima per input are ``maxima``."""
    if not spec.delays_ms:
        return previous_ms
    values = [maxima[n] - d if n in maxima else 0 for n, d in spec.delays_ms.items()]
    candidate = min(values) if spec.policy == "min" else max(values)
    return max(previous_ms, candidate)


class EpochPlanner:
    """Plans a query's epochs from its stages' records (see the module docstring).

    Args:
        fileio: the query's state root.
        stages: the stateful stages.
        inputs: the watermark inputs.
        policy: the watermark policy across inputs (``min`` or ``max``).
    """

    def __init__(
        self,
        fileio: FileIO,
        stages: Sequence[PlannedStage],
        inputs: Sequence[WatermarkInput] = (),
        policy: str = "min",
    ) -> None:
        self.fileio = fileio
        self.stages = tuple(stages)
        self.inputs = tuple(inputs)
        self.spec = WatermarkSpec({i.name: i.delay_ms for i in self.inputs}, policy)
        self.manifest_reads = 0  # manifests read (partitions no receipt reported)
        self._seen: tuple[int, dict[str, EpochRecord]] | None = None  # the last complete epoch

    def records(
        self, epoch: int, receipts: Receipts | None = None
    ) -> dict[str, EpochRecord] | None:
        """Every stage's record of version ``epoch``, merged over its partitions (None if a
        partition lacks it): from ``receipts`` where a task reported, else the manifests."""
        out: dict[str, EpochRecord] = {}
        for s in self.stages:
            got, reads = read_records(self.fileio, s.name, s.partitions, epoch, s.layout, receipts)
            self.manifest_reads += reads
            if got is None:
                return None
            out[s.name] = EpochRecord.merge(got)
        return out

    def complete(self, epoch: int, receipts: Receipts | None = None) -> bool:
        """Whether every partition of every stage committed ``epoch``; if so, its records are
        kept to plan ``epoch + 1``."""
        got = self.records(epoch, receipts)
        if got is None:
            return False
        self._seen = (epoch, got)
        return True

    def plan(self, epoch: int, where: str = "") -> EpochPlan:
        """The plan of ``epoch``.

        Raises:
            VersionNotFoundError: a partition has no version ``epoch - 1`` (``where`` names
                the state in the message).
        """
        if epoch == 0:
            return EpochPlan(0)
        if self._seen is not None and self._seen[0] == epoch - 1:
            previous: dict[str, EpochRecord] | None = self._seen[1]
        else:
            previous = self.records(epoch - 1)
        if previous is None:
            raise VersionNotFoundError(
                f"the state of micro-batch {epoch - 1} is incomplete{where}: the state "
                "directory must be kept with the checkpoint (restore it, or start with a new "
                "checkpoint and state location)"
            )
        self._seen = (epoch - 1, previous)
        late = max((r.watermark_ms for r in previous.values()), default=0)
        maxima: dict[str, int] = {}
        for i in self.inputs:
            seen = previous[i.stage].event_time_max_ms.get(i.input)
            if seen is not None:
                maxima[i.name] = seen
        return EpochPlan(epoch, late, next_watermark(late, maxima, self.spec), previous)
