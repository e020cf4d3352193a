"""Batch processors used by the Spark tests (imported by Spark's Python workers)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from fsstate.operators import BatchProcessor, Epoch
from fsstate.store.partition import PartitionStore

KEY = pa.schema([pa.field("k", pa.string())])
STATS = pa.schema([pa.field("n", pa.int64()), pa.field("total", pa.int64())])
OUT = pa.schema(
    [pa.field("k", pa.string()), pa.field("n", pa.int64()), pa.field("total", pa.int64())]
)


class RunningStats(BatchProcessor):
    """Per key: rows added and their sum, in a value table. Rows with ``op == "reset"`` clear
    their key's state first (within a batch, resets apply before adds); every key with an
    ``add`` row in the batch is emitted with its new figures."""

    def __init__(self) -> None:
        super().__init__("running_stats")

    def setup(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        self.stats = store.value_table("stats", STATS, key_schema=KEY)

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return OUT

    def handle(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        resets = batch.filter(pc.equal(batch["op"], "reset")).group_by("k").aggregate([])
        if resets.num_rows:
            self.stats.delete_many(resets.select(["k"]))
        adds = batch.filter(pc.equal(batch["op"], "add"))
        agg = adds.group_by("k").aggregate([("v", "count"), ("v", "sum")])
        if not agg.num_rows:
            return OUT.empty_table()
        keys = agg.select(["k"])
        old = self.stats.get_many(keys)
        n = pc.add(agg["v_count"], pc.fill_null(old["n"], 0))
        total = pc.add(pc.fill_null(agg["v_sum"], 0), pc.fill_null(old["total"], 0))
        self.stats.put_many(keys, pa.table({"n": n, "total": total}, schema=STATS))
        return pa.table({"k": agg["k"], "n": n, "total": total}, schema=OUT)
