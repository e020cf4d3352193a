"""The ``fsstate`` command line on real stores, local and on the S3 server, through click's test
runner: list, stats, show and diff agree with :mod:`fsstate.inspect`; verify exits 0 on a clean
store and 1 naming each truncated, bit-flipped or missing file and each damaged manifest; gc
deletes only old orphans; compact keeps every row and refuses a streaming writer's store; every
failure of the command (run as a process too) is one line on stderr with exit code 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import Result

from fsstate import PartitionStore, StoreConfig, read_table
from fsstate.cli import cli
from fsstate.inspect import diff_tables
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import read_manifest
from fsstate.store.epoch import resolve_layout
from fsstate.store.identity import WRITER_META, store_dir_for
from tests.support.cli import cli_options, run
from tests.support.engine import settle_leases

pytestmark = pytest.mark.compat_full  # make test-compat-full runs it on every matrix entry

KEY = pa.schema([("k", pa.string())])
VAL = pa.schema([("n", pa.int64())])
UK = pa.schema([("u", pa.string())])


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, list[str]]:
    """A state root and the CLI's storage options for it."""
    if request.param == "local":
        return str(tmp_path / "state"), []
    info = request.getfixturevalue("s3_server")
    uri = request.getfixturevalue("s3_uri")
    return uri, cli_options(info)


def _fileio(uri: str, opts: list[str]) -> FileIO:
    pairs = dict(o.split("=", 1) for o in opts[1::2])
    return FileIO(Location.parse(uri, pairs))


def _history(fileio: FileIO, partitions: int = 2, meta: dict[str, Any] | None = None) -> None:
    """Versions 0..3 of operator 'agg' with value, list (TTL) and map state per partition."""
    for p in range(partitions):
        s = PartitionStore.open(fileio, "agg", p, config=StoreConfig(retain_versions=10))
        if meta:
            s.meta.update(meta)
        v = s.value_table("total", VAL, KEY)
        lst = s.list_table("events", VAL, KEY, ttl_ms=5_000)
        m = s.map_table("by_user", UK, VAL, KEY)
        for version in range(4):
            s.set_time(1_000 * (version + 1))
            for i in range(6):
                k = (f"k{p}{i}",)
                v.update(k, (version * 10 + i,))
                lst.append(k, (version,))
                m.update(k, (f"u{version % 2}",), (i,))
            if version == 2:
                v.clear((f"k{p}0",))
                m.remove((f"k{p}1",), ("u0",))
            s.commit(version)
        s.close()


def _run(args: list[str], opts: list[str], code: int = 0) -> Result:
    return run(cli, *opts, *args, code=code)


def _json(args: list[str], opts: list[str]) -> Any:
    return json.loads(_run(["--json", *args], opts).stdout)


def test_list_stats_show_and_diff_agree_with_the_readers(root: tuple[str, list[str]]) -> None:
    uri, opts = root
    fileio = _fileio(uri, opts)
    _history(fileio)
    [op] = _json(["list", uri], opts)
    assert op["operator"] == "agg" and op["partitions"] == [0, 1]
    assert (op["min_version"], op["max_version"], op["retained_versions"]) == (0, 3, 4)

    stats = {d["state"]: d for d in _json(["stats", uri, "--live-rows"], opts)}
    assert sorted(stats) == ["by_user", "events", "total"]
    assert stats["events"]["kind"] == "list" and stats["events"]["ttl_ms"] == 5_000
    assert stats["total"]["live_rows"] == 12  # 6 keys per partition (k0 re-put after its clear)
    assert stats["events"]["live_rows"] == 48
    assert all(d["versions"] == [3] and d["partitions"] == 2 for d in stats.values())
    assert stats["total"]["stored_rows"] >= stats["total"]["live_rows"]

    for version in (1, 3):
        got = _json(["show", uri, "agg", "by_user", "-v", str(version), "-n", "-1"], opts)
        want = [
            {**r, "partition_id": p}
            for p in (0, 1)
            for r in read_table(fileio, "agg", p, "by_user", version).to_pylist()
        ]
        assert got["rows"] == len(want) and got["shown"] == want

    got = _json(["diff", uri, "agg", "total", "1", "2", "-p", "1", "-n", "-1"], opts)
    spec_store = PartitionStore.open(fileio, "agg", 1, 3)
    spec = spec_store.table("total").spec
    spec_store.close()
    want = diff_tables(
        spec, read_table(fileio, "agg", 1, "total", 1), read_table(fileio, "agg", 1, "total", 2)
    )
    assert got["shown"] == [{**r, "partition_id": 1} for r in want.to_pylist()]
    assert {"change_type": "delete", "k": "k10", "n": None, "partition_id": 1} in got["shown"]
    assert sum(r["change_type"] == "update" for r in got["shown"]) == 5

    # tables print too (the runner's terminal is not one: no progress bar, plain table)
    out = _run(["show", uri, "agg", "total"], opts).stdout
    assert "k01" in out and "partition_id" in out
    assert "delete" in _run(["diff", uri, "agg", "total", "1", "2"], opts).stdout


