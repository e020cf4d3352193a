"""Resolution and validation of the settings of a tiered processor.

Precedence, highest first: the arguments of :func:`fsstate_spark.tiered`, then ``spark.fsstate.*``
settings of the active SparkSession (read on the driver when ``tiered()`` is called), then the
defaults below. Setting names are accepted in snake_case or camelCase
(``spark.fsstate.memoryLimit`` and ``spark.fsstate.memory_limit`` are the same setting).

Default ``state_uri``: ``<spark.sql.streaming.checkpointLocation>/fsstate`` when that Spark
setting is present, else the absolute path of ``./fsstate_state`` in the driver's working
directory. A local path is only right for local mode or a single machine; a cluster needs a
URI every executor can reach (``s3://``, ``gs://``, ``hdfs://``, a shared mount).

Invariants:

* A :class:`TieredConfig` is immutable, picklable (it travels to the Python workers with the
  processor) and fully validated: every bad setting fails in :func:`resolve_config`, on the
  driver, with a :class:`fsstate.errors.ConfigError` naming the setting.
* The state URI is checked by writing and deleting a small probe file, so an unwritable
  location fails at ``tiered()`` and not in the middle of a streaming query.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from fsstate.config import EngineConfig, StoreConfig, parse_bytes
from fsstate.errors import ConfigError, FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location, redact
from fsstate_spark.map_order import ENCODINGS, UNSAFEROW

CONF_PREFIX = "spark.fsstate."
ENCODING_CONF = "spark.sql.streaming.stateStore.encodingFormat"
DEFAULT_DIR_NAME = "fsstate_state"
MAX_CACHED_STORES_DEFAULT = 256

_STORE_FIELDS = frozenset(f.name for f in dataclasses.fields(StoreConfig))
_ENGINE_FIELDS = frozenset(f.name for f in dataclasses.fields(EngineConfig)) - {
    "memory_limit_bytes"
}
_ADAPTER_FIELDS = frozenset(
    {"state_uri", "memory_limit", "name", "max_cached_stores", "storage_options"}
)
STORAGE_PREFIX = "storage."  # spark.fsstate.storage.<name>: an object store setting
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_NAME_RE = re.compile(r"^[A-Za-z0-9._=-]+$")


@dataclass(frozen=True)
class TieredConfig:
    """The validated settings of one tiered processor.

    Attributes:
        state_uri: root URI or absolute local path of the state directory (no secret).
        location: the same with the object store settings (``storage_options``,
            ``spark.fsstate.storage.*``, the URI's own); it travels to the workers with the
            processor, and its ``repr`` shows no secret.
        name: operator name; the stores of a query live under ``<state_uri>/<query id>/<name>``.
        memory_limit_bytes: process-wide byte budget of the engine in each Python worker, or
            None to keep the engine's default (``FSSTATE_MEMORY_LIMIT`` or 1 GiB).
        store: settings of every partition store.
        engine: other process-wide engine settings (:class:`fsstate.controller.EngineConfig`
            fields).
        max_cached_stores: how many committed stores one worker process keeps for reuse by the
            next micro-batch (least recently used ones are closed beyond that; 0 disables
            reuse, so every micro-batch restores its store from storage).
        state_encoding: Spark's state encoding (``spark.sql.streaming.stateStore.encodingFormat``,
            read on the driver): map state iterates in Spark's MapState order for it
            (:mod:`fsstate_spark.map_order`); bounded input always uses ``unsaferow``, as Spark.
    """

    state_uri: str
    name: str
    memory_limit_bytes: int | None = None
    store: StoreConfig = field(default_factory=StoreConfig)
    engine: tuple[tuple[str, Any], ...] = ()
    max_cached_stores: int = MAX_CACHED_STORES_DEFAULT
    state_encoding: str = UNSAFEROW
    location: Location | None = None

    @property
    def root(self) -> Location:
        """Where the state lives (the location, or the state URI parsed)."""
        return self.location if self.location is not None else Location.parse(self.state_uri)


def snake_case(name: str) -> str:
    """``memoryLimit`` -> ``memory_limit``; names already in snake_case are unchanged."""
    return _CAMEL.sub("_", name).lower()


def spark_settings() -> dict[str, str]:
    """The ``spark.fsstate.*`` settings of the active SparkSession (empty without one).

    Returns:
        Setting names in snake_case without the prefix, mapped to their string values.
        ``spark.sql.streaming.checkpointLocation`` is returned as ``_checkpoint_location``,
        ``spark.sql.streaming.stateStore.encodingFormat`` as ``_state_encoding``.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency of this package
        return {}
    spark = SparkSession.getActiveSession()
    if spark is None:
        return {}
    found: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    # Spark Connect has no SparkContext: the session conf suffices there
    with contextlib.suppress(Exception):
        pairs.extend(spark.sparkContext.getConf().getAll())
    with contextlib.suppress(Exception):
        pairs.extend(spark.conf.getAll.items())
    for key, value in pairs:
        if key.startswith(CONF_PREFIX):
            found[snake_case(key[len(CONF_PREFIX) :])] = value
        elif key == "spark.sql.streaming.checkpointLocation" and value:
            found["_checkpoint_location"] = value
        elif key == ENCODING_CONF and value:
            found["_state_encoding"] = value.strip().lower()
    return found


