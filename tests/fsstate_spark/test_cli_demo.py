"""The command line on the demo's state: ``make demo``'s query (SessionTracker under
``tiered()``, value, list and map state with TTL) runs into a temporary directory, then
``list``, ``stats``, ``show``, ``diff`` and ``verify`` are checked against the demo's input
(counted independently here), through click's test runner."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf
from examples.demo import make_clicks, run_demo_query
from fsstate.cli import cli
from fsstate_spark import state_summary

pytestmark = pytest.mark.compat_full  # make test-compat-full runs it on every matrix entry


def _cli(*args: str, code: int = 0) -> Any:
    res = CliRunner().invoke(cli, ["--json", *args], catch_exceptions=False)
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    return json.loads(res.stdout)


def test_cli_reads_the_demo_state(spark: SparkSession, tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    # the demo's query turns no-data micro-batches off in its session: only for this test
    with session_conf(spark, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        done, _ = run_demo_query(spark, tmp_path / "demo", state)
    assert len(done) == 4
    clicks = make_clicks()

    [op] = _cli("list", state)
    assert op["operator"] == "sessions" and op["query"]  # under the query id
    first, last = op["min_version"], op["max_version"]
    assert last - first + 1 == op["retained_versions"] >= 4
    # the demo's summary reads the lineage the run wrote (each run writes its own)
    summary = state_summary(state)
    assert sorted(p for _, _, p in summary.stores) == [0, 1]
    assert all(s.version == last for s in summary.stores.values())
    assert set(summary.rows_by_table()) == {"session", "pages", "recent"}

    # every user's session, pages and recent list equal what the input says
    events = Counter(c["user"] for b in clicks for c in b)
    visits = Counter((c["user"], c["page"]) for b in clicks for c in b)
    got = _cli("show", state, "sessions", "session", "-n", "-1")
    assert got["rows"] == len(events)
    key = next(k for k in got["shown"][0] if got["shown"][0][k] in events)
    by_user = {r[key]: r for r in got["shown"]}
    for user, n in events.items():
        ms = [c["ms"] for b in clicks for c in b if c["user"] == user]
        assert (by_user[user]["events"], by_user[user]["start_ms"]) == (n, min(ms)), user
        assert by_user[user]["last_ms"] == max(ms)
    pages = _cli("show", state, "sessions", "pages", "-n", "-1")["shown"]
    assert {(r[key], r["page"]): r["visits"] for r in pages} == dict(visits)
    recent = _cli("show", state, "sessions", "recent", "-n", "-1")
    assert recent["rows"] == sum(min(3, n) for n in events.values())

    stats = {d["state"]: d for d in _cli("stats", state, "--live-rows")}
    assert stats["session"]["live_rows"] == len(events)
    assert stats["pages"]["live_rows"] == len(visits)
    assert {stats[s]["kind"] for s in ("session", "recent", "pages")} == {"value", "list", "map"}

    # the last batch updated exactly the users it had clicks of
    changed = _cli("diff", state, "sessions", "session", str(last - 1), str(last), "-n", "-1")
    assert {r["change_type"] for r in changed["shown"]} == {"update"}
    assert {r[key] for r in changed["shown"]} == {c["user"] for c in clicks[-1]}

    assert _cli("verify", state)["ok"]
