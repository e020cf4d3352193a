"""Running a command line's click group in-process, as both command lines' tests do (a plain
module: import it).

:func:`run` invokes a group through click's test runner and checks the exit code;
:func:`refused` checks a refusal of the command's input: exactly one line on stderr,
``Error: ConfigError: ...``, nothing on stdout, exit code 2. :func:`cli_options` are the
``-o`` arguments that reach the S3 test server.
"""

from __future__ import annotations

import click
from click.testing import CliRunner, Result

from devkit.s3_server import S3Info, s3_options


def run(group: click.Group, *args: str, code: int = 0) -> Result:
    """``group`` run with ``args``; its exit code must be ``code``."""
    res = CliRunner().invoke(group, list(args), catch_exceptions=False)
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    return res


def refused(group: click.Group, *args: str) -> str:
    """The one line a refused command prints on stderr (exit code 2, nothing on stdout)."""
    res = run(group, *args, code=2)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and res.stdout == "", res.stderr
    assert lines[0].startswith("Error: ConfigError: "), lines
    return lines[0]


def cli_options(info: S3Info) -> list[str]:
    """``-o name=value`` for each storage option that reaches the S3 test server."""
    return [a for k, v in s3_options(info).items() for a in ("-o", f"{k}={v}")]
