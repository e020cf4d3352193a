"""Outputs of a benchmark run: per-suite JSON and docs/benchmarks.md (the PNG chart per suite:
:mod:`bench.harness.chart`).

``bench/results/<suite>.json`` holds one suite's latest run::

    {"suite": "engine", "mode": "full", "commit": "<40 hex>", "dirty": false,
     "started_at": "2026-11-25T03:18:44+00:00", "duration_s": 123.4, "machine": {...},
     "results": [{"suite": ..., "name": ..., "value": ..., "unit": ..., "goal": ...,
                  "goal_op": ">=", "baseline_value": ..., "ratio": ..., "notes": ...,
                  "passed": true, "samples": [...], "stat": "median", "status": "pass",
                  "ci": {"low": ..., "high": ..., "coverage": ...}}, ...]}

Invariants:

* ``commit`` is ``HEAD`` of the checkout the suite ran from when it started, ``dirty`` is true
  when the commit alone does not name the code that ran (tracked files changed when the suite
  started or ended, or ``HEAD`` moved while it ran), ``started_at`` is when the suite started
  (UTC) and ``duration_s`` how long it took. Files written before these fields existed may
  lack ``commit`` / ``dirty`` / ``started_at``: a commit is added to such a file only when git
  history establishes it (the commit that published the file names the commit it ran at),
  never guessed; ``machine.git_commit`` in old files is what their run saw and is not read.
* The markdown page is rebuilt from every suite file present, so a run of one suite keeps the
  latest figures of the others. Each suite's section names its own commit (or says "commit not
  recorded"), start and duration: suites of one page may come from different runs and commits,
  so the page names no commit of its own, and the run time is stated only there.
* ``python -m bench.report`` rebuilds the page from the JSON files without running anything.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from bench.harness.common import REPO_ROOT, RESULTS_DIR, Result, write_json

DOCS_PATH = REPO_ROOT / "docs" / "benchmarks.md"

# what the baseline of a suite's rows is (table headings and chart labels); default: a dict
BASELINE_LABELS: dict[str, tuple[str, str]] = {
    "spark_e2e": ("No-state baseline", "Variant/no-state"),
}


# -- JSON -----------------------------------------------------------------------------------------
def write_suite_json(
    results_dir: Path,
    suite: str,
    results: list[Result],
    machine: dict[str, Any],
    mode: str,
    duration_s: float,
    *,
    commit: str | None,
    dirty: bool,
    started_at: str,
    path: Path | None = None,
) -> Path:
    """Write ``<results_dir>/<suite>.json`` (fields: module docstring), or ``path`` in that
    format when given; returns its path."""
    path = path or results_dir / f"{suite}.json"
    write_json(
        path,
        {
            "suite": suite,
            "mode": mode,
            "commit": commit,
            "dirty": dirty,
            "started_at": started_at,
            "duration_s": round(duration_s, 2),
            "machine": machine,
            "results": [r.to_json() for r in results],
        },
    )
    return path


def load_suite_files(results_dir: Path) -> list[dict[str, Any]]:
    """Every suite file in ``results_dir``, the engine suite first, then by name."""
    docs = []
    for p in sorted(results_dir.glob("*.json")):
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(obj, dict) and "suite" in obj and isinstance(obj.get("results"), list):
            obj["_path"] = p
            docs.append(obj)
    docs.sort(key=lambda o: (o["suite"] != "engine", o["suite"]))
    return docs


# -- formatting -----------------------------------------------------------------------------------
def fmt_value(value: float | None, unit: str) -> str:
    """A figure with its unit, compact (``1.23 M ops/s``, ``0.31 ms``, ``1.12 x``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if unit.endswith("/s"):
        for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
            if abs(value) >= scale:
                return f"{value / scale:.3g}{suffix} {unit}"
        return f"{value:.0f} {unit}"
    if unit == "x":
        return f"{value:.2f} x"
    if abs(value) >= 100:
        return f"{value:,.0f} {unit}"
    if abs(value) >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.3g} {unit}"


