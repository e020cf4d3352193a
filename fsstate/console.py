"""Command-line plumbing shared by fsstate's commands and fsstate_spark's: errors as one line,
tables, progress bars, ``name=value`` options.

Invariants:

* Every error a command raises reaches the user as one line on stderr with exit code 2
  (:class:`ErrorsAsOneLine`): a typed fsstate error as ``<Type>: <message>``, anything else
  (the object store client's panics included) as a bug to report; click's own usage errors
  and exits pass through. Tracebacks only with ``--debug`` (logged at DEBUG).
* Progress bars go to stderr, only on a terminal and never with ``--json``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

try:
    import click
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.table import Table
except ImportError as exc:  # pragma: no cover - the cli extra is missing
    raise SystemExit(
        f"fsstate's command line needs click and rich ({exc}): pip install 'fsstate[cli]'"
    ) from None

from fsstate.errors import FsStateError
from fsstate.inspect.catalog import StoreRef, find_stores
from fsstate.storage.backend import is_panic
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location

__all__ = [
    "CommandEnv",
    "ErrorsAsOneLine",
    "Failed",
    "debug_to_stderr",
    "option_pairs",
    "rich_table",
]

log = logging.getLogger("fsstate")


class Failed(click.ClickException):
    """An error shown as one line (``Error: ...``) on stderr, exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class ErrorsAsOneLine(click.Group):
    """Turns every error into one line on stderr and exit code 2 (click's own usage errors and
    exits pass through)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except FsStateError as exc:
            log.debug("%s", type(exc).__name__, exc_info=True)
            raise Failed(f"{type(exc).__name__}: {exc}") from None
        except Exception as exc:
            raise unexpected(exc) from None
        except BaseException as exc:  # the object store client's panic, not an exit
            if not is_panic(exc):
                raise
            raise unexpected(exc) from None


def unexpected(exc: BaseException) -> Failed:
    log.debug("unexpected %s", type(exc).__name__, exc_info=True)
    text = " ".join(str(exc).split())
    return Failed(
        f"unexpected {type(exc).__name__}: {text[:300]} (a bug in fsstate: please report it "
        "with the output of the same command with --debug before the command name)"
    )


class CommandEnv:
    def __init__(self, as_json: bool, options: dict[str, str]) -> None:
        self.as_json = as_json
        self.options = options
        self.out = Console(soft_wrap=False, width=200 if not sys.stdout.isatty() else None)
        self.err = Console(stderr=True)

    def fileio(self, uri: str) -> FileIO:
        return FileIO(Location.parse(uri, self.options))

    def stores(
        self,
        fileio: FileIO,
        query: str | None,
        operator: str | None,
        partition: int | None = None,
    ) -> list[StoreRef]:
        found = find_stores(fileio, prefix=query, operator=operator, partition=partition)
        if not found:
            what = " ".join(
                f"{k}={v!r}"
                for k, v in (("query", query), ("operator", operator), ("partition", partition))
                if v is not None
            )
            raise Failed(
                f"no committed state under {fileio.describe('')}"
                + (f" matching {what}" if what else "")
                + "; give the state root of a query (its state_uri) or run `fsstate list`"
            )
        return found

    def emit(self, doc: Any, table: Table | None) -> None:
        if self.as_json:
            click.echo(json.dumps(doc, indent=2, default=str))
        elif table is not None:
            self.out.print(table)

    @contextmanager
    def progress(self, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A progress bar on stderr (only on a terminal, never with --json)."""
        disable = self.as_json or not self.err.is_terminal
        bar = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            console=self.err,
            transient=True,
            disable=disable,
        )
        with bar:
            task = bar.add_task(label, total=total)

            def step(n: int = 1) -> None:
                bar.advance(task, n)

            yield step


def option_pairs(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        name, sep, value = v.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{v!r}: write name=value", param_hint="-o/--option")
        out[name.strip()] = value
    return out


def rich_table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left", min_width=len(title) + 4)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    return t


def debug_to_stderr(ctx: click.Context, names: tuple[str, ...] = ("fsstate",)) -> None:
    """``--debug``: the named loggers at DEBUG to stderr until the command ends (the command
    may run again in this process: tests)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)

    def restore() -> None:
        for lg, level in zip(loggers, levels):
            lg.removeHandler(handler)
            lg.setLevel(level)

    ctx.call_on_close(restore)
