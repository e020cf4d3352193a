"""Command-line plumbing shared by fsstate's commands and fsstate_spark's: errors as one line,
tables, progress bars, ``name=value`` options.

Invariants:

* A table (:func:`rich_table`) is laid out for the width it is printed at (the terminal's,
  ``COLUMNS`` when set, else 200 columns off a terminal), and no line of it is wider: a column
  with one value in every row that the command marks as a heading (the query id) moves to a
  line above the table; if the boxed table is still too wide, a compact one (headers wrapped
  at spaces, two spaces between columns) shortens the command's id columns in the middle
  (``12345678…cdef``: a prefix unique among the ids shown, which ``--query`` accepts, and the
  last four characters), then wraps the widest text columns (numbers never wrap); a table
  that cannot fit that way prints one ``column: value`` block per row. Cell texts are never
  cut: only ids are shortened, and only to a unique prefix.
* Every error a command raises reaches the user as one line on stderr with exit code 2
  (:class:`ErrorsAsOneLine`): a typed fsstate error as ``<Type>: <message>``, anything else
  (the object store client's panics included) as a bug to report; click's own usage errors
  and exits pass through. Tracebacks only with ``--debug`` (logged at DEBUG). Refusals of the
  command line's own input are :class:`fsstate.errors.ConfigError`, so one line too: a value
  option given twice (:class:`Command`: click would keep the last one silently), a number out
  of its range (:func:`at_least`), a ``name=value`` without ``=`` (:func:`option_pairs`),
  object store settings with local paths only (:meth:`CommandEnv.check_options`, the rule and
  words of ``tiered()``), an operator no store has (with the nearest name, difflib).
* Both command lines' groups are made by :func:`command_group`: the same ``--json``,
  ``--debug``, ``-o``, ``--version`` and ``-h`` options, errors as one line.
* The group's ``--json``, ``-o`` and ``--conf`` work before the command name and after it
  (:meth:`ErrorsAsOneLine.add_command` gives every command a copy of them): given in both
  places, ``--json`` is on, and ``name=value`` pairs merge, the later winning.
* Progress bars go to stderr, only on a terminal and never with ``--json``.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from fsstate.config import local_options_error
from fsstate.errors import ConfigError, FsStateError
from fsstate.inspect.catalog import StoreRef, all_stores, find_stores
from fsstate.storage.backend import is_panic
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location

__all__ = [
    "Command",
    "CommandEnv",
    "ErrorsAsOneLine",
    "Failed",
    "FitTable",
    "at_least",
    "command_group",
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


class Refused(Failed):
    """A refusal because of the state's condition (partial state, a live lineage): one line
    (``Refused: ...``) on stderr, exit code 1, as ``verify``'s findings."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"Refused: {self.message}", file=file, err=True)


class Command(click.Command):
    """A command whose options that take a value may be given once: ``-p 1 -p 2`` is refused
    (click keeps the last silently); repeatable options (``multiple``) and flags are not
    concerned."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            for param in dict.fromkeys(order):
                if not isinstance(param, click.Option) or param.multiple or param.is_flag:
                    continue
                if (n := order.count(param)) > 1:
                    raise ConfigError(f"{_names(param)} is given {n} times: give it once")
        return super().parse_args(ctx, args)


# the group's options that also work after the command name -> the CommandEnv field they set
_ANYWHERE = {"as_json": "as_json", "options": "options", "confs": "conf"}


class ErrorsAsOneLine(click.Group):
    """Turns every error into one line on stderr and exit code 2 (click's own usage errors and
    exits pass through); its commands are :class:`Command` and take the group's ``--json``,
    ``-o`` and ``--conf`` after their name too."""

    command_class = Command

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Register ``cmd`` (a :class:`Command`) with copies of the group's options that work
        after the command name."""
        if not isinstance(cmd, Command):
            raise TypeError(f"{cmd.name}: fsstate's commands are fsstate.cli.console.Command")
        for param in self.params:
            if isinstance(param, click.Option) and param.name in _ANYWHERE:
                cmd.params.append(_after_command(param))
        super().add_command(cmd, name)

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