def default_state_uri(checkpoint_location: str | None) -> str:
    """The state URI used when neither an argument nor ``spark.fsstate.stateUri`` gives one."""
    if checkpoint_location:
        return checkpoint_location.rstrip("/") + "/fsstate"
    return os.path.abspath(DEFAULT_DIR_NAME)


def _coerce(name: str, value: Any, like: Any) -> Any:
    """Convert a string from Spark conf to the type of the default ``like``."""
    if not isinstance(value, str) or isinstance(like, str):
        return value
    try:
        if isinstance(like, bool):
            if value.strip().lower() in ("true", "1", "yes"):
                return True
            if value.strip().lower() in ("false", "0", "no"):
                return False
            raise ValueError(value)
        if isinstance(like, int):
            return int(value)
        if isinstance(like, float):
            return float(value)
    except ValueError:
        raise ConfigError(
            f"spark.fsstate setting {name}={value!r} is not a valid {type(like).__name__}"
        ) from None
    return value


def check_state_uri(uri: str | Location, options: dict[str, Any] | None = None) -> Location:
    """Make sure a location can hold state: create it, write and delete a probe file, and, on
    an object store, check that it honours conditional writes (once per bucket and process).

    Args:
        uri: a local path or URI (``s3://bucket/prefix``, ...), or a parsed location.
        options: object store settings (they win over the URI's).

    Returns:
        The location to use (local relative paths made absolute, so workers agree on it).

    Raises:
        ConfigError: the location cannot be resolved, created or written, or its store ignores
            conditional writes (see :meth:`fsstate.storage.fileio.FileIO.check_conditional_writes`).
    """
    location = Location.parse(uri, options)
    try:
        fileio = FileIO(location)
        fileio.makedirs("")
        probe = f".fsstate-probe-{uuid.uuid4().hex}"
        fileio.publish_bytes(probe, b"fsstate")
        fileio.delete(probe)
        fileio.check_conditional_writes()
    except ConfigError:
        raise
    except (FsStateError, OSError) as exc:
        raise ConfigError(
            f"state_uri={location.uri()!r} is not usable for fsstate state "
            f"({redact(str(exc), location)}); give a writable directory or URI via "
            "tiered(state_uri=...) or spark.fsstate.stateUri (object store settings: "
            "AWS_* variables, tiered(storage_options=...) or spark.fsstate.storage.<name>)"
        ) from exc
    return location


