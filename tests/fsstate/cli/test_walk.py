"""The ``fsstate`` command line as an operator following docs/operations.md and docs/cli.md
meets it (issue 66): ``--json`` and ``-o`` after the command name, as the docs write them; ``-o``
with a local path refused as ``tiered()`` refuses object store settings there; a negative
``--history`` or ``--limit`` and a repeated ``--partition`` refused; a misspelled operator
answered with the nearest name, in every command taking one. Each refusal is one line on
stderr, ``Error: ConfigError: ...``, exit code 2, and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import Result

from fsstate import PartitionStore
from fsstate.cli import cli
from tests.support.cli import refused, run

KEY = pa.schema([("k", pa.string())])
VAL = pa.schema([("n", pa.int64())])
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Operators ``count`` and ``sum``, 2 partitions each, versions 0..2 of a value table."""
    root = str(tmp_path_factory.mktemp("walk") / "state")
    for op in ("count", "sum"):
        for p in range(2):
            store = PartitionStore.open(root, op, p, None)
            table = store.value_table("total", VAL, KEY)
            for v in range(3):
                table.update((f"k{p}",), (v,))
                store.commit(v)
            store.close()
    return root


def _run(*args: str, code: int = 0) -> Result:
    return run(cli, *args, code=code)


def _refused(*args: str) -> str:
    return refused(cli, *args)


def _files(root: str) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in Path(root).rglob("*")}


@pytest.mark.parametrize(
    "args",
    [
        ["list", "{root}"],
        ["stats", "{root}", "--live-rows"],
        ["stats", "{root}", "--history", "2"],
        ["show", "{root}", "count", "total", "-n", "-1"],
        ["diff", "{root}", "count", "total", "0", "2"],
        ["verify", "{root}"],
        ["branches", "{root}"],
    ],
    ids=lambda args: args[0],
)
def test_json_after_the_command_is_the_json_before_it(state: str, args: list[str]) -> None:
    """``fsstate verify ROOT --json`` (as docs/cli.md writes it) prints the document that
    ``fsstate --json verify ROOT`` prints; it was 'No such option: --json'."""
    args = [a.format(root=state) for a in args]
    before = json.loads(_run("--json", *args).stdout)
    assert json.loads(_run(*args, "--json").stdout) == before
    assert json.loads(_run(args[0], "--json", *args[1:]).stdout) == before


def test_options_after_the_command_merge_with_those_before_it(state: str) -> None:
    """``-o`` after the command name is taken as before it: a bad one is refused the same way,
    from either place, and both places' settings reach the command."""
    for args in (["-o", "endpoint", "list", state], ["list", state, "-o", "endpoint"]):
        line = _refused(*args)
        assert "-o 'endpoint': write name=value" in line, line
    line = _refused("-o", "region=eu-west-1", "list", state, "-o", "retries_max=2")
    assert "object store settings (region, retries_max; from -o)" in line, line


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_object_store_settings_with_a_local_path_are_refused(state: str, after: bool) -> None:
    """``-o`` with a local path was ignored silently; it is refused with ``tiered()``'s words
    for object store settings with a local ``state_uri``."""
    opts = ["-o", "region=eu-west-1"]
    args = ["list", state, *opts] if after else [*opts, "list", state]
    line = _refused(*args)
    assert (
        f"object store settings (region; from -o) were given, but {state!r} is a local path "
        "where they cannot apply: remove them, or give an object store URI" in line
    ), line


