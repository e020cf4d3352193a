"""A driver without Spark: a chain of operators over micro-batches, in this process.

:class:`LocalQuery` does per epoch what the Spark driver (``fsstate_spark.operators``) does
across executors, with the same per-epoch rules (:class:`fsstate.operators.planning.EpochPlanner`:
the watermarks, and whether a stage combines, from the records of the previous version): it
hash-partitions each stage's input by its key columns into a fixed number of partitions and
runs every partition's epoch (:func:`run_epoch`), the output of one stage feeding the next. For
tests, notebooks and jobs without a cluster.

A stage whose operator combines before the shuffle (decomposable aggregates,
:meth:`fsstate.operators.Operator.can_combine`) gets its input combined per input part first
when the plan says combining pays, as the Spark driver does per input partition
(``input_parts`` parts of each batch here). The watermark inputs (``watermark``) are recorded
by the first stage's operator.

Invariants: the same input batches give the same outputs as the Spark driver (both run the same
operators with the same watermarks); a key always goes to the same partition (a stable hash,
the same in every process); re-running an epoch after a crash adopts what was committed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from fsstate.config import StoreConfig
from fsstate.errors import ConfigError
from fsstate.format.keyfilter import stable_hash
from fsstate.operators.base import Operator
from fsstate.operators.planning import (
    EpochPlan,
    EpochPlanner,
    PlannedStage,
    WatermarkInput,
    WatermarkSpec,
)
from fsstate.operators.runner import check_layout, run_epoch
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location


@dataclass(frozen=True)
class Stage:
    """An operator, the columns its input is partitioned by, and an optional projection of the
    previous stage's output (or of the query's input) into the operator's input."""

    op: Operator
    keys: Sequence[str] = field(default_factory=list)
    before: Callable[[pa.Table], pa.Table] | None = None


def partition_ids(table: pa.Table, keys: Sequence[str], partitions: int) -> np.ndarray:
    """The partition of each row: a stable hash of its key columns modulo ``partitions``."""
    n = table.num_rows
    if partitions == 1 or not keys or not n:
        return np.zeros(n, dtype=np.int64)
    keyed = table.select(list(keys)).append_column("_i", pa.array(np.arange(n)))
    groups = keyed.group_by(list(keys), use_threads=False).aggregate([("_i", "list")])
    out = np.empty(n, dtype=np.int64)
    tuples = zip(*(groups.column(k).to_pylist() for k in keys))
    for key, rows in zip(tuples, groups.column("_i_list").to_pylist()):
        out[rows] = stable_hash(tuple(key)) % partitions
    return out


class LocalQuery:
    """Run a chain of operator stages over micro-batches (see the module docstring).

    Args:
        state: where the state lives (a URI, a Location or a FileIO).
        stages: the operators in order, each with its partitioning columns.
        partitions: the partition count of every stage.
        watermark: the watermark inputs (recorded by the first stage's operator).
        config: store settings.
        combine: combine stages that can before partitioning their input.
        input_parts: how many parts each stage's input is combined in (input partitions).
    """

    def __init__(
        self,
        state: str | Location | FileIO,
        stages: Sequence[Stage],
        *,
        partitions: int = 1,
        watermark: WatermarkSpec | None = None,
        config: StoreConfig | None = None,
        combine: bool = True,
        input_parts: int = 2,
    ) -> None:
        names = [s.op.name for s in stages]
        if len(set(names)) != len(names):
            raise ConfigError(f"operator names {names} must be distinct within a query")
        if partitions < 1:
            raise ConfigError(f"partitions must be >= 1, got {partitions}")
        self.fileio = state if isinstance(state, FileIO) else FileIO(state)
        self.stages = list(stages)
        self.partitions = partitions
        self.watermark = watermark or WatermarkSpec({})
        self.config = config or StoreConfig()
        self.last_watermarks = (0, 0)
        self.combine = combine
        self.input_parts = max(1, input_parts)
        self._combined: dict[int, Operator] = {}
        # each stage's layout generation directory (rescaled state: fsstate.store.rescale)
        self.layouts = [check_layout(self.fileio, s.op, partitions).dir for s in self.stages]
        first = self.stages[0].op.name if self.stages else ""
        inputs = [WatermarkInput(n, first, n, d) for n, d in self.watermark.delays_ms.items()]
        self.planner = EpochPlanner(
            self.fileio,
            [PlannedStage(s.op.name, partitions, lay) for s, lay in zip(self.stages, self.layouts)],
            inputs,
            self.watermark.policy,
        )

    def run(self, epoch: int, batch: pa.Table) -> pa.Table:
        """Process one micro-batch; returns the last stage's output."""
        plan = self.planner.plan(epoch, f" under {self.fileio.describe('')}")
        self.last_watermarks = (plan.late_ms, plan.evict_ms)
        receipts: dict[tuple[str, int, int], dict[str, object]] = {}
        data = batch
        for s, stage in enumerate(self.stages):
            if stage.before is not None:
                data = stage.before(data)
            op, data, skip_until = self._combined_input(s, stage, data, plan)
            ids = partition_ids(data, stage.keys, self.partitions)
            outs = []
            for p in range(self.partitions):
                part = data.filter(pa.array(ids == p))
                res = run_epoch(
                    op,
                    self.fileio,
                    p,
                    epoch,
                    part,
                    late_ms=plan.late_ms,
                    evict_ms=plan.evict_ms,
                    config=self.config,
                    layout=self.layouts[s],
                    combine_skip_until=skip_until,
                )
                receipts[(op.name, p, epoch)] = res.meta or {}
                outs.append(res.output)
            data = pa.concat_tables(outs)
        self.planner.complete(epoch, receipts)
        return data

    def _combined_input(
        self, s: int, stage: Stage, data: pa.Table, plan: EpochPlan
    ) -> tuple[Operator, pa.Table, int]:
        """The operator stage ``s`` runs this epoch, its input (combined per input part when
        the plan says so) and the ``skip_until`` its epochs record."""
        op = stage.op
        if not self.combine or not (s in self._combined or op.can_combine(data.schema)):
            return op, data, 0
        combine, skip_until = plan.combine(op.name)
        if not combine:
            return op, data, skip_until
        if s not in self._combined:
            self._combined[s] = op.with_combined(data.schema)
        step = -(-data.num_rows // self.input_parts) or 1
        parts = [
            op.combine(data.slice(i, step), plan.late_ms)
            for i in range(0, max(data.num_rows, 1), step)
        ]
        return self._combined[s], pa.concat_tables(parts), skip_until
