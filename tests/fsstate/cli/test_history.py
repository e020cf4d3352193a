"""``fsstate stats --history N`` (:mod:`fsstate.cli.history`): one row per version from the
manifests' summaries, and the same as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from fsstate import PartitionStore, StoreConfig
from fsstate.cli import cli


def test_stats_history_prints_each_version(tmp_path: Path) -> None:
    st = PartitionStore.open(str(tmp_path), "agg", 0, None)
    t = st.value_table("count", pa.schema([("n", pa.int64())]), pa.schema([("k", pa.int64())]))
    for v in range(3):
        for i in range(v + 2):
            t.update((i,), (v,))
        st.commit(v)
    st.close()
    old = PartitionStore.open(str(tmp_path), "agg", 0, config=StoreConfig(record_summary=False))
    old.value_table("count", pa.schema([("n", pa.int64())]), pa.schema([("k", pa.int64())]))
    old.table("count").clear((0,))  # type: ignore[attr-defined]
    old.commit(3)
    old.close()
    runner = CliRunner()
    out = runner.invoke(cli, ["--json", "stats", str(tmp_path), "--history", "3"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [d["version"] for d in doc] == [1, 2, 3]
    assert [d["summary"]["rows_total"] for d in doc[:2]] == [3, 4]
    assert doc[2]["summary"] is None  # recording off: no summary
    text = runner.invoke(cli, ["stats", str(tmp_path), "--history", "2"])
    assert text.exit_code == 0, text.output
    # at 80 columns the header "commit ms" wraps onto two lines
    assert "version history" in text.output and "commit" in text.output