def fmt_goal(r: Result) -> str:
    """The goal with its direction, or a dash."""
    if r.goal is None:
        return "—"
    return f"{'≥' if r.goal_op == '>=' else '≤'} {fmt_value(r.goal, r.unit)}"


def fmt_status(r: Result) -> str:
    """Pass / miss / error / info / skipped as a short word."""
    if r.notes.startswith("ERROR"):
        return "**error**"
    return {"pass": "pass", "miss": "**miss**", "info": "info", "skipped": "skipped"}[r.status]


def fmt_range(lo: float, hi: float, unit: str) -> str:
    """``[1.2, 1.5] x``: an interval with its unit once."""
    a, b = fmt_value(lo, unit), fmt_value(hi, unit)
    suffix = f" {unit}"
    if a.endswith(suffix) and b.endswith(suffix):
        return f"[{a[: -len(suffix)]}, {b[: -len(suffix)]}]{suffix}"
    return f"[{a}, {b}]"


def fmt_ci(r: Result) -> str:
    """The spread cell: CI of the median with its coverage and n, ``max of n`` or a dash."""
    n = len(r.samples)
    if r.stat == "max":
        return f"max of {n}" if n else "—"
    if r.stat == "derived":
        return "derived"
    ci = r.ci
    if ci is None:
        return "—" if n == 0 else f"n={n}"
    lo, hi, cov = ci
    return f"{fmt_range(lo, hi, r.unit)} ({100 * cov:.0f} %, n={n})"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- markdown -------------------------------------------------------------------------------------
