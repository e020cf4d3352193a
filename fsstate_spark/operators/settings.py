"""The settings of a flow's query: :class:`FlowSettings` and :func:`resolve_flow_settings`.

Precedence, highest first: the arguments of :func:`fsstate_spark.operators.write_stream`, then
``spark.fsstate.*`` settings of the active SparkSession (read on the driver), then defaults
(:mod:`fsstate_spark.settings`, shared with the other products). The state URI is the
``state_uri`` argument or ``<checkpoint_location>/fsstate``, never ``spark.fsstate.stateUri``:
a flow's stores sit right under its state URI (``<state_uri>/<operator>/<partition>``), so a
location shared by several queries would mix their state.

Invariants:

* A :class:`FlowSettings` is immutable, picklable (its stages' tasks carry it to the workers)
  and fully validated on the driver; a bad setting fails in :func:`resolve_flow_settings` with
  a :class:`fsstate.errors.ConfigError` naming the setting and ``write_stream()``.
* Only settings operators use are accepted: store, engine and storage settings, the state
  URI, the memory limit, the partition count and the task count (no store name: each stage
  has its own).
* ``checkpoint_location`` is the query's checkpoint as one string per place
  (:func:`resolved_checkpoint`: a local path absolute, an object store URI without options or
  secrets), so the owner record of a state URI (:mod:`fsstate_spark.operators.ownership`)
  names the same checkpoint the same way on every run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError
from fsstate.inspect.checkpoint import checkpoint_uri
from fsstate.storage.location import Location
from fsstate_spark.settings import (
    ENGINE_FIELDS,
    SHARED_FIELDS,
    STORE_FIELDS,
    Product,
    StateSettings,
    coerce,
    copy_conf,
    merge_settings,
    resolve_state_settings,
    spark_settings,
    state_dir_of,
)

FLOWS = Product("ops.write_stream()", "ops.write_stream(state_uri=...)")
FLOW_FIELDS = STORE_FIELDS | ENGINE_FIELDS | SHARED_FIELDS | {"combine"}
PARTITIONS_DEFAULT = 8


@dataclass(frozen=True)
class FlowSettings(StateSettings):
    """The validated settings of a flow's query (and the shared ones of
    :class:`fsstate_spark.settings.StateSettings`).

    Attributes:
        partitions: partitions of every stateful stage (recorded with each stage's state).
        combine: pre-aggregate decomposable aggregates before the shuffle (default).
        tasks: Spark tasks per stage and batch, each running the epochs of several state
            partitions (key groups: the state keeps ``partitions``, the work runs in
            ``tasks``); None: the cluster's default parallelism, at most ``partitions``.
        checkpoint_location: the query's checkpoint (:func:`resolved_checkpoint`; ``""``:
            not known, no owner record).
    """

    partitions: int = PARTITIONS_DEFAULT
    combine: bool = True
    tasks: int | None = None
    checkpoint_location: str = ""

    @property
    def state_in_checkpoint(self) -> bool:
        """Whether the state is the checkpoint's own ``<checkpoint>/fsstate`` (a copied or
        restored checkpoint then carries its state with it)."""
        if not self.checkpoint_location:
            return False
        try:
            own = Location.parse(state_dir_of(self.checkpoint_location))
        except ConfigError:  # a checkpoint on a file system fsstate does not store state on
            return False
        root = self.root
        return (own.scheme, own.bucket, own.path) == (root.scheme, root.bucket, root.path)

    def __post_init__(self) -> None:
        super().__post_init__()
        p = self.partitions
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ConfigError(f"ops.write_stream(partitions={p!r}): give an int >= 1")
        t = self.tasks
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= p):
            raise ConfigError(
                f"ops.write_stream(tasks={t!r}): give an int from 1 to partitions ({p}), or None"
            )
        if not isinstance(self.combine, bool):
            raise ConfigError(f"ops.write_stream(combine={self.combine!r}): give True or False")


def resolve_flow_settings(
    checkpoint_location: str,
    partitions: int,
    state_uri: str | None,
    memory_limit: int | str | None,
    options: dict[str, Any],
    conf: dict[str, str] | None = None,
    tasks: int | None = None,
) -> FlowSettings:
    """Merge ``write_stream``'s arguments, Spark settings and defaults into :class:`FlowSettings`.

    Args:
        checkpoint_location: Spark's checkpoint location of the query.
        partitions: partitions of every stage.
        state_uri: argument or None (default ``<checkpoint_location>/fsstate``).
        memory_limit: the engine's byte budget per Python worker, or None.
        options: store, engine and storage settings (``storage_options``).
        conf: ``spark.fsstate.*`` settings; read from the active session when None.
        tasks: Spark tasks per stage (None: the default parallelism, at most ``partitions``).

    Raises:
        ConfigError: any setting is unknown or invalid, or the state URI is unusable.
    """
    FlowSettings(state_uri="", partitions=partitions, tasks=tasks)  # validate before any I/O
    if not isinstance(checkpoint_location, str) or not checkpoint_location:
        raise ConfigError("ops.write_stream() needs checkpoint_location (a directory or URI)")
    conf = spark_settings() if conf is None else copy_conf(conf)
    conf.pop("_checkpoint_location", None)
    merged, storage_conf = merge_settings(FLOWS, FLOW_FIELDS, options, conf)
    if memory_limit is not None:
        merged["memory_limit"] = memory_limit
    # a flow's stores sit right under its state URI (no query id level), so a shared
    # spark.fsstate.stateUri would mix queries: the default is the query's checkpoint
    merged["state_uri"] = state_uri if state_uri is not None else state_dir_of(checkpoint_location)
    combine = coerce("combine", merged.pop("combine", True), True)
    shared = resolve_state_settings(FLOWS, merged, storage_conf, checkpoint_location)
    return FlowSettings(
        partitions=partitions,
        combine=combine,
        tasks=tasks,
        checkpoint_location=resolved_checkpoint(checkpoint_location),
        **shared,
    )


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def resolved_checkpoint(location: str) -> str:
    """A checkpoint location as one string per place: a local path (``file:`` URIs too)
    absolute and normalized, an object store URI as ``<scheme>://<bucket>/<path>`` (without
    options or secrets), anything else (``hdfs://``, ``dbfs:/``) as given, without a trailing
    ``/``."""
    path = checkpoint_uri(location)
    if path.startswith("file://"):
        path = path[len("file://") :]
    if not _SCHEME.match(path):
        return os.path.abspath(path)
    if "://" not in path:  # dbfs:/x: a scheme fsstate does not read
        return path.rstrip("/")
    try:
        loc = Location.parse(path)
    except ConfigError:
        return path.rstrip("/")
    if loc.is_local:
        return loc.path
    return f"{loc.scheme}://{loc.bucket}/{loc.path}".rstrip("/")
