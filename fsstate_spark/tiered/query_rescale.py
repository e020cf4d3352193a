"""Rescale a stopped ``tiered()`` query: Spark's checkpoint and fsstate's state, in one step.

:func:`rescale_query` changes the partition count of a stopped query whose processors run
under ``tiered()``, so that the restarted query continues exactly where it stopped:

1. Spark's own offline repartition of the checkpoint
   (``spark._streamingCheckpointManager.repartition``, Spark 4.2+): it moves what Spark keeps
   (timers, the TTL of Spark's state, every other stateful operator of the query) and records
   a new batch ``c + 1`` that only repartitions (``c``: the last completed batch), with the new
   count in its offsets entry, which the restarted query takes;
2. fsstate's state of every tiered operator of the query
   (``<state_uri>/<query id>/<name>``): :func:`fsstate.store.rescale.rescale` reads version
   ``c`` and writes it, cut the new way, as version ``c + 1`` of a new layout generation, each
   grouping key in the partition Spark's hash partitioning gives it
   (:func:`fsstate_spark.state.keys.spark_partitioner`, cast to the grouping key's
   Spark types as the checkpoint records them), which is where both Spark's repartition put the
   key's timers and the next batch's shuffle sends its rows.

Why Spark's repartition and not one of fsstate's: it is the tool that owns Spark's checkpoint
format (offsets, commits, operator metadata, RocksDB or HDFS state files); re-implementing it
would drift with Spark. It needs the operator's Spark store to hold a state variable, which
every tiered processor declares (:data:`fsstate_spark.tiered.lifecycle.SPARK_MARKER`); it
also marks tiered operators in the checkpoint's metadata, and its key schema is the grouping
key's.

Invariants:

* Re-runnable, and nothing lost if it dies anywhere: before Spark's step nothing was written;
  Spark's step is Spark's (a failed repartition batch is retried by running it again); after
  it, Spark's checkpoint has the new count and fsstate's state the old one, and a query started
  then fails at its first task with :class:`fsstate.errors.PartitionCountError` (nothing
  written) until the step is run again, which finds Spark's part done and does fsstate's
  (a new generation is published last, :mod:`fsstate.store.layout`: a rescale killed half way
  leaves the old generation in force). Once both have the count, running it again does
  nothing. The old generation's versions stay readable (``format("fsstate")`` with an older
  ``batchId``) until retention or gc removes them.
* Refused, with a :class:`fsstate.errors.ConfigError` and nothing written, when the step
  cannot know it is right: no tiered state of the query under the state location, state
  without the checkpoint's last completed batch, a checkpoint whose operators do not declare
  the marker (run one batch with this version first), a grouping key whose names differ from
  the checkpoint's, counts of the two sides that no step of this function explains, a Spark
  Connect session (Spark's repartition runs in classic sessions only).
* Requests to the state location: 1 recursive LIST of the query's state, per operator its
  layout records, then :func:`fsstate.store.rescale.rescale`'s (1 GET per manifest and run
  file read, 1 PUT per file written). The query must be stopped (as Spark's repartition
  requires).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from fsstate.errors import ConfigError, FsStateError
from fsstate.inspect.catalog import all_stores
from fsstate.inspect.checkpoint import SparkCheckpoint, checkpoint_uri, read_checkpoint
from fsstate.inspect.lineage import batch_state, planning_of
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.identity import store_dir_for
from fsstate.store.layout import Layout, read_layouts
from fsstate.store.lineage import read_version
from fsstate.store.rescale import RescaleProgress, RescaleResult, log_progress, rescale
from fsstate_spark.pyspark import OFFLINE_REPARTITION, PYSPARK_MINOR
from fsstate_spark.pyspark.session import checkpoint_manager
from fsstate_spark.runtime import fileio_for
from fsstate_spark.state.keys import spark_partitioner
from fsstate_spark.tiered.lifecycle import SPARK_MARKER, query_root, tiered_operators
from fsstate_spark.tiered.settings import TieredConfig, resolve_config

__all__ = ["QueryRescale", "rescale_query"]

log = logging.getLogger(__name__)
Progress = Callable[[RescaleProgress], None]


@dataclass(frozen=True)
class QueryRescale:
    """What :func:`rescale_query` did.

    Attributes:
        query_id: the query's id.
        previous: the partition count before (of the side that still had it).
        partitions: the partition count now.
        batch: the repartition batch (the version the rescaled stores hold), None if nothing
            was to be done.
        spark_repartitioned: whether this call ran Spark's repartition (False: Spark's
            checkpoint had the count already).
        operators: the tiered operators this call rescaled.
    """

    query_id: str
    previous: int
    partitions: int
    batch: int | None
    spark_repartitioned: bool
    operators: tuple[RescaleResult, ...]


@dataclass(frozen=True)
class _Operator:
    """A tiered operator's state under the query's root, where the checkpoint's lineage has it
    at the version the rescale reads."""

    name: str
    layout: Layout  # the generation holding that version
    lineages: tuple[str, ...]  # the lineage holding it, per partition


def _checkpoint_fileio(checkpoint_location: str, config: TieredConfig) -> FileIO:
    options = {} if config.root.is_local else dict(config.root.options)
    return FileIO(Location.parse(checkpoint_uri(checkpoint_location), options))


def _located(
    state: FileIO, name: str, ckpt: SparkCheckpoint, batch: int, count: int
) -> _Operator | None:
    """Operator ``name``'s state at the checkpoint's ``batch`` with ``count`` partitions,
    on the lineage the checkpoint runs on (:mod:`fsstate.inspect.lineage`); None if a
    partition does not hold it."""
    stores = all_stores(state, prefix="", operator=name)
    if not stores:
        return None
    got = batch_state(state, stores, batch, planning_of(ckpt, batch), count=count)
    if not got.whole:
        return None
    layout = next(g for g in read_layouts(state, name) if g.dir == got.layout)
    return _Operator(name, layout, tuple(got.lineages[p] for p in range(got.partitions)))


def _marked_operators(spark: SparkSession, checkpoint: str) -> list[int]:
    """The ids of the checkpoint's stateful operators that declare :data:`SPARK_MARKER`
    (Spark's state metadata)."""
    out: list[int] = []
    rows = spark.read.format("state-metadata").load(checkpoint).collect()
    for row in rows:
        try:
            props = json.loads(row["operatorProperties"] or "{}")
        except ValueError:
            continue
        names = {v.get("stateName") for v in props.get("stateVariables") or []}
        if SPARK_MARKER in names:
            out.append(int(row["operatorId"]))
    return sorted(out)


def _spark_key_type(spark: SparkSession, checkpoint: str, operator_id: int) -> StructType:
    """The grouping key's Spark type of a marked operator (its marker variable's key)."""
    df = (
        spark.read.format("statestore")
        .option("operatorId", operator_id)
        .option("stateVarName", SPARK_MARKER)
        .load(checkpoint)
    )
    key = df.schema["key"].dataType
    assert isinstance(key, StructType)
    return key


def _key_names(fileio: FileIO, op: _Operator, version: int) -> list[str] | None:
    """The grouping key columns of an operator's tables at ``version`` (None: no partition
    wrote a table, so no key to place; a table declared but never written has no key schema
    in its partition)."""
    assert op.layout.partitions is not None
    names: list[str] | None = None
    for p in range(op.layout.partitions):
        store_dir = store_dir_for(op.name, p, op.layout.dir)
        manifest = read_version(fileio, store_dir, version, op.lineages[p])
        for entry in manifest.tables.values():
            if names is None and entry.spec.key_schema is not None:
                names = list(entry.spec.key_schema.names)
    return names


def _repartition_spark(spark: SparkSession, checkpoint: str, partitions: int) -> None:
    if not OFFLINE_REPARTITION:
        raise ConfigError(
            "rescaling a tiered() query runs Spark's offline repartition of its checkpoint, "
            f"which PySpark {'.'.join(map(str, PYSPARK_MINOR))} does not have (4.2+); nothing "
            "was changed"
        )
    manager = checkpoint_manager(spark)
    if manager is None:
        raise ConfigError(
            "rescaling a tiered() query needs a classic SparkSession (Spark's offline "
            "repartition of a checkpoint is not available on Spark Connect); nothing was changed"
        )
    try:
        manager.repartition(checkpoint, partitions, True)
    except Exception as exc:  # py4j / Spark errors: one typed error with Spark's words
        raise FsStateError(
            f"Spark's repartition of the checkpoint {checkpoint!r} to {partitions} partitions "
            f"failed: {_spark_message(exc)[:800]} fsstate's state is unchanged; fix what Spark "
            "reports (the query must be stopped, its last batch completed) and run the rescale "
            "again"
        ) from exc


def _spark_message(exc: BaseException) -> str:
    """The JVM exception's message of a py4j error (its first paragraph), else ``str(exc)``."""
    text = ""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            text = str(java.getMessage() or "")
    if not text:
        text = str(exc) or type(exc).__name__
    return " ".join(text.strip().split("\n")[0].split())


def rescale_query(
    spark: SparkSession,
    checkpoint_location: str,
    partitions: int,
    *,
    state_uri: str | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> QueryRescale:
    """Change the partition count of a stopped ``tiered()`` query (see the module docstring).

    Run it with the query stopped, then start the query again as before: it continues with
    ``partitions`` state partitions, exactly where it stopped.

    Args:
        spark: a classic SparkSession (Spark's repartition runs on it).
        checkpoint_location: the query's ``checkpointLocation``.
        partitions: the new partition count (>= 1).
        state_uri: where the query's tiered state lives, as ``tiered()`` was given it
            (default: as ``tiered()`` resolves it, ``spark.fsstate.stateUri`` then
            ``<spark.sql.streaming.checkpointLocation>/fsstate``).
        progress: called after each old partition of each operator is moved.
        **options: store and storage settings of the new stores, as ``tiered()`` takes them
            (``storage_options`` for an object store).

    Returns:
        What was done (:class:`QueryRescale`).

    Raises:
        ConfigError: the step was refused (see the module docstring); nothing was changed.
        FsStateError: Spark's repartition failed (fsstate's state unchanged), or storage
            failed during fsstate's part (its old generation stays in force): run it again.
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"rescale_query(partitions={partitions!r}): give an int >= 1")
    config = resolve_config("tiered", state_uri, None, None, dict(options))
    ckpt = read_checkpoint(_checkpoint_fileio(checkpoint_location, config))
    if ckpt.committed is None:
        raise ConfigError(
            f"the query of {checkpoint_location!r} completed no batch: nothing to rescale "
            f"(start it with spark.sql.shuffle.partitions={partitions} instead)"
        )
    state = fileio_for(query_root(config, ckpt.query_id), config.store.fsync)
    names, marked = _checked_operators(spark, checkpoint_location, state, ckpt.query_id)
    c = ckpt.committed
    spark_now = ckpt.partitions_at(c)
    if spark_now == partitions and all(_located(state, n, ckpt, c, partitions) for n in names):
        log.info("fsstate: query %s has %d partitions already", ckpt.query_id, partitions)
        return QueryRescale(ckpt.query_id, partitions, partitions, None, False, ())
    previous, version = _starting_point(ckpt, partitions)
    ops = [_needed(state, n, ckpt, version, previous, partitions) for n in names]
    todo = [op for op in ops if op is not None]
    spark_keys = [_spark_key_type(spark, checkpoint_location, i) for i in marked]
    plans = [(op, *_key_plan(state, op, version, spark_keys)) for op in todo]
    repartitioned = spark_now != partitions
    if repartitioned:
        _repartition_spark(spark, checkpoint_location, partitions)
        ckpt = read_checkpoint(ckpt.fileio)
        assert ckpt.committed is not None and ckpt.committed == version + 1
    batch = version + 1
    planned = planning_of(ckpt, batch)
    done: list[RescaleResult] = []
    for op, keys, key_type in plans:
        done.append(
            _rescale_operator(
                spark, state, op, config, (partitions, batch, planned), keys, key_type, progress
            )
        )
    log.warning(
        "fsstate: rescaled tiered query %s from %d to %d partitions at batch %d (%s)",
        ckpt.query_id,
        previous,
        partitions,
        batch,
        ", ".join(f"{r.operator}: {r.rows} rows" for r in done) or "state already rescaled",
    )
    return QueryRescale(ckpt.query_id, previous, partitions, batch, repartitioned, tuple(done))


def _needed(
    state: FileIO, name: str, ckpt: SparkCheckpoint, version: int, previous: int, partitions: int
) -> _Operator | None:
    """Operator ``name``'s state to rescale (at ``version``, ``previous`` partitions), or None
    when it has the checkpoint's last batch in ``partitions`` already (a rescale that died
    after this operator).

    Raises:
        ConfigError: the checkpoint's lineage does not hold the version in every partition.
    """
    assert ckpt.committed is not None
    if version < ckpt.committed and _located(state, name, ckpt, ckpt.committed, partitions):
        return None
    op = _located(state, name, ckpt, version, previous)
    if op is None:
        stores = all_stores(state, prefix="", operator=name)
        got = batch_state(state, stores, version, planning_of(ckpt, version), count=previous)
        raise ConfigError(
            f"tiered operator {name!r} of query {ckpt.query_id}: the state the checkpoint's "
            f"batch {version} goes with is not whole under {state.describe(name)} "
            f"({got.describe()}): the state location does not belong to this checkpoint, or "
            "was not kept with it (fsstate-spark repair <checkpoint> finds the newest batch "
            "whose state is whole); nothing was changed"
        )
    return op


def _checked_operators(
    spark: SparkSession, checkpoint_location: str, state: FileIO, query_id: str
) -> tuple[list[str], list[int]]:
    """The tiered operators of the query's state and the checkpoint's marked operator ids.

    Raises:
        ConfigError: no tiered state, or the checkpoint marks another number of operators.
    """
    names = tiered_operators(state)
    if not names:
        raise ConfigError(
            f"no tiered() state of query {query_id} under {state.describe('')}: give "
            "rescale_query(state_uri=...) as the query's tiered() was given it (for a query "
            "without tiered() state, Spark's own spark._streamingCheckpointManager.repartition "
            "is the step); nothing was changed"
        )
    marked = _marked_operators(spark, checkpoint_location)
    if len(marked) != len(names):
        raise ConfigError(
            f"the checkpoint declares {len(marked)} tiered operator(s) ({SPARK_MARKER!r} state "
            f"variables) and the state location holds {len(names)} ({names}): run the query "
            "for one batch with this version of fsstate_spark (its operators declare the "
            "marker), or give the state_uri the query uses; nothing was changed"
        )
    return names, marked


def _starting_point(ckpt: SparkCheckpoint, partitions: int) -> tuple[int, int]:
    """(the count before the rescale, the version fsstate's state is read at): the
    checkpoint's last completed batch, or the one before when that is Spark's repartition
    batch already (a rescale that died after Spark's step).

    Raises:
        ConfigError: Spark's checkpoint has ``partitions`` since before its last batch.
    """
    assert ckpt.committed is not None
    spark_now = ckpt.partitions_at(ckpt.committed)
    if spark_now != partitions:
        return spark_now, ckpt.committed  # Spark's repartition reads it
    previous = ckpt.partitions_at(ckpt.committed - 1) if ckpt.committed > 0 else spark_now
    if previous == partitions:
        raise ConfigError(
            f"query {ckpt.query_id}: Spark's checkpoint has {partitions} partitions since "
            f"before its last completed batch {ckpt.committed}, and its tiered state does not "
            "hold that batch in that count: the state is not the one this checkpoint ran with "
            "(fsstate-spark repair <checkpoint>); nothing was changed"
        )
    return previous, ckpt.committed - 1


def _key_plan(
    state: FileIO, op: _Operator, version: int, spark_keys: list[StructType]
) -> tuple[list[str], StructType | None]:
    """The operator's grouping key columns (from its tables at ``version``) and their Spark
    types (the checkpoint's marked operator grouping by the same names; None: no table was
    written, or several operators group by those names with different types, and the
    state's Arrow types decide).

    Raises:
        ConfigError: a partition did not commit ``version``, or no operator of the checkpoint
            groups by those names.
    """
    keys = _key_names(state, op, version)
    if keys is None:
        return [], None
    found = [t for t in spark_keys if [f.name for f in t.fields] == keys]
    if not found:
        raise ConfigError(
            f"tiered operator {op.name!r} keeps state by grouping key {keys}, and no "
            f"operator of the checkpoint groups by it ({[t.simpleString() for t in spark_keys]}):"
            " the state location does not belong to this checkpoint; nothing was changed"
        )
    return keys, (found[0] if all(t == found[0] for t in found) else None)


def _rescale_operator(
    spark: SparkSession,
    state: FileIO,
    op: _Operator,
    config: TieredConfig,
    target: tuple[int, int, int | None],
    keys: list[str],
    key_type: StructType | None,
    progress: Progress | None,
) -> RescaleResult:
    """fsstate's part for one operator: version ``batch - 1`` of the checkpoint's lineage as
    ``batch`` of a new generation of ``partitions`` (``target``: partitions, batch, when
    Spark planned the repartition batch)."""
    partitions, batch, planned = target

    def report(p: RescaleProgress) -> None:
        log_progress(p)
        if progress is not None:
            progress(p)

    return rescale(
        state,
        op.name,
        partitions=partitions,
        keys=keys,
        partition_of=spark_partitioner(spark, keys, partitions, key_type),
        version=batch - 1,
        as_version=batch,
        config=config.store,
        progress=report,
        lineages=op.lineages,
        planned_ms=planned,
        source=op.layout.dir,
    )
