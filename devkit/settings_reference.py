"""The configuration reference's tables, generated from the settings in the code.

``python -m devkit.settings_reference`` writes ``docs/snippets/settings_reference.md``, which
``docs/configuration.md`` includes; ``--check`` exits 1 when that file differs from what the
code gives (``make docs`` runs the check, ``tests/docs/test_configuration.py`` too).

Sources, each read from the code, so a setting added there changes the page:

* the fields of :class:`fsstate.StoreConfig` and :class:`fsstate.EngineConfig` (defaults and
  the ``Attributes:`` of their docstrings), the shared settings of
  :class:`fsstate_spark.settings.StateSettings`, the products' extra ones
  (:data:`fsstate_spark.tiered.settings.TIERED_FIELDS`,
  :data:`fsstate_spark.operators.settings.FLOW_FIELDS`): which product takes each setting comes
  from those sets;
* the object store settings fsstate reads or checks (:mod:`fsstate.storage.location`,
  :mod:`fsstate.storage.objects`), the options of ``format("fsstate")``, the environment
  variables and the Spark settings: listed in this module with their meaning, and compared with
  the code by the tests (a name the code reads that no row lists fails them).

Invariants: the output depends only on the code (no clock, no machine); every setting has a
description, a default and a unit or form, or generation fails naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Any

from devkit.repo import ROOT

OUT = ROOT / "docs" / "snippets" / "settings_reference.md"

# unit or form of a setting, where its name and type do not say it
UNITS = {
    "memory_limit": "bytes, or a size: `256MiB`, `1.5GB`",
    "high_watermark": "fraction of `memory_limit`",
    "low_watermark": "fraction of `memory_limit`",
    "block_cache_fraction": "fraction of `memory_limit`",
    "compaction_bytes_per_round": "bytes",
    "row_group_bytes": "bytes",
    "check_every_growth": "growth events",
    "compaction_max_runs": "runs",
    "compaction_queue_max": "requests",
    "orphan_scan_every_commits": "commits",
    "retain_versions": "versions",
    "row_group_rows": "rows",
    "max_cached_stores": "stores per worker",
    "compression": "`zstd`, `snappy`, `lz4`, `gzip` or `none`",
    "state_uri": "a local path or `s3://`, `gs://`, `az://` URI",
    "storage_options": "a dict of object store settings (below)",
    "name": "letters, digits, `. _ = -`",
    "partitions": "partitions (key groups)",
    "tasks": "Spark tasks per stage",
    "metrics": "flag: true/false, 1/0, yes/no, on/off",
}
SHARED_DOCS = {
    "state_uri": "Where the state lives; the stores of a `tiered()` query are under "
    "`<state_uri>/<query id>/<name>/<partition>`, a flow's under `<state_uri>/<operator>/`.",
    "memory_limit": "The engine's byte budget in each Python worker: hot state, caches and "
    "spill buffers; state beyond it is spilled to Parquet.",
    "max_cached_stores": "Committed stores a worker keeps to reuse in the next micro-batch "
    "(least recently used closed beyond that; 0 disables reuse).",
    "metrics": "Record each version's summary (rows, bytes, memory, spill, commit time) and "
    "send it to the driver with the task's receipt, for `fsstate_spark.progress`, the "
    "listener and Prometheus ([monitoring](monitoring.md)); `false`: nothing is recorded "
    "or reported.",
    "storage_options": "Object store settings; they travel to the workers with the processor "
    "or the flow, and win over `spark.fsstate.storage.<name>`, the URI and the environment.",
}
DEFAULTS = {
    "state_uri": "`tiered()`: `<spark.sql.streaming.checkpointLocation>/fsstate`, else "
    "`./fsstate_state`; flows: `<checkpoint_location>/fsstate`",
    "memory_limit": "`FSSTATE_MEMORY_LIMIT`, else 1 GiB",
    "storage_options": "none",
    "name": "the processor's class name",
    "metrics": "true",
}


def _bytes_text(value: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size and value % size == 0:
            return f"{value} ({value // size} {unit})"
    return str(value)


def attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a class's docstring: name -> text (one line)."""
    doc = cls.__doc__ or ""
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    out: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        m = re.match(r"^\s{4,8}(\w+): (.*)$", line)
        if m and len(line) - len(line.lstrip()) <= 8:
            name = m.group(1)
            out[name] = m.group(2).strip()
        elif name and line.strip():
            out[name] += " " + line.strip()
    cleaned = {
        k: re.sub(r":\w+:`~?([^`]+)`", r"`\1`", v).replace("``", "`") for k, v in out.items()
    }
    return {k: v[:1].upper() + v[1:] for k, v in cleaned.items()}


