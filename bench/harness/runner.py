"""Benchmark runner: ``python -m bench.run --quick|--full [--engine-only] [--only NAME ...]``
``[--rows-to FILE]``.

Suites live in a registry. A suite is a module of :mod:`bench.suites` with a function
``run(ctx: BenchContext) -> list[Result]`` (:mod:`bench.harness.common`); it is imported only
when it runs, so a suite whose module or dependencies are missing is reported as skipped
instead of breaking the others. A suite may also raise
:class:`~bench.harness.common.SuiteSkipped` with a reason (no Java, no Spark, ...).

To add a suite, write ``bench/suites/<name>.py`` with such a ``run`` function and add one
``register(Suite(...))`` line below (``engine=False`` for suites that ``--engine-only`` skips).
``python -m bench.run`` (:mod:`bench.run`) is this module's command.

Outputs, for every suite that ran:

* ``bench/results/<suite>.json``: machine info, mode, the commit the suite ran at (and whether
  the tree was dirty or ``HEAD`` moved while it ran), its start and duration, and the result
  records (format: :mod:`bench.harness.report`);
* ``bench/results/<suite>.png``: the chart (:mod:`bench.harness.chart`);
* ``docs/benchmarks.md``: rebuilt from every ``bench/results/*.json`` present
  (``python -m bench.report`` rebuilds it without running anything).

``--rows-to FILE`` (one suite): the suite's JSON goes to ``FILE`` instead, ``--only`` or not,
and nothing else is written (no chart, no page): how a suite hands the rows of another suite's
run, made in another interpreter, to its own (``spark_minors``).

Invariants: suites run in registration order, each imported only when it runs; a suite's
files are written only by a run of the whole suite (``--only`` prints its rows and writes
nothing, ``--rows-to`` writes them only to the file given); a skipped or crashed suite leaves
its previous files as they were (and writes no ``--rows-to`` file).

Exit status: 0 when every suite ran (missed goals are figures, not failures), 1 when a suite
crashed or a benchmark raised.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.chart import write_chart
from bench.harness.common import (
    RESULTS_DIR,
    BenchContext,
    Result,
    SuiteSkipped,
    git_state,
    machine_info,
    utc_now,
)
from bench.harness.report import (
    DOCS_PATH,
    fmt_ci,
    fmt_goal,
    fmt_value,
    write_docs,
    write_suite_json,
)


@dataclass(frozen=True)
class Suite:
    """A registered benchmark suite.

    Attributes:
        name: suite name; also the stem of its result files.
        module: module holding the suite, imported lazily.
        func: name of the ``run(ctx) -> list[Result]`` function in the module.
        engine: whether it is an engine-only suite (``--engine-only`` runs only these).
        description: one line for ``--list``.
    """

    name: str
    module: str
    func: str = "run"
    engine: bool = True
    description: str = ""

    def load(self) -> Callable[[BenchContext], list[Result]]:
        """Import the module and return its run function.

        Raises:
            SuiteSkipped: the suite's module is not present.
        """
        try:
            mod = importlib.import_module(self.module)
        except ModuleNotFoundError as exc:
            if exc.name == self.module:
                raise SuiteSkipped(f"module {self.module} is not present") from exc
            raise SuiteSkipped(f"missing dependency {exc.name!r}") from exc
        fn: Callable[[BenchContext], list[Result]] = getattr(mod, self.func)
        return fn


SUITES: dict[str, Suite] = {}


def register(suite: Suite) -> Suite:
    """Add a suite to the registry (suites run in registration order)."""
    SUITES[suite.name] = suite
    return suite


register(
    Suite(
        "engine",
        "bench.suites.engine",
        description="engine micro-benchmarks against a plain dict (hot ops, batches, commits, "
        "write amplification, open time, lists and maps)",
    )
)
register(
    Suite(
        "storage",
        "bench.suites.storage",
        description="requests, bytes and time of commits, opens and catch-ups: local disk and "
        "an S3 server on loopback (SeaweedFS)",
    )
)
register(
    Suite(
        "lineages",
        "bench.suites.lineages",
        description="a commit's p99 beside 500 lineages, and fsstate gc over 500 lineages x 100 "
        "versions (time and requests)",
    )
)
register(
    Suite(
        "operators",
        "bench.suites.operators",
        description="watermark cleanup of the whole-batch operators: 1% of 1,000,000 keys "
        "expiring per epoch",
    )
)
register(
    Suite(
        "spark_storage",
        "bench.suites.spark_storage",
        engine=False,
        description="the same Spark job with tiered state on local disk and on S3 (loopback)",
    )
)
register(
    Suite(
        "spark_operators",
        "bench.suites.spark_operators",
        engine=False,
        description="windowed count and keyed running aggregate: fsstate operators against "
        "Spark's built-ins and transformWithStateInPandas (native and tiered)",
    )
)
register(
    Suite(
        "spark_matrix",
        "bench.suites.spark_matrix",
        engine=False,
        description="fsstate operators against Spark's built-ins over {4, 200 partitions} x "
        "{2, 20 rows per key} x {windowed count, running aggregate}, fsync on and off",
    )
)
register(
    Suite(
        "spark_floor",
        "bench.suites.spark_floor",
        engine=False,
        description="the floors under spark_matrix's 4-partition cells: Spark's own aggregate "
        "of each batch without state, and with a Python stage after it, against the built-in",
    )
)
register(
    Suite(
        "spark_breakdown",
        "bench.suites.spark_breakdown",
        engine=False,
        description="where a batch's time goes (Spark's progress, the flow driver, the job's "
        "stages, the tasks and their epochs): fsstate's windowed count at 4 and 200 partitions",
    )
)
register(
    Suite(
        "spark_driver",
        "bench.suites.spark_driver",
        engine=False,
        description="unchanged StatefulProcessors (pandas and Row) through the flow driver "
        "against transformWithStateInPandas / transformWithState, and the driver's cost per key",
    )
)
register(
    Suite(
        "spark_jvm",
        "bench.suites.spark_jvm",
        engine=False,
        description="the running aggregate through tiered() (fsstate's loop and PySpark's), "
        "Spark's handles and the flow driver against the same processor in Java on "
        "transformWithState, {50k, 500k rows} x {4, 200 partitions}; the loop's cost per key",
    )
)
register(
    Suite(
        "spark_python_floor",
        "bench.suites.spark_python_floor",
        engine=False,
        description="the floor of Spark's Python transformWithState operator: an idle Python "
        "processor, on Spark's loop and under tiered(), against the Java running aggregate, "
        "at 4 and 200 partitions",
    )
)
register(
    Suite(
        "spark_key_breakdown",
        "bench.suites.spark_key_breakdown",
        engine=False,
        description="where a key's time goes in tiered() at 500k rows per batch (input, the "
        "processor, state reads and writes, first touch, commit, output, the loop), from one "
        "profiled run, against the same processor with its state in a dict",
    )
)
register(
    Suite(
        "spark_metrics",
        "bench.suites.spark_metrics",
        engine=False,
        description="what recording and reporting fsstate's metrics costs a batch (summaries, "
        "receipts, the listener with JSON lines and a Prometheus sink): tiered() and the flow "
        "driver with metrics on and off, side by side, at 4 and 200 partitions",
    )
)
register(
    Suite(
        "spark_minors",
        "bench.suites.spark_minors",
        engine=False,
        description="spark_jvm's 50k-rows, 4-partitions cell (tiered() on fsstate's loop and "
        "on PySpark's, pandas and Row, against the Java processor) on each PySpark minor, "
        "4.0 to 4.3, each in its own virtualenv: what fsstate's loop gains on each release",
    )
)
register(
    Suite(
        "spark_scale",
        "bench.suites.spark_scale",
        engine=False,
        description="the running aggregate with 1 M, 10 M and 30 M keys loaded, budgets of 64 "
        "MiB and 1 GiB, uniform and Zipf keys: tiered() and the flow driver (Row and pandas) "
        "against the Java processor on RocksDB (default and changelog checkpointing); growth, "
        "restarts, S3, bytes, worker RSS, and the cold path's phases at 30 M keys",
    )
)
register(
    Suite(
        "spark_e2e",
        "bench.suites.spark_e2e",
        engine=False,
        description="end-to-end transformWithStateInPandas and transformWithState (Row) queries",
    )
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes")
    size.add_argument(
        "--full",
        action="store_true",
        help="full sizes (how long each suite took last time: docs/benchmarks.md)",
    )
    p.add_argument("--engine-only", action="store_true", help="skip non-engine suites (Spark)")
    p.add_argument(
        "--suite", action="append", default=[], metavar="NAME", help="run only this suite"
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only benchmark groups whose name contains TEXT (e.g. hot, batch, open)",
    )
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where results go")
    p.add_argument(
        "--rows-to",
        type=Path,
        metavar="FILE",
        help="one suite: write its JSON to FILE (--only or not) and no chart nor docs page",
    )
    p.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS_PATH.name}")
    p.add_argument("--list", action="store_true", help="list the suites and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p.parse_args(argv)


def _print_table(results: list[Result]) -> None:
    width = max((len(r.name) for r in results), default=10)
    for r in results:
        ratio = f"  engine/dict {r.ratio:.2f}" if r.ratio is not None else ""
        print(
            f"  {r.name:<{width}}  {fmt_value(r.value, r.unit):>16}  goal {fmt_goal(r):<18} "
            f"{r.status:<5} CI {fmt_ci(r):<34}{ratio}"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the selected suites and write their outputs; returns the exit status."""
    args = _parse(argv)
    if args.list:
        for s in SUITES.values():
            kind = "engine" if s.engine else "e2e"
            print(f"{s.name:<12} [{kind}] {s.description}")
        return 0
    mode = "full" if args.full else "quick"
    results_dir: Path = args.results_dir
    ctx = BenchContext(
        mode=mode,
        results_dir=results_dir,
        tmp_dir=results_dir / "tmp",
        only=list(args.only),
        verbose=not args.quiet,
    )
    unknown = [s for s in args.suite if s not in SUITES]
    if unknown:
        print(f"unknown suite(s) {unknown}; known: {sorted(SUITES)}", file=sys.stderr)
        return 2
    selected = [
        s
        for s in SUITES.values()
        if (not args.suite or s.name in args.suite) and (s.engine or not args.engine_only)
    ]
    if args.rows_to is not None and len(selected) != 1:
        print(f"--rows-to takes one suite, not {[s.name for s in selected]}", file=sys.stderr)
        return 2
    machine = machine_info()
    machine["mode"] = mode
    status = 0
    t_all = time.perf_counter()
    for suite in selected:
        status = max(status, _run_suite(suite, ctx, args, machine))
    if not args.no_docs and not args.only and args.rows_to is None:
        ctx.log(f"wrote {write_docs(results_dir)}")
    ctx.log(f"all done in {time.perf_counter() - t_all:.0f} s")
    return status


