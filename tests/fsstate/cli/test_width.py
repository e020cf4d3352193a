"""The ``fsstate`` command's tables on an 80-column terminal (issue 45): on real stores laid out
as tiered queries leave them (``<root>/<query id>/<operator>/<partition>``), no line of any
command's output is wider than ``COLUMNS``; a query id that every row shares is a heading line,
whole; ids of several queries are shortened to a unique prefix that ``--query`` selects; state
and operator names stay whole (wrapped, never cut); a table that cannot fit prints one block
per row."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from fsstate import PartitionStore, StoreConfig
from fsstate.cli import cli
from fsstate.cli.console import rich_table

KEY = pa.schema([("word", pa.string())])
COUNT = pa.schema([("count", pa.int64())])
EVENT = pa.schema([("payload", pa.string())])
LONG_STATE = "recent_events_of_this_user_session"
OPERATORS = ("RunningCount", "SessionWindowAggregateOperator")


def _query(root: Path, operators: tuple[str, ...] = OPERATORS) -> str:
    """A tiered query's state under ``root``: its id, versions 0..2 of each operator."""
    query = str(uuid.uuid4())
    for op in operators:
        for p in range(2):
            s = PartitionStore.open(str(root / query), op, p, config=StoreConfig(retain_versions=5))
            counts = s.value_table("count", COUNT, KEY)
            events = s.list_table(LONG_STATE, EVENT, KEY, ttl_ms=3_600_000)
            for version in range(3):
                s.set_time(1_000 * (version + 1))
                for i in range(3):
                    word = (f"word-{p}-{i}-with-a-rather-long-key-text",)
                    counts.update(word, (version * 10 + i,))
                    events.append(word, ("payload " * 8 + str(version),))
                s.commit(version)
            s.close()
    return query


def _run(args: list[str], columns: int = 80) -> Result:
    res = CliRunner(env={"COLUMNS": str(columns)}).invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, (args, res.output, res.stderr)
    for line in [*res.stdout.splitlines(), *res.stderr.splitlines()]:
        assert len(line) <= columns, f"fsstate {' '.join(args)}: {len(line)} columns\n{line}"
    return res


def _commands(root: str, operator: str) -> list[list[str]]:
    return [
        ["list", root],
        ["stats", root, "--live-rows"],
        ["show", root, operator, LONG_STATE, "--expiry"],
        ["diff", root, operator, "count", "0", "2"],
        ["verify", root],
        ["branches", root],
        ["gc", root],
        ["compact", root, "--operator", operator],
    ]


def test_one_query_fits_80_columns_with_its_id_whole_above_the_table(tmp_path: Path) -> None:
    root = tmp_path / "state"
    query = _query(root)
    for args in _commands(str(root), OPERATORS[0]):
        out = _run(args).stdout
        if args[0] in ("list", "stats", "gc", "compact"):
            assert f"query: {query}" in out.splitlines(), out
    one_op = tmp_path / "one"
    _query(one_op, OPERATORS[:1])
    stats = _run(["stats", str(one_op)]).stdout
    assert f"operator: {OPERATORS[0]}" in stats.splitlines()  # a heading too
    assert "count" in stats and "─" in stats, stats  # still a table, not one block per row


def test_several_queries_show_unique_prefixes_that_select_them(tmp_path: Path) -> None:
    root = tmp_path / "state"
    queries = sorted(_query(root) for _ in range(3))
    for args in _commands(str(root), OPERATORS[1]):
        if args[0] not in ("show", "diff"):  # those need --query with several queries
            _run(args)
    listed = _run(["list", str(root)]).stdout
    for query in queries:
        [shown] = {w for w in listed.split() if w.startswith(query[:8])}
        assert "…" in shown and len(shown) < len(query), listed  # shortened, to fit
        for pick in (shown, shown.split("…")[0]):  # as shown, or just its prefix
            got = json.loads(_run(["--json", "list", str(root), "-q", pick]).stdout)
            assert {d["query"] for d in got} == {query}
        _run(["show", str(root), OPERATORS[1], LONG_STATE, "-q", shown])
    for columns in (40, 60):  # narrower still: one block per row where no table fits
        for args in _commands(str(root), OPERATORS[1])[:2]:
            _run(args, columns)


@pytest.mark.parametrize("width", [30, 50, 80, 120, 200])
def test_a_table_never_exceeds_its_width_and_never_cuts_a_cell(width: int) -> None:
    title = "a title that is rather long " * 3
    columns = ["query", "operator", "n", "note"]
    rows = [
        [str(uuid.UUID(int=i << 100)), f"operator_{i}_" * 3, i * 1000, "free text " * (i + 1)]
        for i in range(1, 4)
    ]
    console = Console(width=width)
    with console.capture() as out:
        console.print(rich_table(title, columns, rows, heading=(), ids=()))
    lines = out.get().splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    shown = Counter("".join(lines).replace(" ", ""))
    wanted = Counter(
        "".join([title, *columns, *(str(c) for r in rows for c in r)]).replace(" ", "")
    )
    assert not wanted - shown, f"characters cut: {wanted - shown}"
