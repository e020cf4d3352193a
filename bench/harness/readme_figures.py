"""README and docs figures cite the published benchmark rows they come from, and are checked.

The pages checked are README.md and every page of the documentation site
(``docs/*.md`` but the generated ``docs/benchmarks.md``): :func:`figure_pages`; the performance
page holds most figures, the README its headline one.

A figure taken from a published run is followed, with nothing in between, by an HTML comment
that names where it comes from (invisible once rendered, so the prose still says which rows it
cites for the reader)::

    1.68×<!-- fig: spark_operators / "windowed count: fsstate vs builtin" -->
    9.4–11.2 µs<!-- fig: spark_e2e / "20k value_count µs/call tiered all-in",
        "20k row value_count µs/call tiered all-in" -->
    0.47–2.08×<!-- fig: spark_operators / "keyed running aggregate: fsstate vs builtin" / ci -->
    320 µs<!-- fig: spark_e2e / "20k value_count µs/call native" / note "in-worker {} µs/call" -->

Grammar: ``<!-- fig: SUITE / "ROW"[, "ROW" ...] [/ FIELD] -->`` (whitespace, line breaks
included, is free), where SUITE is ``bench/results/<SUITE>.json``, each ROW a row ``name`` of it
and FIELD one of

* ``value`` (the default): the row's measured figure (its ``stat``: median, max or derived);
* ``goal``, ``baseline`` (``baseline_value``), ``ratio``;
* ``ci``: the two ends of the row's confidence interval;
* ``note "PATTERN"``: numbers in the row's notes; in PATTERN, ``{}`` is the cited number,
  ``{_}`` any other number, the rest literal text; every match counts.

The figure before the marker is a number or a range ``a–b`` (en dash), optionally followed by a
unit (``×`` or ``x``, ``µs``, ``ms``, ``s``, ``MiB``, ``GiB``, ``KiB``, ``%``, ``rows/s``,
``ops/s``). Invariants the checks hold (:func:`check_readme`):

* Every marker parses, names a suite with a JSON file and rows that exist, and the field has a
  value for each row.
* The cited values, formatted with as many decimals as the README writes, equal the README's
  figure: a single number equals every cited value, a range ``a–b`` equals the smallest and the
  largest of them (two rows, more, or a ``ci``). ``%`` reads a ``fraction`` row times 100.
* The README's unit agrees with the row's unit (``µs`` reads ``µs/call``; for ``note``, the
  text after ``{}`` in the pattern starts with it).
* In a paragraph that cites the published benchmarks (it has a marker, says "published run",
  links ``](docs/benchmarks.md)`` (``](benchmarks.md)`` from a docs page) or names rows
  ``rows "..."``), every number with a unit above is followed by a marker. Figures from
  elsewhere (a test job, a design choice) belong in paragraphs that say where they come from
  in words, and are not checked.
* Every row the prose names (``row "X"``, ``rows "X", "Y" and "Z"``) exists in some suite: by
  its full name, as the end of names (``"µs/call tiered all-in"``) or, ending in ``...``, as
  their start.

``python -m bench.readme_figures`` prints the problems (one line each, naming the README line
and the row) and exits 1 if there are any; ``tests/bench/test_readme_figures.py`` runs the same
checks.
"""

# ruff: noqa: RUF001, RUF002 (the README writes figures with the multiplication sign and
# en-dash ranges: this module reads exactly those)
from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.common import REPO_ROOT, RESULTS_DIR
from bench.harness.report import load_suite_files

README_PATH = REPO_ROOT / "README.md"
DOCS_DIR = REPO_ROOT / "docs"

Rows = dict[str, dict[str, dict[str, Any]]]  # suite -> row name -> row (JSON record)