def test_settings_for_a_checkpoint_on_an_object_store_are_not_refused(
    state: str, tmp_path: Path
) -> None:
    """``verify ROOT --checkpoint s3://...`` with ``-o``: the settings apply to the checkpoint,
    so the local ROOT does not refuse them (the unreachable store fails afterwards)."""
    res = _run(
        "verify", state, "--checkpoint", "s3://bucket/ckpt", "-o", "endpoint=http://127.0.0.1:1",
        "-o", "retries_max=0", code=2,
    )  # fmt: skip
    assert "cannot apply" not in res.stderr and "StorageError" in res.stderr, res.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["stats", "{root}", "--history", "-2"], "--history -2: give a number of versions >= 1"),
        (["stats", "{root}", "--history", "0"], "--history 0: give a number of versions >= 1"),
        (
            ["show", "{root}", "count", "total", "-n", "-5"],
            "-n/--limit -5: give a number of rows >= 0, or -1 for all",
        ),
        (["diff", "{root}", "count", "total", "0", "1", "-n", "-2"], "-n/--limit -2"),
        (
            ["show", "{root}", "count", "total", "-p", "0", "-p", "1"],
            "-p/--partition is given 2 times: give it once",
        ),
        (["compact", "{root}", "--partition", "0", "-p", "1"], "-p/--partition is given 2 times"),
        (["list", "{root}", "--operator", "count", "--operator", "sum"], "--operator is given 2"),
        (["gc", "{root}", "--retain", "0"], "--retain 0: give a number of versions >= 1"),
        (["gc", "{root}", "--grace-ms", "-1"], "--grace-ms -1: give a number of milliseconds"),
    ],
    ids=["history-2", "history0", "limit-5", "diff-limit", "two-p", "compact-two-p", "two-ops",
         "retain0", "grace-1"],
)  # fmt: skip
def test_bad_numbers_and_repeated_options_are_refused(
    state: str, args: list[str], words: str
) -> None:
    """``stats --history -2`` printed nothing, ``show -n -5`` every row, and a repeated ``-p``
    read the last partition given: each is refused before anything is read or written."""
    before = _files(state)
    assert words in _refused(*[a.format(root=state) for a in args])
    assert _files(state) == before


@pytest.mark.parametrize(
    "args",
    [
        ["list", "{root}", "--operator", "cuont"],
        ["stats", "{root}", "--operator", "cuont"],
        ["show", "{root}", "cuont", "total"],
        ["diff", "{root}", "cuont", "total", "0", "1"],
        ["verify", "{root}", "--operator", "cuont"],
        ["gc", "{root}", "--operator", "cuont"],
        ["compact", "{root}", "--operator", "cuont"],
        ["branches", "{root}", "--operator", "cuont"],
        ["drop-branch", "{root}", "--operator", "cuont", "--branch", "v1-0123456789ab", "--yes"],
    ],
    ids=lambda args: args[0],
)
def test_a_misspelled_operator_gets_the_nearest_name(state: str, args: list[str]) -> None:
    """Every command taking an operator answers ``cuont`` with ``did you mean 'count'?`` and
    the operators there (it said 'no committed state ... matching operator='cuont'')."""
    line = _refused(*[a.format(root=state) for a in args])
    assert f"no operator 'cuont' under {state}; did you mean 'count'?" in line, line
    assert "operators there: 'count', 'sum'" in line, line


def test_an_operator_far_from_every_name_gets_the_names_only(state: str) -> None:
    line = _refused("list", state, "--operator", "zzz")
    assert "did you mean" not in line and "operators there: 'count', 'sum'" in line, line


def test_a_misspelled_operator_with_a_checkpoint_is_refused_too(state: str, tmp_path: Path) -> None:
    """``verify --checkpoint`` reads the query's stores another way; a misspelled operator
    there passed as 'checked 0 stores'."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "commits").mkdir(parents=True)
    (ckpt / "offsets").mkdir()
    (ckpt / "metadata").write_text('{"id": "q-1"}\n')
    root = tmp_path / "state"
    store = PartitionStore.open(str(root / "q-1"), "count", 0, None)
    store.value_table("total", VAL, KEY).update(("k",), (1,))
    store.commit(0)
    store.close()
    (ckpt / "offsets" / "0").write_text('v1\n{"conf": {}}\n{}\n')
    (ckpt / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    line = _refused("verify", str(root), "--checkpoint", str(ckpt), "--operator", "cuont")
    assert "no operator 'cuont'" in line and "did you mean 'count'?" in line, line


def test_the_real_command_takes_json_after_the_command(state: str) -> None:
    """As a process, the way docs/cli.md shows it."""
    res = subprocess.run(
        [sys.executable, "-m", "fsstate", "verify", state, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ok"] is True