def camel(name: str) -> str:
    """``retain_versions`` -> ``retainVersions`` (the ``spark.fsstate.*`` spelling)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def unit_of(name: str, default: Any) -> str:
    """A setting's unit or form: from :data:`UNITS`, its name's suffix, or its type."""
    if name in UNITS:
        return UNITS[name]
    if name.endswith("_ms"):
        return "ms"
    if isinstance(default, bool):
        return "flag: true/false, 1/0, yes/no, on/off"
    if isinstance(default, (int, float)):
        return "number"
    raise ValueError(f"setting {name!r} has no unit: add it to devkit.settings_reference.UNITS")


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _taken_by(name: str) -> str:
    from fsstate_spark.operators.settings import FLOW_FIELDS
    from fsstate_spark.tiered.settings import TIERED_FIELDS

    calls = [
        c
        for c, known in (("tiered()", TIERED_FIELDS), ("write_stream()", FLOW_FIELDS))
        if name in known
    ]
    return ", ".join(f"`{c}`" for c in calls)


QUERY_EXTRA = {  # settings of one product: (default, meaning)
    "name": ("the processor's class name", "The `tiered()` state's name in its query."),
    "fast_loop": (
        "true",
        "Run the processor with fsstate's keyed loop where the executors' Python worker is "
        "fsstate's (`spark.python.worker.module=pyspark_fsstate.worker`); false: PySpark's own "
        "per-key loop.",
    ),
    "combine": (
        "true",
        "Pre-aggregate decomposable aggregates with Spark's own aggregate before the stage's "
        "shuffle (each epoch decides again from the previous one's record).",
    ),
}
WRITE_STREAM_ONLY = {  # arguments of ops.write_stream only (not spark.fsstate.*)
    "checkpoint_location": ("required", "a directory or URI", "Spark's checkpoint of the query."),
    "partitions": (
        "8",
        UNITS["partitions"],
        "Where keys live: each partition is a store "
        "(recorded with the state; another count rescales it at the next start).",
    ),
    "tasks": (
        "the default parallelism, at most `partitions`",
        UNITS["tasks"],
        "Spark tasks that run a stage's partitions per batch.",
    ),
}


def query_table() -> list[str]:
    """The settings of `tiered()` and `ops.write_stream()` other than store and engine ones."""
    from fsstate_spark.settings import SHARED_FIELDS, StateSettings

    attrs = attribute_docs(StateSettings)
    lines = [
        _row("Setting", "`spark.fsstate.*`", "Default", "Unit or form", "Taken by", "Meaning"),
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(SHARED_FIELDS):
        default = DEFAULTS.get(name) or str(getattr(StateSettings, name, ""))
        if name == "max_cached_stores":
            from fsstate_spark.settings import MAX_CACHED_STORES_DEFAULT

            default = str(MAX_CACHED_STORES_DEFAULT)
        key = "`storage.<name>`" if name == "storage_options" else f"`{camel(name)}`"
        meaning = SHARED_DOCS.get(name) or attrs[name]
        lines.append(_row(f"`{name}`", key, default, unit_of(name, None), _taken_by(name), meaning))
    for name, (default, meaning) in QUERY_EXTRA.items():
        unit = UNITS.get(name) or "flag: true/false, 1/0, yes/no, on/off"
        lines.append(_row(f"`{name}`", f"`{camel(name)}`", default, unit, _taken_by(name), meaning))
    for name, (default, unit, meaning) in WRITE_STREAM_ONLY.items():
        lines.append(_row(f"`{name}`", "no", default, unit, "`write_stream()`", meaning))
    return lines


def config_table(cls: type, skip: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """One row per field of a config dataclass (but ``skip``: settings listed elsewhere)."""
    attrs = attribute_docs(cls)
    lines = [
        _row("Setting", "`spark.fsstate.*`", "Default", "Unit or form", "Taken by", "Meaning"),
        "|---|---|---|---|---|---|",
    ]
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name not in attrs:
            raise ValueError(f"{cls.__name__}.{f.name} has no line in its docstring's Attributes")
        name = f.name
        default: Any = f.default
        shown = _bytes_text(default) if "bytes" in unit_of(name, default) else str(default)
        if isinstance(default, bool):
            shown = str(default).lower()
        taken = _taken_by(name) or "no"
        key = f"`{camel(name)}`" if taken != "no" else "no"
        lines.append(_row(f"`{name}`", key, shown, unit_of(name, default), taken, attrs[f.name]))
    return lines


FLAG = "flag"
# object store settings fsstate reads or checks itself: name -> (default, form, meaning)
STORAGE_OPTIONS = {
    "single_writer": (
        "false",
        FLAG,
        "fsstate: declare that no two attempts ever write one store "
        "at once, for a store that ignores conditional writes (else refused).",
    ),
    "retries_max": (
        "4",
        "whole number",
        "fsstate: retries of a failed request (throttling, 5xx, resets), with exponential backoff.",
    ),
    "retry_timeout_ms": ("30000", "ms", "fsstate: the time within which a request is retried."),
    "endpoint": (
        "the provider's",
        "`http(s)://host[:port][/path]`",
        "The store's address (S3-compatible servers); plain http needs `allow_http`.",
    ),
    "region": ("the provider's", "text", "The bucket's region."),
    "access_key_id": ("from the environment", "text (secret: never shown)", "Credentials."),
    "secret_access_key": ("from the environment", "text (secret: never shown)", "Credentials."),
    "session_token": ("from the environment", "text (secret: never shown)", "Credentials."),
    "allow_http": ("false", FLAG, "Allow a plain http endpoint."),
    "allow_invalid_certificates": ("false", FLAG, "Skip TLS certificate checks."),
    "timeout": ("30s", "duration: `30s`, `500ms`, `2min`", "Timeout of a request."),
    "connect_timeout": ("5s", "duration", "Timeout of a connection."),
    "pool_idle_timeout": ("the client's", "duration", "How long an idle connection is kept."),
    "pool_max_idle_per_host": ("the client's", "whole number", "Idle connections kept per host."),
    "proxy_url": ("none", "URL", "An HTTP proxy."),
    "user_agent": ("the client's", "text", "The User-Agent header."),
    "http1_only": ("false", FLAG, "Only HTTP/1."),
    "http2_only": ("false", FLAG, "Only HTTP/2."),
}
# the options of spark.read.format("fsstate"): name -> (default, meaning)
SOURCE_OPTIONS = {
    "path": (
        "required",
        "A checkpoint location (its `fsstate/` and query id are found) or a state URI.",
    ),
    "queryId": ("the checkpoint's, or the only one", "The query under a shared state URI."),
    "operatorName": ("the only one", "The `tiered()` state name or the flow's operator."),
    "stateVarName": ("the only one", "The state variable."),
    "batchId": ("the newest every partition has", "The version to read."),
    "branch": (
        "the lineage committed last (with a warning naming the other live ones, if any)",
        "The lineage to read: another lineage of the query, after its checkpoint was copied, "
        "restored or rolled back (`fsstate branches` lists them).",
    ),
    "partial": (
        "false",
        "Read the partitions that hold the lineage when others lack it (partial state); "
        "without it such a read is refused, naming the missing partitions.",
    ),
    "flattenCollectionTypes": (
        "true",
        "A row per list element / map entry; false: one row per "
        "key with `list_value` / `map_value`.",
    ),
    "readChangeFeed": (
        "false",
        "Read the changes of `changeStartBatchId` .. "
        "`changeEndBatchId` (`batch_id`, `change_type` update / delete).",
    ),
    "changeStartBatchId": ("required with readChangeFeed", "First batch of the change feed."),
    "changeEndBatchId": ("the newest", "Last batch of the change feed."),
    "includeExpiry": ("false", "Add `_expires_at_ms` (TTL)."),
    "includeSequence": ("false", "Add `_seq`, the sequence number that wrote the entry."),
    "nowMs": ("the version's commit clock", "Resolve TTL at this time (ms since the epoch)."),
    "partitionBytes": (
        _bytes_text(128 * 1024**2),
        "A store larger than this is read as "
        "several input partitions (key ranges cut at row groups).",
    ),
    "storage.<name>": ("none", "An object store setting, as `spark.fsstate.storage.<name>`."),
}
# environment variables: name -> (read by, meaning)
ENVIRONMENT = {
    "FSSTATE_MEMORY_LIMIT": (
        "the engine, in every process",
        "The default `memory_limit` (a size: `512MiB`) when no setting gives one.",
    ),
    "FSSTATE_EPOCH_LOG": (
        "the operator runner",
        "A file each committed epoch of a flow appends "
        "a JSON line to (timings, rows, store outcome): diagnostics.",
    ),
    "FSSTATE_PROFILE_DIR": (
        "fsstate's keyed loop (`tiered()` tasks)",
        "A directory each task writes its cProfile statistics to "
        "(`<processor>-s<stage>-p<partition>-a<attempt>-<pid>.prof`): diagnostics, slow.",
    ),
    "ARROW_DEFAULT_MEMORY_POOL": (
        "pyarrow; set to `system` by `pyspark_fsstate.worker`",
        "Arrow's allocator; `system` hands freed memory back, so a "
        "worker's RSS follows fsstate's budget.",
    ),
    "AWS_* , GOOGLE_* , AZURE_*": (
        "the object store client",
        "Credentials, region and other settings of `s3://`, `gs://`, `az://` (lowest precedence).",
    ),
    "AWS_ENDPOINT_URL, AWS_ENDPOINT": (
        "the object store client (checked by fsstate)",
        "The S3 endpoint when no `endpoint` setting gives one.",
    ),
    "AZURE_STORAGE_ENDPOINT, AZURE_ENDPOINT": ("the client (checked by fsstate)", "Azure's."),
    "GOOGLE_BASE_URL": ("the client (checked by fsstate)", "GCS's endpoint."),
    "AWS_ALLOW_HTTP (GOOGLE_, AZURE_)": ("fsstate, when it passes client options", "Plain http."),
    "MALLOC_MMAP_THRESHOLD_": (
        "glibc (not fsstate)",
        "`131072` hands large freed buffers back "
        "at once (whole-batch operators), at some cost in time.",
    ),
    "PYSPARK_PYTHON": ("Spark", "The Python of Spark's workers: one with fsstate installed."),
    "PYTHON_WORKER_FACTORY_PORT, PYTHON_WORKER_FACTORY_SOCK_PATH, PYTHON_WORKER_FACTORY_SECRET": (
        "`python -m pyspark_fsstate.worker` on PySpark 4.0 and 4.1 (set by Spark)",
        "Where a worker started without Spark's daemon connects back, as PySpark's own worker.",
    ),
}
# Spark settings fsstate reads or needs: name -> meaning
SPARK_SETTINGS = {
    "spark.python.worker.module": "`pyspark_fsstate.worker`: fsstate's keyed loop for "
    "`tiered()` (static: set before the SparkContext starts).",
    "spark.sql.streaming.stateStore.providerClass": "RocksDB's provider, which "
    "`transformWithState` needs for Spark's own operator state (timers).",
    "spark.sql.streaming.checkpointLocation": "Read by `tiered()` for its default `state_uri`.",
    "spark.sql.streaming.stateStore.encodingFormat": "Read by `tiered()`: map state iterates in "
    "Spark's MapState order for it.",
    "spark.sql.shuffle.partitions": "A `tiered()` query's partition count (recorded with its "
    "state); read from the checkpoint by the rescale.",
    "spark.sql.streaming.internal.stateStore.partitions": "Spark's count of a checkpoint's "
    "partitions, as tasks see it: checked against the state's.",
    "spark.sql.streaming.noDataMicroBatches.enabled": "`false` lets an `availableNow` query with "
    "TTL end; fsstate's flows never run no-data batches.",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "The flow driver cuts a key's rows into "
    "chunks of at most this many rows, as Spark does.",
    "spark.sql.execution.arrow.maxBytesPerBatch": "The flow driver's chunks by bytes, as Spark's.",
    "spark.sql.execution.pandas.convertToArrowArraySafely": "The flow driver converts pandas "
    "output with Spark's safe check.",
    "spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled": "The flow driver's "
    "pandas output conversion, as Spark's.",
    "spark.sql.session.timeZone": "The flow driver's timestamps in pandas, as Spark's.",
    "spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName": "pandas output columns by "
    "name (`true`, Spark's default) or position, as Spark's worker assigns them (read from a "
    "PySpark 4.1 task's conf by fsstate's keyed loop).",
    "spark.sql.python.filterPushdown.enabled": "Set before `register_sources`: `partition_id` "
    'filters of `format("fsstate")` prune stores.',
}


def simple_table(head: tuple[str, ...], rows: dict[str, Any]) -> list[str]:
    """A table with the name in the first column (code) and the tuple's items after it."""
    lines = [_row(*head), "|" + "---|" * len(head)]
    for name, cells in rows.items():
        cells = cells if isinstance(cells, tuple) else (cells,)
        lines.append(_row(f"`{name}`", *cells))
    return lines