HOW_TO_READ = """\
## How to read

* **Measured** is the median of the row's samples (`samples` in the JSON), unless its
  **CI of median** cell says otherwise: *max of n* rows show the largest sample (peak RSS over
  the worker processes), *derived* rows are computed once from other figures (their notes say
  how). Engine rows take several samples after warm-up calls (`time.perf_counter`, garbage
  collector enabled, a full collection before every sample of the engine and of the
  baseline); their throughputs are single-threaded, so *ops/s* is *ops/s per core*.
  End-to-end rows take one sample per measured micro-batch.
* **Goal** is the target for the figure; **Status** says whether Measured meets it (*info*
  rows have no goal and are there to explain other rows; *skipped* rows were not measured in
  that run, and their notes say why).
  **vs goal** is measured/goal for higher-is-better figures and goal/measured for
  lower-is-better ones: above 1 meets the goal, 0.5 means twice too slow.
* **CI of median** is a distribution-free confidence interval of the median: from the j-th
  smallest to the j-th largest sample, with the largest j whose coverage (binomial with p = 1/2)
  is at least 95 %; its coverage and the number of samples follow. Under 6 samples no such
  interval reaches 95 %: the cell then shows the whole range with its lower coverage (94 % for
  5 samples, 75 % for 3, 50 % for 2). A status whose interval straddles the goal is not settled
  by the run.
* **Dict baseline** is the same workload done with a plain Python `dict` in the same process
  (for *put_many + commit*, a dict plus the same rows written to a Parquet file), interleaved
  sample by sample with the engine, the two taking turns to go first (the ceiling for a
  pure-Python hot path); **Engine/dict** is the engine's median over the dict's median (0.5 =
  half as fast as a dict).
* *batch put_many* rows: `put_many` only appends the batch; its sort and key index are built
  by the first read or commit. *put_many + first get_many* (the goal row) times `put_many` and
  the `get_many` that follows it on a fresh store, *put_many + commit* times `put_many` and the
  commit (Parquet run, manifest, fsync); both count the rows put over the time of both calls,
  and their baselines do comparable work (the notes say what). *put_many alone* leaves the
  deferred work out and is informational.
* *TTL table* rows move the store's clock by 1 s before every sample, as Spark's micro-batches
  do, so every update moves its key's TTL index entry to a new expiry bucket.
* *write_amp* rows divide the bytes a commit writes (Parquet data files, from
  `CommitInfo.bytes_written`) by the Arrow `nbytes` of the key and value columns of the rows
  changed since the previous commit.
* *open* rows use a store built once with `put_many` batches and one commit per batch, cached
  under `bench/results/tmp/` (gitignored); the build time is reported (from the cache when it
  was reused). "first get" rows are the latency of the first `get` after opening, which loads
  the runs the key needs.
* End-to-end rows (`spark_e2e`): every variant (no state, Spark's native state, tiered state;
  per API flavour) processes the same micro-batch in each round, in rotating order. Rows/s,
  throughput ratios and wall-based *µs/call* rows are one sample per measured batch, paired by
  batch when they compare variants. The tiered queries run fsstate's keyed loop and the
  baselines PySpark's, so wall-based comparisons hold the loops' gap too (a negative
  wall-based *µs/call tiered*: the tiered query was the faster).
  **No-state baseline** is the median rows/s of the same
  query without state and **Variant/no-state** the variant's median over it.
  * *per-call native/tiered* (the per-call goal): per measured batch, native's in-worker µs per
    state call divided by tiered's. In-worker is the time measured in the Python worker around
    the processor's state calls, summed over all the batch's tasks on each side: the same
    batches, partitions and keys on both sides, tasks that restored their store included (the
    notes count them). Gross: nothing is subtracted from either side (the timer's own cost per
    key, measured on the no-state query, is in the notes).
  * *µs/call tiered all-in*: per measured batch, (time in the state calls + time getting the
    stores + time committing them (TTL cleanup, commit, hand-back), summed over the batch's
    tiered tasks, each measured in its worker around the adapter's calls) / state calls of the
    batch. Spark commits native state in the JVM, outside native's in-worker figure; the notes
    give native in-worker over tiered all-in as well. *first visit* is the same all-in figure
    for each task that restored its store; *fsstate ms/batch* is the all-in numerator per
    batch.
  * *memory-bounded* rows (full runs): the tiered query and the same query with no state, each
    from a fresh SparkSession; peak RSS is the largest `ru_maxrss` (taken after each task's
    commit) over the query's Python workers, and *peak RSS over no-state* is the difference of
    the two. `memory_limit` is per worker process: the notes give the state per partition and
    per worker against it.
* *spark_breakdown* rows (informative) split the micro-batches of one fsstate query (the
  windowed count of `spark_matrix`, at 4 and at 200 partitions) into parts, each the median
  over the measured batches: Spark's progress (`durationMs`), the flow driver's steps inside
  `addBatch`, the job's stages (Spark's event log), sums over the operator stage's tasks
  (wall, executor run, deserialization, scheduler) and over their epochs (acquire, process,
  commit, from the workers' epoch log); *count* rows count the tasks and how their stores
  were found (cached at the version, caught up, restored). With 2 cores a stage's wall time is
  about half its tasks' sum.
* *spark_jvm* rows: one keyed processor (the running aggregate) per flavour through
  `tiered()` on fsstate's keyed loop (*fast loop*, Spark's Python worker set to fsstate's) and
  on PySpark's own per-key loop (*stock loop*, `tiered(fast_loop=False)`), on Spark's handles
  and through the flow driver, against the same processor in Java on Spark's
  `transformWithState` with RocksDB (compiled by the suite with `javac`), per cell (rows per
  batch x shuffle partitions) all running in one session, each batch handed to one query at a
  time. *<side> / Java* rows: per timed batch, the side's `triggerExecution` over the Java
  query's (lower is better; goals for the fast loop and the driver: Row <= 1.0x, pandas <=
  2.0x); *stock loop / fast loop*: PySpark's loop's batch time over fsstate's under
  `tiered()` (goal >= 4x); *batch time* rows: each query's median. *loop cost per key* rows:
  one task's keyed loop in-process, without Spark or state (fsstate's worker loop, goal <= 10
  µs; PySpark's own, informative and without its per-key round trip to the state server), task
  wall time over its distinct keys.
* *spark_scale* rows: the same running aggregate with large state. Per cell (keys loaded
  beforehand, not timed: 1 M, 10 M, 30 M; `spark.fsstate.memoryLimit` 64 MiB or 1 GiB;
  100,000-row batches drawn uniformly or Zipf(1.1) over the keys; 4 or 200 partitions), every
  query restarts in a new SparkSession from a copy of the loaded state, then takes the cell's
  batches, each handed to one query at a time. *<side> / Java*: steady batch time over the
  Java processor's (RocksDB, Spark's defaults), paired by batch; *batch time / the 1M cell's*:
  the i-th steady batch over the 1 M cell's i-th (same seed); *first batch after restart*
  rows: the restart batch against the same query's steady batches and against Java's restart
  batch; *S3 / local disk*: `tiered()` with its state on a local S3 server over local disk;
  *bytes* rows: what a query's checkpoint and state files grew by per steady batch (mean) and
  their size after the last one, against the Java query with changelog checkpointing;
  *peak worker RSS*: the largest peak resident set of the cell's Python workers; *pandas
  tiered() fsstate's share*: (`tiered()` - the same processor with its state in a dict) /
  `tiered()`, same batch; *profiled* rows: `spark_key_breakdown`'s phases at 30 M keys.
* Figures depend on the machine (below) and on what else runs on it (each suite gives the load
  average when its run started: absolute figures move with it, ratios less); compare ratios
  rather than absolute values across machines.
"""


