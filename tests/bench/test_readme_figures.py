# ruff: noqa: RUF001 (README figures use the multiplication sign and en-dash ranges)
"""The figures of README.md and of the docs pages equal the published benchmark rows they cite.

The checks are :mod:`bench.harness.readme_figures` (``python -m bench.readme_figures``).

The first tests read the real pages (README.md and docs/*.md but the generated benchmarks page)
and bench/results/*.json: each fails with one line per problem, naming the page's line and the
cited row. README.md keeps one headline figure; the performance page holds the others. The
other tests run the same checks on small made-up READMEs to show what each check catches and
what it leaves alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.harness.readme_figures import (
    DOCS_DIR,
    README_PATH,
    Rows,
    check_citations,
    check_row_mentions,
    check_uncited,
    figure_pages,
    load_rows,
    parse_citations,
)

PAGES = figure_pages()
# pages that must cite published figures (a marker syntax that stopped parsing shows here)
CITING = [README_PATH, DOCS_DIR / "performance.md"]


def _fail_on(problems: list[str]) -> None:
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(scope="module")
def published() -> Rows:
    return load_rows()


def _name(page: Path) -> str:
    return page.relative_to(README_PATH.parent).as_posix()


@pytest.mark.parametrize("page", CITING, ids=_name)
def test_page_cites_published_figures(page: Path) -> None:
    cites, problems = parse_citations(page.read_text("utf-8"), _name(page))
    _fail_on(problems)
    assert cites, f"{_name(page)} cites no published figure: is the marker syntax still parsed?"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_page_figures_match_their_published_rows(page: Path, published: Rows) -> None:
    _fail_on(check_citations(page.read_text("utf-8"), published, _name(page)))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_page_figures_from_the_published_run_are_all_cited(page: Path) -> None:
    _fail_on(check_uncited(page.read_text("utf-8"), _name(page)))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_page_row_names_exist(page: Path, published: Rows) -> None:
    _fail_on(check_row_mentions(page.read_text("utf-8"), published, _name(page)))


# -- the checks on made-up READMEs -------------------------------------------------------------
def _row(name: str, value: float, unit: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "notes": "", **extra}


ROWS: Rows = {
    "ops": {
        r["name"]: r
        for r in [
            _row("a: vs builtin", 1.679, "x", goal=1.5, ci={"low": 1.306, "high": 1.843}),
            _row("b: vs builtin", 1.648, "x", goal=1.5, ci={"low": 0.469, "high": 2.078}),
            _row("calls", 90.4, "µs/call", notes="in-worker 320 µs/call; 50,000 rows per batch"),
            _row("share", 0.0151, "fraction"),
        ]
    }
}


@pytest.mark.parametrize(
    "text",
    [
        'ran 1.68×<!-- fig: ops / "a: vs builtin" --> the throughput',
        'ran 1.68x<!-- fig: ops / "a: vs builtin" / value -->',
        'ran 1.7×<!-- fig: ops / "a: vs builtin" -->',  # fewer decimals, still the row's
        'ran 1.65–1.68×<!-- fig: ops / "a: vs builtin",\n"b: vs builtin" -->',
        'goal 1.5×<!-- fig: ops / "a: vs builtin", "b: vs builtin" / goal -->',
        'CI 0.47–2.08×<!-- fig: ops / "b: vs builtin" / ci -->',
        'took 90 µs<!-- fig: ops / "calls" --> a call',
        'took 320 µs<!-- fig: ops / "calls" / note "in-worker {} µs/call" -->',
        '50,000<!-- fig: ops / "calls" / note "{} rows per batch" --> rows',
        'a 1.5%<!-- fig: ops / "share" --> share',
    ],
)
def test_a_cited_figure_equal_to_its_rows_passes(text: str) -> None:
    cites, problems = parse_citations(text)
    assert len(cites) == 1 and not problems
    assert check_citations(text, ROWS) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'intro\nran 1.69×<!-- fig: ops / "a: vs builtin" -->',
            'README.md:2: 1.69× does not match ops "a: vs builtin" (value): '
            "bench/results/ops.json gives 1.68×",
        ),
        (
            'ran 0.52–0.56×<!-- fig: ops / "a: vs builtin", "b: vs builtin" -->',
            'README.md:1: 0.52–0.56× does not match ops "a: vs builtin", "b: vs builtin" '
            "(value): bench/results/ops.json gives 1.65–1.68×",
        ),
        (
            'took 321 µs<!-- fig: ops / "calls" / note "in-worker {} µs/call" -->',
            'README.md:1: 321 µs does not match ops "calls" (note "in-worker {} µs/call"): '
            "bench/results/ops.json gives 320 µs",
        ),
        (
            'ran 1.68×<!-- fig: nope / "a: vs builtin" -->',
            "README.md:1: 1.68× cites suite 'nope', which has no bench/results/nope.json "
            "(suites: ops)",
        ),
        (
            'ran 1.68×<!-- fig: ops / "c: vs builtin" -->',
            'README.md:1: 1.68× cites row "c: vs builtin", which ops does not have',
        ),
        (
            'took 90 ms<!-- fig: ops / "calls" -->',
            "README.md:1: 90 ms cites ops \"calls\" (value): unit 'ms' does not agree with the "
            "row's 'µs/call'",
        ),
        (
            'took 9 µs<!-- fig: ops / "calls" / note "out-of-worker {} µs" -->',
            'README.md:1: 9 µs cites ops "calls" (note "out-of-worker {} µs"): row "calls" has '
            "no such figure",
        ),
        (
            'ran 1.68× <!-- fig: ops / "a: vs builtin" -->',
            "README.md:1: marker 'ops / \"a: vs builtin\"' has no figure right before it",
        ),
    ],
)
def test_a_wrong_or_unresolved_citation_names_the_line_and_the_row(text: str, message: str) -> None:
    assert check_citations(text, ROWS) == [message]


def test_a_marker_that_does_not_parse_is_a_problem() -> None:
    (problem,) = check_citations('ran 1.68×<!-- fig: ops "a: vs builtin" -->', ROWS)
    assert problem.startswith('README.md:1: marker "<!-- fig: ops "a: vs builtin" -->" does not')


def test_uncited_figures_are_flagged_only_in_paragraphs_citing_the_published_run() -> None:
    text = "\n".join(
        [
            'In the published run it ran 1.68×<!-- fig: ops / "a: vs builtin" --> and 1.65×',
            'faster, with a `256MiB` budget (rows "a: vs builtin" and "b: 9 ms").',
            "",
            "Measured by hand with a test job: 249–258 MiB, 20 s, 1.5x.",
            "",
            "| settings | peak RSS |",
            "| default | 193 MiB |",
        ]
    )
    assert check_uncited(text) == [
        "README.md:1: 1.65× is in a paragraph that cites the published benchmarks but has no <!-- "
        'fig: SUITE / "ROW" --> after it'
    ]


def test_row_names_in_the_prose_must_exist() -> None:
    text = (
        'rows "a: vs builtin", "vs builtin" and "b: ..." are there;\n'
        'row "c: vs\nbuiltin" is not; `rows "in code"` is not prose'
    )
    assert check_row_mentions(text, ROWS) == [
        'README.md:2: names row "c: vs builtin", which no suite has'
    ]