def _run_suite(
    suite: Suite, ctx: BenchContext, args: argparse.Namespace, machine: dict[str, Any]
) -> int:
    """Run one suite and, unless ``--only`` narrowed it, write its JSON file and chart (with
    ``--rows-to``: its JSON file there, and no chart).

    Returns:
        1 when the suite crashed or a benchmark of it raised, else 0 (skipped included).
    """
    ctx.log(f"suite {suite.name} ({ctx.mode})")
    git_before = git_state()
    started_at = utc_now()
    t0 = time.perf_counter()
    try:
        results = suite.load()(ctx)
    except SuiteSkipped as exc:
        ctx.log(f"suite {suite.name} skipped: {exc}")
        return 0
    except Exception as exc:
        ctx.log(f"suite {suite.name} crashed: {exc!r}")
        import traceback

        traceback.print_exc()
        return 1
    duration = time.perf_counter() - t0
    git_after = git_state()
    status = 1 if any(r.notes.startswith("ERROR") for r in results) else 0
    if args.only and args.rows_to is None:
        ctx.log("--only given: results not written (a partial run would replace the file)")
    else:
        path = write_suite_json(
            ctx.results_dir,
            suite.name,
            results,
            machine,
            ctx.mode,
            duration,
            commit=git_before.commit,
            # the commit names the code only if the tree was clean and HEAD stayed put throughout
            dirty=git_before.dirty or git_after.dirty or git_before.commit != git_after.commit,
            started_at=started_at,
            path=args.rows_to,
        )
        if args.rows_to is not None:
            ctx.log(f"wrote {path} (--rows-to: no chart, no docs page)")
        else:
            chart = write_chart(
                ctx.results_dir / f"{suite.name}.png",
                suite.name,
                results,
                f"{ctx.mode} run, {machine['cpu_count']} cores, {machine['timestamp']}",
            )
            ctx.log(f"wrote {path}" + (f" and {chart}" if chart else ""))
    print(f"\n{suite.name} ({ctx.mode}, {duration:.0f} s):")
    _print_table(results)
    return status


if __name__ == "__main__":
    sys.exit(main())