def _machine_lines(machine: dict[str, Any]) -> list[str]:
    mem = machine.get("memory_total_bytes")
    mem_txt = f", {mem / 1024**3:.0f} GiB RAM" if mem else ""
    phys = machine.get("cpu_count_physical")
    phys_txt = f" ({phys} physical)" if phys else ""
    return [
        f"* CPU: {machine.get('cpu_model', '?')}, {machine.get('cpu_count', '?')} logical cores"
        f"{phys_txt}{mem_txt}",
        f"* OS: {machine.get('platform', '?')}",
        f"* Python {machine.get('python', '?')}, pyarrow {machine.get('pyarrow', '?')}, "
        f"numpy {machine.get('numpy', '?')}, fsstate {machine.get('fsstate', '?')}",
    ]


def _utc(stamp: object) -> str:
    """An ISO timestamp as ``2026-11-25 03:18 UTC`` (as given if it does not parse)."""
    try:
        t = _dt.datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    if t.tzinfo is not None:
        t = t.astimezone(_dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M UTC")


def run_line(doc: dict[str, Any]) -> str:
    """What a suite section says about its run: mode, commit, start, duration, load, file."""
    machine = doc.get("machine", {})
    commit = doc.get("commit")
    if commit:
        at = f" at commit `{str(commit)[:7]}`"
        if doc.get("dirty"):
            at += " with uncommitted changes"
    else:
        at = ", commit not recorded"
    if machine.get("fsstate_in_checkout") is False:
        at += f" (fsstate imported from `{machine.get('fsstate_path', '?')}`, another checkout)"
    took = f"{doc.get('duration_s', 0):.0f} s"
    if doc.get("started_at"):
        when = f", started {_utc(doc['started_at'])}, took {took}"
    else:
        when = f"; the run started {_utc(machine.get('timestamp', '?'))}, this suite took {took}"
    load = machine.get("loadavg_1m_at_start")
    load_txt = f"; load average (1 min) {load} when the run started" if load is not None else ""
    return (
        f"`{doc.get('mode', '?')}` run{at}{when}{load_txt}; raw figures in "
        f"`bench/results/{doc['suite']}.json`."
    )


def _suite_section(doc: dict[str, Any], docs_dir: Path) -> list[str]:
    suite = doc["suite"]
    results = [Result.from_json(r) for r in doc["results"]]
    base_head, ratio_head = BASELINE_LABELS.get(suite, ("Dict baseline", "Engine/dict"))
    lines = [
        f"## Suite `{suite}`",
        "",
        run_line(doc),
        "",
        f"| Benchmark | Measured | Goal | Status | CI of median | vs goal | {base_head} | "
        f"{ratio_head} | Notes |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        factor = r.goal_factor
        lines.append(
            "| "
            + " | ".join(
                [
                    _md_escape(r.name),
                    fmt_value(r.value, r.unit) if not r.notes.startswith("ERROR") else "—",
                    fmt_goal(r),
                    fmt_status(r),
                    fmt_ci(r) if not r.notes.startswith("ERROR") else "—",
                    f"{factor:.2f}" if factor is not None else "—",
                    fmt_value(r.baseline_value, r.unit),
                    f"{r.ratio:.2f}" if r.ratio is not None else "—",
                    _md_escape(r.notes),
                ]
            )
            + " |"
        )
    passed = sum(1 for r in results if r.status == "pass")
    missed = sum(1 for r in results if r.status == "miss")
    skipped = sum(1 for r in results if r.status == "skipped" and r.goal is not None)
    skip_txt = f" ({skipped} more not measured in this run: skipped rows)" if skipped else ""
    lines += ["", f"{passed} of {passed + missed} goals met{skip_txt}."]
    chart = doc["_path"].with_suffix(".png")
    if chart.exists():
        rel = Path(os.path.relpath(chart, docs_dir))
        lines += ["", f"![{suite} benchmarks]({rel.as_posix()})"]
    lines.append("")
    return lines


def write_docs(results_dir: Path, path: Path = DOCS_PATH) -> Path:
    """Regenerate the benchmarks page from every suite file in ``results_dir``."""
    docs = load_suite_files(results_dir)
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m bench.run` (make bench / make bench-quick) or, from the "
        "JSON alone, `python -m bench.report` (make bench-report); do not edit by hand, edit "
        "bench/harness/report.py. -->",
        "",
        "Figures of each suite's latest `make bench` (`--full`) or `make bench-quick` "
        "(`--quick`) run. Suites run separately: each section names the commit, start and "
        "duration of its own run. "
        "The engine suite measures fsstate tables in-process against a plain Python dict; "
        "end-to-end suites (when present) measure a whole streaming query.",
        "",
        HOW_TO_READ,
    ]
    if docs:
        lines += ["## Machine", ""]
        first = _machine_lines(docs[0].get("machine", {}))
        lines += first
        for d in docs[1:]:
            own = _machine_lines(d.get("machine", {}))
            if d.get("machine", {}).get("cpu_model") and own != first:
                lines.append(f"* suite `{d['suite']}` ran on a machine or software that differs:")
                lines += ["  " + x for x in own]
        lines.append("")
    else:
        lines += ["No results yet: run `make bench-quick`.", ""]
    for d in docs:
        lines += _suite_section(d, path.parent)
    lines += [
        "## Reproducing and profiling",
        "",
        "* `make bench-quick` or `make bench` (builds a 1 GiB store once; how long each suite "
        "took is in its section above). `python -m bench.run --quick --only hot` runs one "
        "group; `--suite NAME` one suite; `--engine-only` skips Spark.",
        "* `make bench-report` (`python -m bench.report`) rebuilds this page from "
        "`bench/results/*.json` without running anything.",
        "* `python -m bench.profile --list` lists the profiled engine calls; "
        "`python -m bench.profile get_many_cold` prints where the time of one goes (cProfile).",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.report``: rebuild the benchmarks page from the suite JSON files."""
    p = argparse.ArgumentParser(
        prog="python -m bench.report",
        description="Rebuild docs/benchmarks.md from bench/results/*.json (runs no benchmark).",
    )
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="suite JSON files")
    p.add_argument("--out", type=Path, default=DOCS_PATH, help="the page to write")
    args = p.parse_args(argv)
    if not load_suite_files(args.results_dir):
        print(f"no suite JSON in {args.results_dir}", file=sys.stderr)
        return 1
    print(f"wrote {write_docs(args.results_dir, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
