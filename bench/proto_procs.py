from __future__ import annotations
import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
class NoState(StatefulProcessor):
    def init(self, handle): pass
    def handleInputRows(self, key, rows, timerValues):
        n = 0
        for pdf in rows: n += len(pdf)
        yield pd.DataFrame({"k": [key[0]], "n": [n]})
    def close(self): pass
class Count(StatefulProcessor):
    def init(self, handle): self.c = handle.getValueState("c", "c BIGINT")
    def handleInputRows(self, key, rows, timerValues):
        n = 0
        for pdf in rows: n += len(pdf)
        old = self.c.get(); n += old[0] if old else 0
        self.c.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})
    def close(self): pass