_NUM = r"\d[\d,]*(?:\.\d+)?"
_UNITS = r"rows/s|ops/s|µs|ms|MiB|GiB|KiB|×|x|%|s"
# a figure right before a marker: number or en-dash range, optional unit, up to the marker
_FIGURE_END = re.compile(
    rf"(?<![\w.,])(?P<lo>{_NUM})(?:\s*–\s*(?P<hi>{_NUM}))?(?:\s?(?P<unit>{_UNITS}))?$"
)
# a figure with a unit anywhere in a paragraph (what must carry a marker)
_FIGURE_WITH_UNIT = re.compile(
    rf"(?<![\w.,])(?:{_NUM})(?:\s*–\s*(?:{_NUM}))?\s?(?:{_UNITS})(?![\w/])"
)
_MARKER = re.compile(r"<!--\s*fig:(?P<body>.*?)-->", re.S)
_BODY = re.compile(
    r'^\s*(?P<suite>[\w.-]+)\s*/\s*(?P<rows>"[^"]+"(?:\s*,\s*"[^"]+")*)\s*'
    r'(?:/\s*(?P<field>value|goal|ci|baseline|ratio|note\s*"(?P<pattern>[^"]*)"))?\s*$'
)
_QUOTED = re.compile(r'"([^"\n]+(?:\n[^"\n]+)?)"')  # at most one line break inside
_CITES_BENCH = re.compile(r'published run|\]\((?:docs/)?benchmarks\.md\)|\brows? "', re.I)
_ROW_MENTION = re.compile(r'\brows? ("[^"]+"(?:(?:\s*,\s*|\s+and\s+|\s+or\s+)"[^"]+")*)')
_PATTERN_NUM = r"(-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?)"


@dataclass(frozen=True)
class Citation:
    """One figure of the README and the rows it cites.

    Attributes:
        line: 1-based line of the README where the figure ends.
        figure: the figure as written (``1.68×``, ``9.4–11.2 µs``).
        lo: its number, or the low end of its range, as written.
        hi: the high end of its range as written, or None for a single number.
        unit: its unit (``×`` read as ``x``), or None.
        suite: the cited suite.
        rows: the cited row names.
        field: ``value``, ``goal``, ``baseline``, ``ratio``, ``ci`` or ``note``.
        pattern: for ``note``, the pattern (whitespace collapsed); else None.
    """

    line: int
    figure: str
    lo: str
    hi: str | None
    unit: str | None
    suite: str
    rows: tuple[str, ...]
    field: str
    pattern: str | None

    def source(self) -> str:
        """``spark_e2e "a", "b" (note "in-worker {} µs/call")``: what it cites, for messages."""
        rows = ", ".join(f'"{r}"' for r in self.rows)
        field = f'note "{self.pattern}"' if self.field == "note" else self.field
        return f"{self.suite} {rows} ({field})"


