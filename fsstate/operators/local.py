"""A driver without Spark: a chain of operators over micro-batches, in this process.

:class:`LocalQuery` does per epoch what the Spark driver (``fsstate_spark.operators``) does
across executors: it computes the epoch's watermarks from the previous version's meta
(:mod:`fsstate.operators.watermarks`), hash-partitions each stage's input by its key columns
into a fixed number of partitions and runs every partition's epoch (:func:`run_epoch`), the
output of one stage feeding the next. For tests, notebooks and jobs without a cluster.

A stage whose operator combines before the shuffle (decomposable aggregates,
:meth:`fsstate.operators.Operator.can_combine`) gets its input combined per input part first,
as the Spark driver does per input partition (``input_parts`` parts of each batch here).

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
from fsstate.operators.runner import check_layout, run_epoch
from fsstate.operators.watermarks import WatermarkSpec, next_watermark, read_epoch
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

    def watermarks(self, epoch: int) -> tuple[int, int]:
        """(late, evict) watermarks of ``epoch`` from the versions of ``epoch - 1``."""
        if epoch == 0:
            return 0, 0
        first = self.stages[0].op.name
        meta = read_epoch(self.fileio, first, self.partitions, epoch - 1, self.layouts[0])
        late = meta.watermark_ms
        return late, next_watermark(late, meta.event_time_max_ms, self.watermark)

    def run(self, epoch: int, batch: pa.Table) -> pa.Table:
        """Process one micro-batch; returns the last stage's output."""
        late, evict = self.last_watermarks = self.watermarks(epoch)
        data = batch
        for s, stage in enumerate(self.stages):
            if stage.before is not None:
                data = stage.before(data)
            op = stage.op
            if self.combine and (s in self._combined or op.can_combine(data.schema)):
                if s not in self._combined:
                    self._combined[s] = op.with_combined(data.schema)
                op = self._combined[s]
                step = -(-data.num_rows // self.input_parts) or 1
                parts = [
                    stage.op.combine(data.slice(i, step), late)
                    for i in range(0, max(data.num_rows, 1), step)
                ]
                data = pa.concat_tables(parts)
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
                    late_ms=late,
                    evict_ms=evict,
                    config=self.config,
                    layout=self.layouts[s],
                )
                outs.append(res.output)
            data = pa.concat_tables(outs)
        return data