def resolve_config(
    processor_name: str,
    state_uri: str | None,
    memory_limit: int | str | None,
    name: str | None,
    options: dict[str, Any],
    conf: dict[str, str] | None = None,
) -> TieredConfig:
    """Merge arguments, Spark settings and defaults into a validated :class:`TieredConfig`.

    Args:
        processor_name: class name of the wrapped processor (the default operator name).
        state_uri: argument of ``tiered()`` or None.
        memory_limit: argument of ``tiered()`` (bytes or ``"256MiB"``) or None.
        name: operator name argument or None.
        options: other keyword arguments of ``tiered()``: :class:`fsstate.StoreConfig` fields,
            :class:`fsstate.controller.EngineConfig` fields, ``max_cached_stores``.
        conf: ``spark.fsstate.*`` settings (see :func:`spark_settings`); read from the active
            session when None.

    Raises:
        ConfigError: any setting is unknown or invalid, or the state URI is unusable.
    """
    conf = spark_settings() if conf is None else dict(conf)
    checkpoint = conf.pop("_checkpoint_location", None)
    encoding = conf.pop("_state_encoding", UNSAFEROW)
    if encoding not in ENCODINGS:
        raise ConfigError(
            f"{ENCODING_CONF}={encoding!r} is not an encoding fsstate knows ({ENCODINGS}); "
            "tiered map state follows Spark's MapState order for it"
        )
    merged: dict[str, Any] = {}
    known = _STORE_FIELDS | _ENGINE_FIELDS | _ADAPTER_FIELDS
    storage_conf = {
        k[len(STORAGE_PREFIX) :]: v for k, v in conf.items() if k.startswith(STORAGE_PREFIX)
    }
    conf = {k: v for k, v in conf.items() if not k.startswith(STORAGE_PREFIX)}
    for source, items in (("spark.fsstate", conf), ("tiered()", options)):
        for raw_key, value in items.items():
            key = snake_case(raw_key)
            if key not in known:
                raise ConfigError(
                    f"unknown {source} setting {raw_key!r}; known settings: {sorted(known)}"
                )
            merged[key] = value
    for key, value in (("state_uri", state_uri), ("memory_limit", memory_limit), ("name", name)):
        if value is not None:
            merged[key] = value

    op_name = str(merged.pop("name", processor_name))
    if not _NAME_RE.match(op_name):
        raise ConfigError(
            f"name={op_name!r}: use letters, digits and . _ = - only (it names a directory)"
        )
    limit = merged.pop("memory_limit", None)
    limit_bytes = None if limit is None else parse_bytes(limit, "memory_limit")

    store_defaults = StoreConfig()
    store_kwargs = {
        k: _coerce(k, merged.pop(k), getattr(store_defaults, k))
        for k in list(merged)
        if k in _STORE_FIELDS
    }
    store = StoreConfig(**store_kwargs)

    engine_defaults = EngineConfig()
    engine_kwargs = {
        k: _coerce(k, merged.pop(k), getattr(engine_defaults, k))
        for k in sorted(merged)
        if k in _ENGINE_FIELDS
    }
    # validate the process-wide settings now, on the driver
    EngineConfig(
        memory_limit_bytes=limit_bytes or engine_defaults.memory_limit_bytes, **engine_kwargs
    )

    max_cached = _coerce("max_cached_stores", merged.pop("max_cached_stores", None), 0)
    if max_cached is None:
        max_cached = MAX_CACHED_STORES_DEFAULT
    if isinstance(max_cached, bool) or not isinstance(max_cached, int) or max_cached < 0:
        raise ConfigError(f"max_cached_stores={max_cached!r} must be an integer >= 0")

    uri = merged.pop("state_uri", None) or default_state_uri(checkpoint)
    storage = {**storage_conf, **dict(merged.pop("storage_options", None) or {})}
    location = check_state_uri(str(uri), storage)
    return TieredConfig(
        state_uri=location.uri(),
        location=location,
        name=op_name,
        memory_limit_bytes=limit_bytes,
        store=store,
        engine=tuple(sorted(engine_kwargs.items())),
        max_cached_stores=max_cached,
        state_encoding=encoding,
    )