def _data_files(fileio: FileIO, partition: int) -> list[str]:
    return sorted(
        f.path
        for f in fileio.list(f"{store_dir_for('agg', partition)}/data")
        if "-ttl-" not in f.path
    )


def test_verify_names_each_damaged_file_and_manifest(root: tuple[str, list[str]]) -> None:
    uri, opts = root
    fileio = _fileio(uri, opts)
    _history(fileio)
    res = _run(["verify", uri], opts)
    assert "all intact" in res.stdout
    clean = _json(["verify", uri], opts)
    assert clean["ok"] and clean["stores"] == 2 and clean["versions"] == 8 and clean["files"] > 8

    f0, f1 = _data_files(fileio, 0)[:2]
    truncated = fileio.read_bytes(f0)
    fileio.publish_bytes(f0, truncated[: len(truncated) // 2])
    flipped = bytearray(fileio.read_bytes(f1))
    flipped[len(flipped) // 3] ^= 0x10
    fileio.publish_bytes(f1, bytes(flipped))
    manifest = f"{store_dir_for('agg', 1)}/manifests/{3:020d}.json"
    text = fileio.read_bytes(manifest)
    fileio.publish_bytes(manifest, text.replace(b'"version"', b'"versiom"'))
    # a file version 0 references (versions 0..2 of partition 1 keep intact manifests)
    d1 = store_dir_for("agg", 1)
    missing = f"{d1}/" + sorted(read_manifest(fileio, d1, 0).files())[0]
    fileio.delete(missing)

    res = _run(["verify", uri], opts, code=1)
    for bad in (f0, f1, manifest, missing):
        assert fileio.describe(bad) in res.stderr, (bad, res.stderr)
    assert "DAMAGED" in res.stderr
    report = json.loads(_run(["--json", "verify", uri], opts, code=1).stdout)
    assert not report["ok"]
    assert {fileio.describe(p) for p in (f0, f1, manifest, missing)} <= {
        p["path"] for p in report["problems"]
    }
    # --latest-only skips what only older versions reference, never the newest manifest
    latest = json.loads(_run(["--json", "verify", uri, "--latest-only"], opts, code=1).stdout)
    assert fileio.describe(manifest) in {p["path"] for p in latest["problems"]}


def test_a_partition_behind_is_seen_by_verify_list_and_show(root: tuple[str, list[str]]) -> None:
    """One partition's newest manifest deleted: verify names the partition and exits 1, list
    shows the disagreement, show and diff never mix versions (one line naming the partition
    and the version to pass); at that version every command reads one version again."""
    uri, opts = root
    fileio = _fileio(uri, opts)
    _history(fileio, partitions=3)
    assert _json(["verify", uri], opts)["ok"]
    fileio.delete(f"{store_dir_for('agg', 1)}/manifests/{3:020d}.json")

    res = _run(["verify", uri], opts, code=1)
    assert (
        "SKEWED operator 'agg': most partitions are at version 3; partition 1 is behind at 2"
        in _said(res.stderr)
    )
    assert "all intact" not in res.stdout
    report = json.loads(_run(["--json", "verify", uri], opts, code=1).stdout)
    assert not report["ok"] and report["problems"] == []  # every file is intact
    [skew] = report["skews"]
    assert (skew["operator"], skew["latest_version"], skew["common_version"]) == ("agg", 3, 2)
    assert skew["behind"] == {"1": 2} and skew["ahead"] == {}

    [op] = _json(["list", uri], opts)
    assert not op["partitions_agree"] and op["behind"] == {"1": 2}
    assert op["latest_version"] == 3 and op["latest_by_partition"] == {"0": 3, "1": 2, "2": 3}
    listed = _run(["list", uri], opts)
    assert "3 (p1 behind at 2)" in listed.stdout
    assert "PARTITIONS DISAGREE" in listed.stderr and "partition 1 is behind at 2" in listed.stderr

    for args in (["show", uri, "agg", "total"], ["show", uri, "agg", "total", "-v", "3"]):
        res = _run(args, opts, code=2)
        assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "partition 1" in res.stderr and "--version 2" in res.stderr
    res = _run(["diff", uri, "agg", "total", "2", "3"], opts, code=2)
    assert "version 3 of operator 'agg' is missing in 1 of 3 partitions" in res.stderr
    # at the version every partition has, show reads that version only
    got = _json(["show", uri, "agg", "total", "-v", "2", "-n", "-1"], opts)
    want = [
        {**r, "partition_id": p}
        for p in range(3)
        for r in read_table(fileio, "agg", p, "total", 2).to_pylist()
    ]
    assert got["shown"] == want
    # the partition shown alone is no mix
    assert _json(["show", uri, "agg", "total", "-p", "0", "-n", "-1"], opts)["rows"] == 6


def test_a_partition_without_any_version_is_named(root: tuple[str, list[str]]) -> None:
    """Every manifest of one partition deleted (its data files left), and, where the
    operator's partition count is recorded, a partition directory deleted whole: verify names
    each partition and its directory and exits 1; the others' files are all intact."""
    uri, opts = root
    fileio = _fileio(uri, opts)
    _history(fileio, partitions=4)
    for entry in fileio.list(f"{store_dir_for('agg', 3)}/manifests"):
        fileio.delete(entry.path)
    res = _run(["verify", uri], opts, code=1)
    lost = fileio.describe(store_dir_for("agg", 3))
    assert f"MISSING operator 'agg': partition 3 has no version; {lost} holds" in _said(res.stderr)
    said = " ".join(res.stdout.split())  # the verdict wraps at the terminal's width
    assert "no version" in said and "all intact" not in said
    report = json.loads(_run(["--json", "verify", uri], opts, code=1).stdout)
    [missing] = report["missing_partitions"]
    assert (missing["partition"], missing["path"], missing["partitions"]) == (3, lost, None)
    assert missing["data_files"] > 0 and report["problems"] == [] and report["skews"] == []

    # with the partition count recorded (as tiered() and the operator runner record it), a
    # partition whose directory is gone too
    resolve_layout(fileio, "agg", partitions=4, kind="test")
    for entry in fileio.list(store_dir_for("agg", 2), recursive=True):
        fileio.delete(entry.path)
    report = json.loads(_run(["--json", "verify", uri], opts, code=1).stdout)
    got = {m["partition"]: (m["data_files"], m["partitions"]) for m in report["missing_partitions"]}
    assert got[2] == (0, 4) and got[3][1] == 4 and got[3][0] > 0
    res = _run(["verify", uri, "--latest-only"], opts, code=1)
    assert "partition 2 of 4 has no version" in _said(res.stderr)
    assert "does not exist" in _said(res.stderr)


def test_a_deleted_middle_file_is_named_with_the_versions_that_need_it(tmp_path: Path) -> None:
    """A data file in the middle of a table's runs (neither its newest nor its oldest) deleted:
    verify names it and every version that references it, --latest-only too."""
    uri = str(tmp_path / "state")
    fileio = _fileio(uri, [])
    _history(fileio, partitions=1)
    d0 = store_dir_for("agg", 0)
    runs = read_manifest(fileio, d0, 3).tables["total"].runs
    assert len(runs) >= 3
    middle = f"{d0}/{runs[len(runs) // 2].path}"
    fileio.delete(middle)
    report = json.loads(_run(["--json", "verify", uri], [], code=1).stdout)
    [problem] = report["problems"]
    users = [
        v
        for v in range(4)
        if runs[len(runs) // 2] in read_manifest(fileio, d0, v).tables["total"].runs
    ]
    assert problem["path"] == fileio.describe(middle) and problem["versions"] == users
    assert "is missing" in problem["error"] and 3 in users
    res = _run(["verify", uri, "--latest-only"], [], code=1)
    assert f"DAMAGED {fileio.describe(middle)} (versions 3)" in _said(res.stderr)


def test_a_partition_ahead_is_named_too(tmp_path: Path) -> None:
    """A batch that reached one partition only (a failed or running batch) shows as a
    partition ahead of the others."""
    uri = str(tmp_path / "state")
    fileio = _fileio(uri, [])
    _history(fileio, partitions=3)
    s = PartitionStore.open(fileio, "agg", 2)  # the newest: 3
    s.value_table("total", VAL, KEY).update(("late",), (1,))
    s.commit(4)
    s.close()
    res = _run(["verify", uri], [], code=1)
    assert "most partitions are at version 3; partition 2 is ahead at 4" in _said(res.stderr)
    res = _run(["show", uri, "agg", "total"], [], code=2)
    assert "partition 2 is ahead at 4" in res.stderr and "--version 3" in res.stderr


def test_gc_deletes_old_orphans_only_and_retain_drops_versions(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    fileio = FileIO(uri)
    _history(fileio, partitions=1)
    data = tmp_path / "state" / store_dir_for("agg", 0) / "data"
    # files of a writer gone (no lease of its tag), one old and one young
    old = data / "total~_~4~0123456789g1~aaaaaaaaaaaa.parquet"
    young = data / "total~_~4~0123456789g1~bbbbbbbbbbbb.parquet"
    old.write_bytes(b"left by a failed attempt")
    young.write_bytes(b"a commit under way")
    past = time.time() - 3600
    os.utime(old, (past, past))
    before = read_table(fileio, "agg", 0, "events").to_pylist()
    settle_leases()  # the history's writer (this process) holds no pending file

    dry = _json(["gc", uri, "--dry-run"], [])
    assert dry["dry_run"] and dry["stores"][0]["files_deleted"] == 1 and old.exists()
    [row] = _json(["gc", uri], [])["stores"]
    assert row["files_deleted"] == 1 and row["versions_dropped"] == 0
    assert not old.exists() and young.exists()
    [row] = _json(["gc", uri, "--grace-ms", "0", "--retain", "2"], [])["stores"]
    assert row["versions_dropped"] == 2 and not young.exists()
    assert PartitionStore.committed_versions(uri, "agg", 0) == [2, 3]
    assert read_table(fileio, "agg", 0, "events").to_pylist() == before
    assert _json(["verify", uri], [])["ok"]


def test_compact_keeps_every_row_and_refuses_a_streaming_writers_store(tmp_path: Path) -> None:
    """compact publishes the next version through an epoch (its record written as every
    epoch's: the format, the compacted version's watermark) with every row; it refuses a store
    a streaming writer owns (a writer in its manifest, or its operator's kind in the layout
    record, as a rescaled tiered store has), naming the store's full path."""
    uri = str(tmp_path / "state")
    fileio = FileIO(uri)
    _history(fileio, meta={"watermark_ms": 1_500, "panes": [1, 2]})
    tables = ["total", "events", "by_user"]
    before = {(p, t): read_table(fileio, "agg", p, t).to_pylist() for p in (0, 1) for t in tables}
    rows = _json(["compact", uri, "-p", "0"], [])
    assert [(r["partition"], r["version"], r["runs_after"]) for r in rows] == [(0, 4, 3)]
    assert rows[0]["runs_before"] == 12 and rows[0]["bytes_written"] > 0
    assert PartitionStore.committed_versions(uri, "agg", 0)[-1] == 4
    assert PartitionStore.committed_versions(uri, "agg", 1)[-1] == 3
    for (p, t), want in before.items():
        assert read_table(fileio, "agg", p, t).to_pylist() == want, (p, t)
    meta = read_manifest(fileio, store_dir_for("agg", 0), 4).meta
    assert meta == {"record_format": 1, "watermark_ms": 1_500, "panes": [1, 2]}
    report = json.loads(_run(["--json", "verify", uri], [], code=1).stdout)
    assert report["problems"] == []  # every file intact; only partition 0 has a version 4:
    assert [k["behind"] for k in report["skews"]] == [{"1": 3}]  # the partitions disagree

    owned = tmp_path / "owned"
    writer = {WRITER_META: {"run": "r1", "instance": "i"}}
    _history(FileIO(str(owned)).child("query-1"), partitions=1, meta=writer)
    res = _run(["compact", str(owned)], [], code=2)
    assert f"store {owned / 'query-1' / 'agg' / '0'} is written by a streaming query" in res.stderr
    assert PartitionStore.committed_versions(str(owned / "query-1"), "agg", 0)[-1] == 3
    kind = tmp_path / "kind"
    _history(FileIO(str(kind)), partitions=1)
    resolve_layout(FileIO(str(kind)), "agg", partitions=1, kind="tiered")
    res = _run(["compact", str(kind)], [], code=2)
    assert "(a tiered operator, as its layout records)" in res.stderr


def test_errors_are_one_line_with_exit_code_2(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    _history(FileIO(uri), partitions=1)
    res = _run(["show", uri, "agg", "nope"], [], code=2)
    assert "UnknownStateError" in res.stderr and "'nope'" in res.stderr
    assert "Traceback" not in res.output
    res = _run(["show", uri, "agg", "total", "-v", "99"], [], code=2)
    assert "VersionNotFoundError" in res.stderr
    res = _run(["list", str(tmp_path / "empty")], [], code=2)
    assert "no committed state" in res.stderr
    res = _run(["-o", "endpoint", "list", uri], [], code=2)
    assert "name=value" in res.stderr


def test_module_and_console_script_run() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fsstate", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("list", "stats", "show", "diff", "verify", "gc", "compact"):
        assert command in out
    script = Path(sys.executable).parent / "fsstate"
    assert subprocess.run([str(script), "--version"], capture_output=True, check=True).stdout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


_SECRET = "cli-secret-0123456789"


def _cli_args(case: str) -> tuple[list[str], list[str]]:
    """Arguments of a failing command and words its one line must hold."""
    creds = ["-o", "access_key_id=AKIACLIKEY", "-o", f"secret_access_key={_SECRET}"]
    if case == "bad_number":
        return ["-o", "retries_max=abc", "list", "s3://bucket/prefix"], [
            "ConfigError",
            "retries_max",
            "whole number",
        ]
    if case == "port_above_65535":
        return ["-o", "endpoint=http://127.0.0.1:99999", *creds, "list", "s3://bucket/prefix"], [
            "ConfigError",
            "endpoint",
            "65535",
        ]
    if case == "unreachable":
        endpoint = f"endpoint=http://127.0.0.1:{_closed_port()}"
        args = ["-o", endpoint, "-o", "retries_max=0", "-o", "region=us-east-1", *creds]
        return [*args, "list", "s3://bucket/prefix"], [
            "StorageError",
            "cannot list s3://bucket/prefix",
            "connection refused",
            "AWS_ENDPOINT_URL",
        ]
    assert case == "no_state"
    return ["show", "/nonexistent/fsstate-state", "agg", "total"], ["no committed state"]


@pytest.mark.parametrize("case", ["bad_number", "port_above_65535", "unreachable", "no_state"])
def test_the_real_command_fails_with_one_line_and_exit_code_2(case: str) -> None:
    """``python -m fsstate`` as a process: exit code 2 and exactly one line on stderr, no
    traceback (a bad number was a ValueError traceback and exit 1, a port above 65535 a panic
    of the object store client, an unreachable store ~40 lines of the client's report)."""
    args, words = _cli_args(case)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    res = subprocess.run(
        [sys.executable, "-m", "fsstate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
    )
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("Error: "), lines
    assert "Traceback" not in res.stderr + res.stdout
    assert all(w in lines[0] for w in words), (words, lines[0])
    assert _SECRET not in res.stderr + res.stdout


def test_a_panic_of_the_client_is_one_line_and_debug_shows_the_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client panics (a BaseException) signing with a session token holding a line break,
    read from the environment; the command still ends with one line and exit code 2. With
    ``--debug`` the client's full reports go to stderr as well."""
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token\nwith a line break")
    opts = [
        *("-o", f"endpoint=http://127.0.0.1:{_closed_port()}"),
        *("-o", "access_key_id=AKIACLIKEY", "-o", f"secret_access_key={_SECRET}"),
        *("-o", "region=us-east-1", "-o", "retries_max=0"),
    ]
    res = _run(["list", "s3://bucket/prefix"], opts, code=2)
    assert res.stderr.count("\n") == 1 and "crashed" in res.stderr, res.stderr
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    res = _run(["--debug", "list", "s3://bucket/prefix"], opts, code=2)
    assert "Debug source" in res.stderr and "connection refused" in res.stderr
    assert res.stderr.splitlines()[-1].startswith("Error: StorageError: cannot list")
    assert _SECRET not in res.stderr


def _said(text: str) -> str:
    """``text`` with its line wraps undone (verify's lines fit 80 columns)."""
    return " ".join(text.split())