def render() -> str:
    """The whole generated file."""
    from fsstate import EngineConfig, StoreConfig

    sections = [
        ("query", "Query settings", query_table()),
        ("store", "Store settings (`StoreConfig`)", config_table(StoreConfig)),
        (
            "engine",
            "Engine settings (`EngineConfig`)",
            config_table(EngineConfig, skip={"memory_limit_bytes"}),
        ),
        (
            "storage",
            "Object store settings",
            simple_table(("Setting", "Default", "Form", "Meaning"), STORAGE_OPTIONS),
        ),
        (
            "source",
            'Options of `format("fsstate")`',
            simple_table(("Option", "Default", "Meaning"), SOURCE_OPTIONS),
        ),
        (
            "environment",
            "Environment variables",
            simple_table(("Variable", "Read by", "Meaning"), ENVIRONMENT),
        ),
        (
            "spark",
            "Spark settings",
            simple_table(("Spark setting", "What fsstate does with it"), SPARK_SETTINGS),
        ),
    ]
    out = [
        "<!-- Generated by `python -m devkit.settings_reference` from the code; do not edit. -->",
        "",
    ]
    for anchor, title, lines in sections:
        out += [f"### {title} {{#{anchor}}}", "", *lines, ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Write the file, or with ``--check`` say whether it is up to date (exit 1 if not)."""
    p = argparse.ArgumentParser(prog="python -m devkit.settings_reference", description=__doc__)
    p.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text("utf-8") != text:
            print(
                f"{OUT.relative_to(ROOT)} is stale: run python -m devkit.settings_reference",
                file=sys.stderr,
            )
            return 1
        return 0
    OUT.write_text(text, "utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
