"""User logic over whole batches: the vectorized counterpart of a StatefulProcessor.

Subclass :class:`BatchProcessor`: declare state tables in :meth:`BatchProcessor.setup` (value,
list and map tables of the partition's store, with their batched calls: ``get_many``,
``put_many``, ``delete_many``, ``append_many``, ``scan``, ``scan_prefixes``, ``entries``,
``delete_range``; and :class:`fsstate.operators.expiry.DeadlineIndex` for event-time expiry) and
handle one partition's batch per epoch in :meth:`BatchProcessor.handle`, returning Arrow rows.

Invariants (the runner's, :mod:`fsstate.operators.runner`): the batch holds the partition's
rows of the epoch in canonical order; the state the tables show is the epoch's parent version;
everything written is committed as the epoch, once; so ``handle`` must be deterministic (a
function of the state and the batch, no clock, no randomness) for retries and re-runs to be
exactly-once. ``epoch.late_ms`` / ``epoch.evict_ms`` are the watermarks (0 without one).
"""

from __future__ import annotations

from abc import abstractmethod

import pyarrow as pa

from fsstate.operators.base import Epoch, Operator, time_us
from fsstate.store.partition import PartitionStore


class BatchProcessor(Operator):
    """Base class of user operators over whole batches (see the module docstring).

    Args:
        name: the operator's state name.
        time: the event-time column the watermark follows (None: no watermark input).
    """

    def __init__(self, name: str, *, time: str | None = None) -> None:
        super().__init__(name)
        self.time = time

    @abstractmethod
    def setup(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        """Declare the state tables (called before every epoch; declaring is idempotent)."""

    @abstractmethod
    def handle(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        """Process the partition's batch of the epoch; return output rows."""

    @abstractmethod
    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The output schema for input of ``input_schema``."""

    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        self.setup(store, input_schema)

    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        return self.handle(batch, epoch)

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        if self.time is None:
            return {}
        return {"input": time_us(batch.column(self.time), self.name, self.time)}
