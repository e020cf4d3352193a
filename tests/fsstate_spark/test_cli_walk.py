"""Both command lines as an operator following docs/operations.md and docs/cli.md meets them
(issue 66): every command's ``--help`` says what it does; ``--json``, ``-o`` and ``--conf`` work
after the command name as before it, ``-o`` is refused where every location is a local path, and
bad numbers are refused, each as one line (``Error: ConfigError: ...``, exit 2).

No Spark session: fork, rollback and watch read checkpoints as files (written here as Spark
writes them), and ``rescale``'s session is replaced by a stand-in that records its settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

from fsstate import PartitionStore
from fsstate.cli import cli as fsstate_cli
from fsstate.errors import ConfigError
from fsstate_spark.cli import _SparkEnv
from fsstate_spark.cli import cli as spark_cli
from tests.support.cli import refused, run

KEY = pa.schema([("k", pa.string())])
VAL = pa.schema([("n", pa.int64())])
CLIS = {"fsstate": fsstate_cli, "fsstate-spark": spark_cli}
SUMMARY_WORDS = 4  # the first line: a sentence saying what the command does
DESCRIPTION_WORDS = 25  # the paragraph after it


def _checkpoint(path: Path, committed: int = 1) -> Path:
    """A stopped query's checkpoint with batches 0..committed planned and committed."""
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    (path / "metadata").write_text(json.dumps({"id": "q-walk"}) + "\n")
    for b in range(committed + 1):
        (path / "offsets" / str(b)).write_text('v1\n{"conf": {}}\n{}\n')
        (path / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return path


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run(*args: str, code: int = 0) -> Result:
    return run(spark_cli, *args, code=code)


def _refused(*args: str) -> str:
    return refused(spark_cli, *args)


@pytest.mark.parametrize(
    ("prog", "name"),
    [(prog, name) for prog, group in CLIS.items() for name in group.commands],
)
def test_every_commands_help_says_what_it_does(prog: str, name: str) -> None:
    """``fsstate compact --help`` said 'see the module docstring': every command's help is a
    one-sentence summary, which the command list shows whole, then a paragraph describing what
    the command does, and points at nothing the operator cannot see."""
    group = CLIS[prog]
    command = group.commands[name]
    paragraphs = [" ".join(p.split()) for p in (command.help or "").split("\n\n") if p.strip()]
    assert len(paragraphs) >= 2, (name, command.help)
    summary, description = paragraphs[0], paragraphs[1]
    assert summary.endswith(".") and len(summary.split()) >= SUMMARY_WORDS, summary
    assert summary.count(". ") == 0, f"{name}: the summary is one sentence: {summary}"
    assert len(description.split()) >= DESCRIPTION_WORDS, (name, description)
    assert "docstring" not in (command.help or "") and "module" not in (command.help or "")
    shown = CliRunner().invoke(group, [name, "--help"], prog_name=prog)
    assert shown.exit_code == 0 and " ".join(shown.stdout.split()).count(description) == 1
    listing = CliRunner().invoke(group, ["--help"], prog_name=prog, terminal_width=100).stdout
    assert f"{name} " in listing and summary in " ".join(listing.split()), listing


@pytest.mark.parametrize("prog", sorted(CLIS))
def test_each_groups_help_says_what_its_commands_do(prog: str) -> None:
    paragraphs = [p for p in (CLIS[prog].help or "").split("\n\n") if p.strip()]
    assert len(paragraphs) >= 2 and "after it" in paragraphs[-1], CLIS[prog].help


def test_json_and_options_work_after_the_command(tmp_path: Path) -> None:
    """``fsstate-spark watch CKPT --once --json`` (docs/monitoring.md) and ``-o`` after the
    command were 'No such option'."""
    source = _checkpoint(tmp_path / "ckpt")
    store = PartitionStore.open(str(source / "fsstate"), "count", 0, None)  # a flow's state
    for v in range(2):
        store.value_table("total", VAL, KEY).update(("k",), (v,))
        store.commit(v)
    store.close()
    after = json.loads(_run("watch", str(source), "--once", "--json").stdout)
    before = json.loads(_run("--json", "watch", str(source), "--once").stdout)
    assert after["location"] == before["location"] and after["committedBatch"] == 1
    line = _refused("rollback", str(source), "--batch", "0", "-o", "endpoint")
    assert "-o 'endpoint': write name=value" in line, line
    line = _refused("rollback", str(source), "--batch", "0", "--conf", "spark.x")
    assert "--conf 'spark.x': write name=value" in line, line


def test_conf_after_the_command_merges_with_conf_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, str] = {}

    def session(env: _SparkEnv) -> Any:
        seen.update(env.conf)
        raise ConfigError("the session is not built here")

    monkeypatch.setattr(_SparkEnv, "session", session)
    _run(
        "--conf", "spark.a=1", "--conf", "spark.b=1", "rescale", str(tmp_path), "2",
        "--conf", "spark.b=2", code=2,
    )  # fmt: skip
    assert seen == {"spark.a": "1", "spark.b": "2"}


@pytest.mark.parametrize(
    "args",
    [
        ["fork", "{ckpt}", "{tmp}/fork", "-o", "region=eu-west-1"],
        ["-o", "region=eu-west-1", "fork", "{ckpt}", "{tmp}/fork"],
        ["rollback", "{ckpt}", "--batch", "0", "-o", "region=eu-west-1"],
        ["watch", "{ckpt}", "--once", "-o", "region=eu-west-1"],
        ["rescale", "{ckpt}", "2", "--state-uri", "{tmp}/state", "-o", "region=eu-west-1"],
    ],
    ids=["fork", "fork-before", "rollback", "watch", "rescale"],
)
def test_object_store_settings_with_local_paths_only_are_refused(
    tmp_path: Path, args: list[str]
) -> None:
    """``-o`` where every location the command names is local was ignored silently (or, for
    rescale, refused only after a Spark session was built)."""
    ckpt = _checkpoint(tmp_path / "ckpt")
    before = _files(tmp_path)
    line = _refused(*[a.format(ckpt=ckpt, tmp=tmp_path) for a in args])
    assert "object store settings (region; from -o) were given, but" in line, line
    assert "local path where they cannot apply" in line, line
    assert _files(tmp_path) == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["fork", "{ckpt}", "{tmp}/f", "--batch", "-1"], "--batch -1: give a committed batch id"),
        (["rollback", "{ckpt}", "--batch", "-3"], "--batch -3: give a committed batch id >= 0"),
        (["rescale", "{ckpt}", "0"], "PARTITIONS 0: give a partition count >= 1"),
        (["rollback", "{ckpt}", "--batch", "0", "--batch", "1"], "--batch is given 2 times"),
    ],
    ids=["fork", "rollback", "rescale", "twice"],
)
def test_bad_numbers_are_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    before = _files(tmp_path)
    assert words in _refused(*[a.format(ckpt=ckpt, tmp=tmp_path) for a in args])
    assert _files(tmp_path) == before


def test_every_command_is_an_fsstate_command() -> None:
    """Commands get the options that work after their name when added: a plain click command
    would not, and is refused when added."""
    with pytest.raises(TypeError, match=r"fsstate\.cli\.console\.Command"):
        spark_cli.add_command(click.Command("plain"))
