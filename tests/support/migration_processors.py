"""A processor moved from Spark's state to fsstate (tests/fsstate_spark/test_migration.py).

``Basket`` keeps, per key ``k``: ``total`` (value: sum of ``v``), ``recent`` (list: the last
three items, oldest first) and ``counts`` (map: item -> times seen). A row with ``v < 0``
clears the key's state (deletes; later rows put it back). ``handleInitialState`` rebuilds the
three variables from the rows Spark's state reader returns for a key, one row per variable
entry (``var`` says which): several rows per key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

INPUT_SCHEMA = "k STRING, item STRING, v BIGINT"
OUTPUT_SCHEMA = "k STRING, total BIGINT, recent STRING, counts STRING"
# the initial state rows: one per value, per list and per map entry
INIT_SCHEMA = "k STRING, var STRING, total BIGINT, recent ARRAY<STRING>, item STRING, n BIGINT"


class Basket(StatefulProcessor):
    """Value, list and map state per key, with clears and re-puts."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.getValueState("total", "total BIGINT")
        self.recent = handle.getListState("recent", "item STRING")
        self.counts = handle.getMapState("counts", "item STRING", "n BIGINT")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:
        for row in initialState.itertuples(index=False):
            if row.var == "total":
                self.total.update((int(row.total),))
            elif row.var == "recent":
                self.recent.put([(str(i),) for i in row.recent])
            elif row.var == "counts":
                self.counts.updateValue((str(row.item),), (int(row.n),))
            else:
                raise ValueError(f"unknown state variable {row.var!r} in the initial state")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        df = pd.concat(list(rows)).sort_values(["item", "v"], kind="stable")
        for item, v in zip(df["item"], df["v"], strict=True):
            if v < 0:
                self.total.clear()
                self.recent.clear()
                self.counts.clear()
                continue
            old = self.total.get()
            self.total.update(((old[0] if old else 0) + int(v),))
            recent = [r[0] for r in self.recent.get()] + [str(item)]
            self.recent.put([(r,) for r in recent[-3:]])
            seen = self.counts.getValue((str(item),))
            self.counts.updateValue((str(item),), ((seen[0] if seen else 0) + 1,))
        total = self.total.get()
        counts = sorted((k[0], v[0]) for k, v in self.counts.iterator())
        yield pd.DataFrame(
            {
                "k": [key[0]],
                "total": [total[0] if total else None],
                "recent": [">".join(r[0] for r in self.recent.get())],
                "counts": [",".join(f"{i}={n}" for i, n in counts)],
            }
        )

    def close(self) -> None:
        pass
