"""The loop-cost rows of ``spark_jvm`` run fsstate's loop and PySpark's as they are today (no
Spark session): one small task per processor, flavour and loop, with its output rows checked."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from bench.harness.operator_queries import batch_table
from bench.suites.spark_jvm_loop import FLAVOURS, LOOPS, PROCESSORS, LoopRun


@pytest.mark.parametrize("loop", list(LOOPS))
@pytest.mark.parametrize("flavour", list(FLAVOURS))
@pytest.mark.parametrize("processor", list(PROCESSORS))
def test_one_task_on_each_loop_gives_the_processors_rows(
    processor: str, flavour: str, loop: str
) -> None:
    table = batch_table(3, 300, 120).sort_by("k")
    keys = int(pc.count_distinct(table.column("k")).as_py())
    run = LoopRun(processor, flavour, loop)
    run.call(table.to_batches(max_chunksize=100))()
    assert run.out_rows == (0 if processor == "idle" else keys)
