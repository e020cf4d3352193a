"""The ``fsstate`` command line on stores with branches (issue 45), local and on the S3 server:
``list`` counts them, ``branches`` lists each with its fork point, ``show`` / ``diff`` /
``stats`` read one with ``--branch`` and otherwise say on stderr that the trunk is shown,
``verify`` fails on a file only a branch needs, and ``drop-branch`` (never the trunk) then
``gc`` deletes the branch's own files and keeps every trunk file; at 80 columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fsstate.cli import cli
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from tests.support.cli import cli_options
from tests.support.engine import settle_leases
from tests.support.lineages import OPERATOR, STATE, files_of, two_lineages
from tests.support.plugin import s3_options


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, list[str], FileIO]:
    """A state root with two lineages under query ``q1``, the CLI's options, its FileIO."""
    if request.param == "local":
        uri, opts, loc = str(tmp_path / "state"), [], Location.parse(str(tmp_path / "state"))
    else:
        info = request.getfixturevalue("s3_server")
        uri = request.getfixturevalue("s3_uri")
        opts = cli_options(info)
        loc = Location.parse(uri, s3_options(info))
    return uri, opts, FileIO(loc)


def _run(args: list[str], opts: list[str], code: int = 0) -> Result:
    res = CliRunner(env={"COLUMNS": "80"}).invoke(cli, [*opts, *args], catch_exceptions=False)
    assert res.exit_code == code, (args, res.exit_code, res.output, res.stderr)
    for line in [*res.stdout.splitlines(), *res.stderr.splitlines()] if code == 0 else []:
        assert len(line) <= 80, f"fsstate {' '.join(args)}: {len(line)} columns\n{line}"
    return res


def _json(args: list[str], opts: list[str]) -> Any:
    return json.loads(_run(["--json", *args], opts).stdout)


def test_list_branches_show_diff_and_stats_read_a_branch(
    root: tuple[str, list[str], FileIO],
) -> None:
    uri, opts, fileio = root
    branch = two_lineages(fileio.child("q1"))
    (listed,) = _json(["list", uri], opts)
    assert listed["branches"] == 1
    assert "branches" in _run(["list", uri], opts).stdout
    (row,) = _json(["branches", uri], opts)
    assert row == {
        "query": "q1",
        "operator": OPERATOR,
        "branch": branch,
        "forked_from_branch": "",
        "forked_at_version": 0,
        "min_version": 0,
        "max_version": 2,
        "partitions": [0, 1],
        "operator_partitions": 2,
    }
    table = _run(["branches", uri, "--operator", OPERATOR], opts).stdout
    assert branch in table and "0 of trunk" in table and "2 of 2" in table
    # the lineage committed last (the branch), the other live one named on stderr; the trunk
    # with --branch ''
    newest = _run(["show", uri, OPERATOR, STATE], opts)
    assert "b0" in newest.stdout
    assert "other live lineages: the trunk" in " ".join(newest.stderr.split())
    trunk = _run(["show", uri, OPERATOR, STATE, "--branch", ""], opts)
    assert "a0" in trunk.stdout and "b0" not in trunk.stdout and "note:" not in trunk.stderr
    shown = _json(["show", uri, OPERATOR, STATE, "--branch", branch], opts)
    got = {(r["user"], r["count"]) for r in shown["shown"]}
    assert got == {("a0", 1), ("b0", 10), ("a1", 1), ("b1", 10)}
    on = _run(["show", uri, OPERATOR, STATE, "-b", branch, "-v", "1"], opts)
    assert f"of branch {branch}" in on.stdout and "note:" not in on.stderr
    diff = _json(["diff", uri, OPERATOR, STATE, "1", "2", "--branch", branch], opts)
    assert {(r["user"], r["change_type"]) for r in diff["shown"]} == {
        ("b0", "update"),
        ("b1", "update"),
    }
    (stats,) = _json(["stats", uri, "--branch", branch], opts)
    assert stats["versions"] == [2] and stats["partitions"] == 2
    assert "other live lineages: the trunk" in " ".join(_run(["stats", uri], opts).stderr.split())
    missing = _run(["show", uri, OPERATOR, STATE, "--branch", "nope"], opts, code=2)
    assert f"has branch 'nope' (their branches: {branch})" in missing.stderr


def test_verify_fails_on_a_file_only_a_branch_needs(root: tuple[str, list[str], FileIO]) -> None:
    uri, opts, fileio = root
    branch = two_lineages(fileio.child("q1"))
    _run(["verify", uri], opts)
    q = fileio.child("q1")
    only = sorted(files_of(q, 0, branch) - files_of(q, 0, ""))[0]
    q.publish_bytes(f"{OPERATOR}/0/{only}", b"not parquet")
    res = _run(["verify", uri], opts, code=1)
    assert "1 damaged or missing" in res.stdout
    assert f"branch {branch} versions" in res.stderr and only.split("/")[-1][:20] in res.stderr


def test_drop_branch_then_gc_keeps_the_trunk_and_deletes_the_branch_files(
    root: tuple[str, list[str], FileIO],
) -> None:
    uri, opts, fileio = root
    q = fileio.child("q1")
    branch = two_lineages(q)
    trunk = [files_of(q, p, "") for p in range(2)]
    doomed = [files_of(q, p, branch) - trunk[p] for p in range(2)]
    assert all(doomed)
    drop = ["drop-branch", uri, "--operator", OPERATOR]
    assert "never dropped" in _run([*drop, "--branch", "", "--yes"], opts, code=2).stderr
    _run([*drop, "--branch", "nope", "--yes"], opts, code=2)
    _run([*drop, "--branch", branch, "--force"], opts, code=1)  # not confirmed: nothing dropped
    assert _json(["list", uri], opts)[0]["branches"] == 1
    # a live lineage: refused, saying what breaks, unless --force
    refused = _run([*drop, "--branch", branch, "--yes"], opts, code=1)
    assert "is a live lineage" in " ".join(refused.stderr.split())
    assert _json(["list", uri], opts)[0]["branches"] == 1
    done = _run([*drop, "--branch", branch, "--yes", "--force"], opts)
    assert "6 manifest(s) in 2 partition(s)" in " ".join(done.stdout.split())
    settle_leases()  # the writer of the lineages (this process) holds no pending file
    _run(["gc", uri, "--grace-ms", "0"], opts)
    for p in range(2):
        have = {e.path.split("/", 2)[2] for e in q.list(f"{OPERATOR}/{p}/data")}
        assert trunk[p] <= have and not doomed[p] & have
    assert _json(["list", uri], opts)[0]["branches"] == 0
    assert "no branches" in _run(["branches", uri], opts).stderr
    _run(["verify", uri], opts)
    assert "note:" not in _run(["show", uri, OPERATOR, STATE], opts).stderr