def _after_command(param: click.Option) -> click.Option:
    """A copy of the group's option ``param`` for after the command name: it updates the
    command's :class:`CommandEnv` (made by the group's callback, which runs first)."""
    field = _ANYWHERE[str(param.name)]

    def merge(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        env = ctx.find_object(CommandEnv)
        if env is None or not value:
            return
        if param.is_flag:
            setattr(env, field, True)
        else:
            getattr(env, field).update(option_pairs(value, param.opts[0]))

    return click.Option(
        param.opts,
        is_flag=param.is_flag,
        multiple=param.multiple,
        metavar=param.metavar,
        help=param.help,
        expose_value=False,
        callback=merge,
    )


def _names(param: click.Parameter) -> str:
    """How messages name an option (``-p/--partition``) or an argument (``PARTITIONS``)."""
    if isinstance(param, click.Option):
        return "/".join(sorted(param.opts, key=len))
    return str(param.name).upper()


def unexpected(exc: BaseException) -> Failed:
    log.debug("unexpected %s", type(exc).__name__, exc_info=True)
    text = " ".join(str(exc).split())
    return Failed(
        f"unexpected {type(exc).__name__}: {text[:300]} (a bug in fsstate: please report it "
        "with the output of the same command with --debug before the command name)"
    )


def command_group(
    storage_help: str, *extra: Callable[[Any], Any]
) -> Callable[[Callable[..., None]], ErrorsAsOneLine]:
    """The decorator making a command line's group (:class:`ErrorsAsOneLine`) of a callback.

    The callback takes the click context, then ``as_json``, ``debug`` and ``options`` (the
    ``--json``, ``--debug`` and ``-o`` options; ``storage_help`` says what ``-o`` configures),
    then the values of the ``extra`` option decorators, in their order. The group also has
    ``--version`` and ``-h``/``--help``.

    Args:
        storage_help: The help of ``-o NAME=VALUE``.
        *extra: Further options of the group (``click.option(...)``), shown after ``-o``.

    Returns:
        The decorator: the callback in, the group out.
    """
    options = [
        click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables."),
        click.option(
            "--debug",
            is_flag=True,
            help="Log the storage client's full error reports and tracebacks to stderr.",
        ),
        click.option(
            "-o",
            "--option",
            "options",
            multiple=True,
            metavar="NAME=VALUE",
            help=storage_help,
        ),
        *extra,
    ]

    def make(callback: Callable[..., None]) -> ErrorsAsOneLine:
        f: Callable[..., None] = click.version_option(package_name="fsstate")(
            click.pass_context(callback)
        )
        for option in reversed(options):
            f = option(f)
        group = click.group(cls=ErrorsAsOneLine, context_settings={"help_option_names": _HELP})
        return group(f)

    return make


_HELP = ["-h", "--help"]


class CommandEnv:
    def __init__(self, as_json: bool, options: dict[str, str]) -> None:
        self.as_json = as_json
        self.options = options
        # off a terminal tables are 200 columns wide, unless COLUMNS says otherwise
        wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        self.out = Console(soft_wrap=False, width=200 if wide else None)
        self.err = Console(stderr=True)

    def fileio(self, uri: str, beside: tuple[str | None, ...] = ()) -> FileIO:
        """The files under ``uri`` (a location the command names), with the ``-o`` settings.

        Args:
            uri: a local path or object store URI.
            beside: the command's other locations, to which ``-o`` applies too (None: not
                given); see :meth:`check_options`.

        Raises:
            ConfigError: ``-o`` was given and ``uri`` and every location ``beside`` are local.
        """
        self.check_options(uri, *beside)
        return FileIO(Location.parse(uri, self.options))

    def check_options(self, *uris: str | None) -> None:
        """Refuse the ``-o`` settings when every location of ``uris`` (None: not given) is a
        local path, where they cannot apply: as ``tiered()`` refuses ``storage_options`` with
        a local ``state_uri`` (:func:`fsstate.config.local_options_error`).

        Raises:
            ConfigError: ``-o`` given, and only local paths.
        """
        given = [Location.parse(u) for u in uris if u is not None]
        if not self.options or not given or not all(loc.is_local for loc in given):
            return
        shown = " and ".join(repr(loc.uri()) for loc in given)
        raise local_options_error(
            self.options, "-o", shown if len(given) == 1 else f"each of {shown}"
        )

    def stores(
        self,
        fileio: FileIO,
        query: str | None,
        operator: str | None,
        partition: int | None = None,
        *,
        every: bool = False,
    ) -> list[StoreRef]:
        """The stores under ``fileio`` of ``query`` (an id or a prefix of one), ``operator``
        and ``partition`` (None: every one): as readers see them, each operator's current
        lineage of its newest generation (:func:`fsstate.inspect.catalog.find_stores`;
        partitions without it left out), or with ``every`` every store of every generation
        (:func:`fsstate.inspect.catalog.all_stores`).

        Raises:
            ConfigError: no store has ``operator`` (named with the nearest operator there).
            Failed: no store matches, or ``query`` is a prefix of several ids.
        """
        if every:
            found = all_stores(fileio, operator=operator)
            if partition is not None:
                found = [s for s in found if s.partition == partition]
        else:
            found = find_stores(fileio, operator=operator, partition=partition)
            found = [s for s in found if s.versions]
        if query is not None:
            found = [s for s in found if s.prefix == _query_id(query, found)]
        if not found and operator is not None:
            others = find_stores(fileio)
            if query is not None:
                others = [s for s in others if s.prefix == _query_id(query, others)]
            refusal = unknown_operator(operator, others, fileio.describe(""))
            if refusal is not None:
                raise refusal
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

    def emit(self, doc: Any, table: RenderableType | None) -> None:
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


def option_pairs(values: tuple[str, ...], option: str = "-o") -> dict[str, str]:
    """``name=value`` texts of the repeatable ``option`` as a dict (the later value of a name
    wins).

    Raises:
        ConfigError: a text without ``=`` or without a name.
    """
    out = {}
    for v in values:
        name, sep, value = v.partition("=")
        if not sep or not name.strip():
            example = (
                "spark.sql.shuffle.partitions=16" if option == "--conf" else "region=us-east-1"
            )
            raise ConfigError(f"{option} {v!r}: write name=value ({option} {example})")
        out[name.strip()] = value
    return out


def at_least(minimum: int, what: str, every: int | None = None) -> Callable[..., Any]:
    """A click callback refusing a number below ``minimum`` (``every``, if given, is allowed
    too and means all) with a one-line :class:`ConfigError` naming the option and ``what`` to
    give (``a number of rows``)."""

    def check(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
        if value is None or value >= minimum or value == every:
            return value
        name = _names(param)
        also = f", or {every} for all" if every is not None else ""
        raise ConfigError(f"{name} {value}: give {what} >= {minimum}{also}")

    return check


def unknown_operator(operator: str, stores: list[StoreRef], where: str) -> ConfigError | None:
    """The refusal of ``operator`` that no store of ``stores`` (those the command could have
    read) has, naming the nearest operator name there (difflib) and the names; None when one
    has it, or when there is no store at all (nothing to name)."""
    names = sorted({s.operator for s in stores})
    if not names or operator in names:
        return None
    near = difflib.get_close_matches(operator, names, n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    shown = ", ".join(map(repr, names[:_NAMES_SHOWN]))
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return ConfigError(
        f"no operator {operator!r} under {where}{hint} (operators there: {shown}{more}; "
        "fsstate list shows them)"
    )


_NAMES_SHOWN = 8  # operator names an error shows before "and N more"


def _query_id(query: str, stores: list[StoreRef]) -> str:
    """The query id ``--query`` names: an id of ``stores``, or a prefix of exactly one (the
    tables show ids shortened to such a prefix)."""
    ids = {s.prefix for s in stores}
    if query in ids:
        return query
    head, _, tail = query.partition("…")  # as the tables show it, or its prefix
    matches = sorted(i for i in ids if i.startswith(head) and i.endswith(tail))
    if len(matches) > 1:
        raise Failed(f"--query {query!r} is a prefix of several query ids: {matches}")
    return matches[0] if matches else query


def rich_table(
    title: str,
    columns: list[str],
    rows: list[list[Any]],
    *,
    heading: Sequence[str] = ("query",),
    ids: Sequence[str] = ("query",),
) -> FitTable:
    """A table laid out for the width it is printed at (see the module docstring).

    Args:
        title: the line above the table.
        columns: the column headers.
        rows: the cells, a list per row (None prints empty).
        heading: columns that move to a line above the table when every row has one value.
        ids: columns of ids, shortened in the middle to a unique prefix when space is short.
    """
    cells = [["" if v is None else str(v) for v in r] for r in rows]
    return FitTable(title, columns, cells, heading, ids)


_NUMBER = re.compile(r"-?\d[\d.,]*|-?")
_BOXED, _COMPACT = "boxed", "compact"


class FitTable:
    """A titled table that lays itself out for the console's width when printed."""

    def __init__(
        self,
        title: str,
        columns: list[str],
        rows: list[list[str]],
        heading: Sequence[str],
        ids: Sequence[str],
    ) -> None:
        lines = [title]
        keep = list(range(len(columns)))
        for i, name in enumerate(columns):
            values = {r[i] for r in rows}
            if name in heading and len(values) == 1:
                keep.remove(i)
                if (value := values.pop()) not in ("", "-"):
                    lines.append(f"{name}: {value}")
        self.lines = lines
        self.columns = [columns[i] for i in keep]
        self.rows = [[r[i] for i in keep] for r in rows]
        self.ids = [i for i, c in enumerate(self.columns) if c in ids]

    def __rich_console__(self, _console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.layout(options.max_width)

    def layout(self, width: int) -> list[RenderableType]:
        """The title and heading lines, then the table laid out within ``width`` columns."""
        out: list[RenderableType] = [Text(line, overflow="fold") for line in self.lines]
        n = len(self.columns)
        if n == 0:
            return out
        natural = [
            max([len(c), *(len(r[i]) for r in self.rows)]) for i, c in enumerate(self.columns)
        ]
        if sum(natural) + 3 * n + 1 <= width:
            return [*out, self._table(_BOXED, natural, self.rows)]
        rows = self.rows
        words = [max(len(w) for w in (c.split() or [""])) for c in self.columns]
        widths = _widths(words, rows)
        if sum(widths) + 2 * (n - 1) > width and self.ids:
            rows = _short_ids(rows, self.ids)
            widths = _widths(words, rows)
        fitted = self._shrink_text(widths, words, rows, width - 2 * (n - 1))
        if fitted is None:
            return [*out, *self._records(rows)]
        return [*out, self._table(_COMPACT, fitted, rows)]

    def _shrink_text(
        self, widths: list[int], words: list[int], rows: list[list[str]], room: int
    ) -> list[int] | None:
        """``widths`` with the widest text columns narrowed (to wrap) until they sum to at most
        ``room``; None if they cannot (numbers and ids never wrap)."""
        widths = list(widths)
        floor = {
            i: max(words[i], min(widths[i], 10))
            for i in range(len(widths))
            if i not in self.ids and not all(_NUMBER.fullmatch(r[i]) for r in rows)
        }
        while sum(widths) > room:
            wide = [i for i in floor if widths[i] > floor[i]]
            if not wide:
                return None
            widest = max(wide, key=lambda i: widths[i])
            widths[widest] -= 1
        return widths

    def _table(self, style: str, widths: list[int], rows: list[list[str]]) -> Table:
        if style == _BOXED:
            t = Table()
        else:
            t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        for c, w in zip(self.columns, widths, strict=True):
            t.add_column(Text(c, overflow="fold"), width=w, overflow="fold")
        for r in rows:
            t.add_row(*r)
        return t

    def _records(self, rows: list[list[str]]) -> list[RenderableType]:
        """One ``column: value`` block per row, a blank line before each."""
        pad = max(len(c) for c in self.columns)
        out: list[RenderableType] = []
        for r in rows:
            out.append(Text(""))
            out += [
                Text(f"{c + ':':<{pad + 1}} {v}", overflow="fold")
                for c, v in zip(self.columns, r, strict=True)
            ]
        return out


def _widths(words: list[int], rows: list[list[str]]) -> list[int]:
    """Each column's width: its widest cell, at least its header's longest word."""
    return [max([w, *(len(r[i]) for r in rows)]) for i, w in enumerate(words)]


def _short_ids(rows: list[list[str]], columns: list[int]) -> list[list[str]]:
    """``rows`` with the ids of ``columns`` shortened in the middle: a prefix of at least 8
    characters that no other id of the column starts with, an ellipsis and the last four."""
    rows = [list(r) for r in rows]
    for i in columns:
        ids = sorted({r[i] for r in rows})
        short = {}
        for v in ids:
            k = 8
            while k < len(v) and any(o != v and o.startswith(v[:k]) for o in ids):
                k += 1
            short[v] = f"{v[:k]}…{v[-4:]}" if k + 5 < len(v) else v
        for r in rows:
            r[i] = short[r[i]]
    return rows


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