def load_rows(results_dir: Path = RESULTS_DIR) -> Rows:
    """Every suite's rows by name, from ``<results_dir>/<suite>.json``."""
    return {
        doc["suite"]: {r["name"]: r for r in doc["results"]}
        for doc in load_suite_files(results_dir)
    }


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _mask(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` with every match of ``pattern`` replaced by spaces (offsets kept)."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


_CODE_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """``text`` with code blocks and inline code blanked (offsets kept)."""
    return _mask(_mask(text, _CODE_FENCE), _CODE_SPAN)


def parse_citations(text: str, path: str = "README.md") -> tuple[list[Citation], list[str]]:
    """The markers of ``text`` as citations, and a problem line for each marker that does not
    parse or has no figure right before it."""
    cites: list[Citation] = []
    problems: list[str] = []
    prose = _prose(text)
    for m in _MARKER.finditer(prose):
        line = _line_of(text, m.start())
        body = _squash(text[m.start("body") : m.end("body")])
        b = _BODY.match(body)
        if b is None:
            problems.append(
                f'{path}:{line}: marker "<!-- fig: {body} -->" does not parse: write '
                '<!-- fig: SUITE / "ROW"[, "ROW"] [/ value|goal|ci|baseline|ratio|note "..."] -->'
            )
            continue
        f = _FIGURE_END.search(text, max(0, m.start() - 60), m.start())
        if f is None:
            problems.append(f"{path}:{line}: marker {body!r} has no figure right before it")
            continue
        field = (b.group("field") or "value").split(" ")[0].split('"')[0]
        unit = f.group("unit")
        cites.append(
            Citation(
                line=_line_of(text, f.end()),
                figure=_squash(f.group(0)),
                lo=f.group("lo"),
                hi=f.group("hi"),
                unit="x" if unit == "×" else unit,
                suite=b.group("suite"),
                rows=tuple(_QUOTED.findall(b.group("rows"))),
                field=field,
                pattern=b.group("pattern"),
            )
        )
    return cites, problems


def _note_values(notes: str, pattern: str) -> list[float]:
    """The number ``{}`` stands for in each match of ``pattern`` in ``notes``."""
    parts = re.split(r"(\{_?\})", pattern)
    rx = ""
    for part in parts:
        if part == "{}":
            rx += _PATTERN_NUM
        elif part == "{_}":
            rx += r"-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?"
        else:
            rx += r"\s+".join(re.escape(w) for w in part.split(" "))
    return [float(m.group(1).replace(",", "")) for m in re.finditer(rx, _squash(notes))]


def _unit_agrees(readme_unit: str | None, cite: Citation, row: dict[str, Any]) -> bool:
    if readme_unit is None:
        return True
    if cite.field == "note":
        after = (cite.pattern or "").split("{}", 1)[-1].lstrip().replace("×", "x")
        return after.startswith(readme_unit)
    unit = "x" if cite.field == "ratio" else str(row.get("unit", ""))
    return (
        unit == readme_unit
        or unit.startswith(readme_unit + "/")
        or (unit == "fraction" and readme_unit == "%")
    )


def _cited_values(cite: Citation, row: dict[str, Any]) -> list[float | None]:
    if cite.field == "value":
        vals: list[float | None] = [row.get("value")]
    elif cite.field == "goal":
        vals = [row.get("goal")]
    elif cite.field == "baseline":
        vals = [row.get("baseline_value")]
    elif cite.field == "ratio":
        vals = [row.get("ratio")]
    elif cite.field == "ci":
        ci = row.get("ci") or {}
        vals = [ci.get("low"), ci.get("high")]
    else:
        vals = [*_note_values(str(row.get("notes", "")), cite.pattern or "")] or [None]
    if cite.unit == "%" and row.get("unit") == "fraction" and cite.field != "note":
        vals = [None if v is None else 100 * v for v in vals]
    return vals


def _decimals(written: str) -> int:
    return len(written.split(".", 1)[1]) if "." in written else 0


def _fmt(v: float, written: str) -> str:
    return f"{v:.{_decimals(written)}f}"


def check_citations(text: str, rows: Rows, path: str = "README.md") -> list[str]:
    """A problem line for each marker that does not resolve or whose figure is not what the
    cited rows hold (see the module docstring)."""
    cites, problems = parse_citations(text, path)
    for c in cites:
        where = f"{path}:{c.line}: {c.figure}"
        suite = rows.get(c.suite)
        if suite is None:
            problems.append(
                f"{where} cites suite {c.suite!r}, which has no bench/results/{c.suite}.json "
                f"(suites: {', '.join(sorted(rows))})"
            )
            continue
        values: list[float] = []
        resolved = True
        for name in c.rows:
            row = suite.get(name)
            if row is None:
                problems.append(f'{where} cites row "{name}", which {c.suite} does not have')
                resolved = False
                continue
            if not _unit_agrees(c.unit, c, row):
                problems.append(
                    f"{where} cites {c.source()}: unit {c.unit!r} does not agree with the row's "
                    f"{row.get('unit')!r}"
                )
                resolved = False
                continue
            got = _cited_values(c, row)
            if any(v is None or math.isnan(v) for v in got):
                problems.append(f'{where} cites {c.source()}: row "{name}" has no such figure')
                resolved = False
                continue
            values += [float(v) for v in got if v is not None]
        if not resolved:
            continue
        lo, hi = min(values), max(values)
        written_lo = c.lo.replace(",", "")
        if c.hi is None:
            shown = sorted({_fmt(v, c.lo) for v in values}, key=float)
            ok = shown == [written_lo]
            want = ", ".join(shown)
        else:
            want = f"{_fmt(lo, c.lo)}–{_fmt(hi, c.hi)}"
            ok = want == f"{written_lo}–{c.hi.replace(',', '')}"
        if not ok:
            unit = {"x": "×"}.get(c.unit or "", c.unit or "")
            sep = "" if unit in ("×", "%", "") else " "
            problems.append(
                f"{where} does not match {c.source()}: bench/results/{c.suite}.json gives "
                f"{want}{sep}{unit}"
            )
    return problems


def _paragraphs(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the blank-line separated blocks of ``text``."""
    out = []
    for m in re.finditer(r"(?:[^\n]*\S[^\n]*(?:\n|$))+", text):
        out.append((m.start(), m.end()))
    return out


def check_uncited(text: str, path: str = "README.md") -> list[str]:
    """A problem line for each figure with a unit, in a paragraph that cites the published
    benchmarks, that no marker follows."""
    problems = []
    prose = _prose(text)
    # what is not prose for this check: markers, quoted row names
    scan = _mask(_mask(prose, _MARKER), _QUOTED)
    for start, end in _paragraphs(prose):
        if not (_MARKER.search(prose, start, end) or _CITES_BENCH.search(prose, start, end)):
            continue
        for m in _FIGURE_WITH_UNIT.finditer(scan, start, end):
            if not text.startswith("<!--", m.end()):
                problems.append(
                    f"{path}:{_line_of(text, m.start())}: {_squash(m.group(0))} is in a "
                    "paragraph that cites the published benchmarks but has no "
                    '<!-- fig: SUITE / "ROW" --> after it'
                )
    return problems


def check_row_mentions(text: str, rows: Rows, path: str = "README.md") -> list[str]:
    """A problem line for each row the prose names (``rows "X"``) that no suite has."""
    names = [n for suite in rows.values() for n in suite]
    problems = []
    prose = _prose(_mask(text, _MARKER))
    for m in _ROW_MENTION.finditer(prose):
        for q in _QUOTED.finditer(m.group(1)):
            name = _squash(q.group(1))
            if name.endswith(("...", "…")):
                prefix = name.rstrip(".…").rstrip()
                found = any(n.startswith(prefix) for n in names)
            else:
                found = any(n == name or n.endswith(" " + name) for n in names)
            if not found:
                line = _line_of(text, m.start(1) + q.start())
                problems.append(f'{path}:{line}: names row "{name}", which no suite has')
    return problems


def check_readme(text: str, rows: Rows, path: str = "README.md") -> list[str]:
    """Every problem of the README's figures (see the module docstring), one line each."""
    return (
        check_citations(text, rows, path)
        + check_uncited(text, path)
        + check_row_mentions(text, rows, path)
    )


def figure_pages(root: Path = REPO_ROOT) -> list[Path]:
    """The pages whose figures are checked: README.md and the docs pages (not the generated
    benchmarks page, whose tables are the rows themselves)."""
    docs = sorted(p for p in (root / "docs").glob("*.md") if p.name != "benchmarks.md")
    return [root / "README.md", *docs]


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.readme_figures``: print the pages' figure problems; 1 if any."""
    p = argparse.ArgumentParser(prog="python -m bench.readme_figures", description=__doc__)
    p.add_argument("pages", type=Path, nargs="*", help="default: README.md and docs/*.md")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    rows = load_rows(args.results_dir)
    problems: list[str] = []
    cited = 0
    for page in args.pages or figure_pages():
        text = page.read_text(encoding="utf-8")
        path = page.resolve()
        name = (
            path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(page)
        )
        problems += check_readme(text, rows, name)
        cited += len(parse_citations(text, name)[0])
    for line in problems:
        print(line)
    print(f"{cited} cited figures, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
