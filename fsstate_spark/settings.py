"""Settings every fsstate Spark product shares: where state lives and how workers' engines run.

The three products (``tiered()``, the operator flows, the state sources) each have their own
settings type and messages; what they share is resolved here:

* the state location (``state_uri`` and object store settings) and its default,
  ``<checkpoint>/fsstate`` (:func:`state_dir_of`, the only place that builds it);
* the engine settings of the Python workers (``memory_limit``, :class:`fsstate.StoreConfig` and
  :class:`fsstate.controller.EngineConfig` fields, ``max_cached_stores``);
* the ``spark.fsstate.*`` Spark conf (:func:`spark_settings`), read from the active
  SparkSession, which fsstate's own calls leave as they found it (:func:`keeping_active_session`).

Precedence, highest first: the product call's arguments, then ``spark.fsstate.*`` settings of
the active SparkSession (read on the driver), then defaults. Names are accepted in snake_case
or camelCase (``spark.fsstate.memoryLimit`` = ``memory_limit``).

Invariants:

* A :class:`StateSettings` (and each product's subclass) is frozen, picklable (it travels to
  the workers) and fully validated on the driver: a bad setting fails in the product's
  resolve call with a :class:`fsstate.errors.ConfigError` that names the setting and the
  product's call (:class:`Product`), never in a worker.
* A state location is checked by writing and deleting a probe file (and, on object stores,
  that conditional writes are honoured) before a query starts. Refused before any I/O: an empty
  ``state_uri`` (never replaced by the default) or one that is no string or path, a
  process-local store (``memory://``: each Python worker would have a store of its own),
  ``storage_options`` that is no mapping, and object store settings (``storage_options``,
  ``spark.fsstate.storage.*``) with a local path, where they cannot apply
  (:func:`fsstate.config.local_options_error`, as the command lines refuse ``-o``).
* A number setting takes a number (:func:`fsstate.config.check_whole`): ``True`` is refused,
  not read as 1.
* An unknown setting is named as the user wrote it (``spark.fsstate.memoryLimt``, or the call's
  keyword), with the nearest known setting when one is close (:func:`merge_settings`).
* No message or ``repr`` shows a key or a secret.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fsstate.config import (
    EngineConfig,
    StoreConfig,
    check_whole,
    local_options_error,
    parse_bytes,
    parse_flag,
)
from fsstate.errors import ConfigError, FsStateError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location, redact

CONF_PREFIX = "spark.fsstate."
STORAGE_PREFIX = "storage."  # spark.fsstate.storage.<name>: an object store setting
CHECKPOINT_CONF = "spark.sql.streaming.checkpointLocation"
STATE_DIR = "fsstate"  # the state directory under a checkpoint
DEFAULT_DIR_NAME = "fsstate_state"  # without a checkpoint: ./fsstate_state
MAX_CACHED_STORES_DEFAULT = 256

STORE_FIELDS = frozenset(f.name for f in dataclasses.fields(StoreConfig))
ENGINE_FIELDS = frozenset(f.name for f in dataclasses.fields(EngineConfig)) - {"memory_limit_bytes"}
SHARED_FIELDS = frozenset(
    {"state_uri", "memory_limit", "max_cached_stores", "storage_options", "metrics"}
)
# the settings one product takes and another does not: a spark.fsstate.* key of one product is
# left alone by the other (both read the session's spark.fsstate.* settings)
PRODUCT_FIELDS = frozenset({"name", "fast_loop", "combine"})
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


@dataclass(frozen=True)
class Product:
    """How a product's messages name it.

    Attributes:
        call: the call users make, as messages show it (``tiered()``).
        state_uri_hint: how to give the state location to that call.
    """

    call: str
    state_uri_hint: str


@dataclass(frozen=True)
class StateSettings:
    """Where state lives and how each Python worker's engine runs.

    Attributes:
        state_uri: root URI or absolute local path of the state (no secret).
        memory_limit_bytes: process-wide byte budget of the engine in each Python worker, or
            None to keep the engine's default (``FSSTATE_MEMORY_LIMIT`` or 1 GiB).
        store: settings of every partition store.
        engine: other process-wide engine settings (:class:`fsstate.controller.EngineConfig`
            fields), sorted by name.
        max_cached_stores: committed stores one worker keeps for reuse by the next micro-batch
            (least recently used closed beyond that; 0 disables reuse).
        location: the state location with its object store settings (``repr`` without secrets).
        metrics: record each version's summary and send it to the driver with the task's
            receipt (``spark.fsstate.metrics``, default True; :mod:`fsstate_spark.metrics`).
            False also turns the store's ``record_summary`` off: no figures are kept.
    """

    state_uri: str
    memory_limit_bytes: int | None = None
    store: StoreConfig = field(default_factory=StoreConfig)
    engine: tuple[tuple[str, Any], ...] = ()
    max_cached_stores: int = MAX_CACHED_STORES_DEFAULT
    location: Location | None = None
    metrics: bool = True

    def __post_init__(self) -> None:
        if self.memory_limit_bytes is not None:
            check_whole("memory_limit", self.memory_limit_bytes, 1, " (bytes)")
        check_whole("max_cached_stores", self.max_cached_stores, 0)
        if self.location is not None:
            check_shared_location(self.location)
        elif self.state_uri:
            check_shared_location(Location.parse(self.state_uri))

    @property
    def root(self) -> Location:
        """Where the state lives (the location, or the state URI parsed)."""
        return self.location if self.location is not None else Location.parse(self.state_uri)


def snake_case(name: str) -> str:
    """``memoryLimit`` -> ``memory_limit``; names already in snake_case are unchanged."""
    return _CAMEL.sub("_", name).lower()


class SparkConf(dict[str, str]):
    """``spark.fsstate.*`` settings by snake_case name (:func:`spark_settings`); ``written``
    maps each name to the Spark key as the user wrote it (``spark.fsstate.memoryLimt``), for
    messages."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.written: dict[str, str] = {}


def copy_conf(conf: dict[str, str]) -> SparkConf:
    """A copy of ``conf`` as a :class:`SparkConf` (the keys as written kept, if it has them)."""
    out = SparkConf(conf)
    out.written.update(getattr(conf, "written", {}))
    return out


def check_shared_location(location: Location) -> None:
    """Refuse a location a Spark product cannot share between its processes.

    Raises:
        ConfigError: a process-local store (``memory://``).
    """
    if location.scheme == "memory":
        raise ConfigError(
            f"state_uri={location.uri()!r} is a process-local store: each Spark Python worker "
            "would have its own, and the next batch would find no state. Give a local path (one "
            "machine) or a URI every executor can reach (s3://..., gs://..., az://...)"
        )


def spark_settings(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The ``spark.fsstate.*`` settings of the active SparkSession (empty without one).

    Args:
        extra: other Spark settings to return, Spark name -> returned name (e.g.
            ``{"spark.sql.streaming.stateStore.encodingFormat": "_state_encoding"}``).

    Returns:
        Setting names in snake_case without the prefix, mapped to their string values;
        ``spark.sql.streaming.checkpointLocation`` as ``_checkpoint_location``, and ``extra``
        (a :class:`SparkConf`: the keys as written are in ``written``).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency of this package
        return {}
    spark = SparkSession.getActiveSession()
    if spark is None:
        return SparkConf()
    wanted = {CHECKPOINT_CONF: "_checkpoint_location", **(extra or {})}
    found = SparkConf()
    pairs: list[tuple[str, str]] = []
    # Spark Connect has no SparkContext: the session conf suffices there
    with contextlib.suppress(Exception):
        pairs.extend(spark.sparkContext.getConf().getAll())
    with contextlib.suppress(Exception):
        pairs.extend(spark.conf.getAll.items())
    for key, value in pairs:
        if key.startswith(CONF_PREFIX):
            name = snake_case(key[len(CONF_PREFIX) :])
            found[name] = value
            found.written[name] = key
        elif key in wanted and value:
            found[wanted[key]] = value
    return found


@contextlib.contextmanager
def keeping_active_session() -> Iterator[None]:
    """Run a block that may make another SparkSession the active one; put the caller's back.

    PySpark's ``createDataFrame`` makes its session the process's active one (a class attribute,
    not per thread). Called by fsstate on a micro-batch's session inside ``foreachBatch``, it
    would leave the stream's clone active for the whole application, and a later
    ``SparkSession.getActiveSession()`` (so :func:`spark_settings`, ``tiered()``'s
    ``spark.fsstate.*``) would read the clone's settings instead of the user's session's.
    """
    from fsstate_spark.pyspark.session import active_session, restore_active_session

    before = active_session()
    try:
        yield
    finally:
        restore_active_session(before)


def state_dir_of(checkpoint_location: str) -> str:
    """The state directory under a checkpoint: ``<checkpoint>/fsstate``."""
    return checkpoint_location.rstrip("/") + "/" + STATE_DIR


def default_state_uri(checkpoint_location: str | None) -> str:
    """The state URI used when neither an argument nor ``spark.fsstate.stateUri`` gives one."""
    if checkpoint_location:
        return state_dir_of(checkpoint_location)
    return os.path.abspath(DEFAULT_DIR_NAME)


def coerce(name: str, value: Any, like: Any) -> Any:
    """Convert a string from Spark conf to the type of the default ``like``.

    Raises:
        ConfigError: the text is not a value of that type.
    """
    if not isinstance(value, str) or isinstance(like, str):
        return value
    if isinstance(like, bool):
        return parse_flag(value, f"spark.fsstate setting {name}")
    try:
        if isinstance(like, int):
            return int(value)
        if isinstance(like, float):
            return float(value)
    except ValueError:
        raise ConfigError(
            f"spark.fsstate setting {name}={value!r} is not a valid {type(like).__name__}"
        ) from None
    return value


def check_state_uri(
    uri: str | Location, options: dict[str, Any] | None = None, product: Product | None = None
) -> Location:
    """Make sure a location can hold state: create it, write and delete a probe file, and, on
    an object store, check that it honours conditional writes (once per bucket and process).

    Args:
        uri: a local path or URI (``s3://bucket/prefix``, ...), or a parsed location.
        options: object store settings (they win over the URI's).
        product: whose call the message names (default ``tiered()``).

    Returns:
        The location to use (local relative paths made absolute, so workers agree on it).

    Raises:
        ConfigError: the location cannot be resolved, created or written, or its store ignores
            conditional writes (see :meth:`fsstate.storage.fileio.FileIO.check_conditional_writes`).
    """
    product = product or Product("tiered()", "tiered(state_uri=...)")
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
            f"{product.state_uri_hint} or spark.fsstate.stateUri (object store settings: "
            f"AWS_* variables, storage_options=... of {product.call} or "
            "spark.fsstate.storage.<name>)"
        ) from exc
    return location


def merge_settings(
    product: Product, known: frozenset[str], options: dict[str, Any], conf: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge ``spark.fsstate.*`` conf and the call's options (options win), names in snake_case.

    Args:
        product: whose settings these are (named by an unknown-setting error).
        known: the setting names the product takes.
        options: the call's keyword arguments.
        conf: ``spark.fsstate.*`` settings (:func:`spark_settings`, private keys removed).

    Returns:
        (settings, object store settings from ``spark.fsstate.storage.<name>``).

    Raises:
        ConfigError: a setting is not one ``product`` knows.
    """
    storage_conf = {
        k[len(STORAGE_PREFIX) :]: v for k, v in conf.items() if k.startswith(STORAGE_PREFIX)
    }
    written = conf.written if isinstance(conf, SparkConf) else {}
    # "_..." keys are other Spark settings spark_settings() was asked for: not the product's
    plain = {k: v for k, v in conf.items() if not k.startswith((STORAGE_PREFIX, "_"))}
    merged: dict[str, Any] = {}
    for source, items in (("spark.fsstate", plain), (product.call, options)):
        for raw_key, value in items.items():
            key = snake_case(raw_key)
            if key not in known and source == "spark.fsstate" and key in PRODUCT_FIELDS:
                continue  # another product's setting
            if key not in known:
                raise _unknown(product, known, source, raw_key, written.get(raw_key))
            merged[key] = value
    return merged, storage_conf


def _unknown(
    product: Product, known: frozenset[str], source: str, raw_key: str, spark_key: str | None
) -> ConfigError:
    """The error of an unknown setting: named as written, with the nearest known one."""
    key = snake_case(raw_key)
    near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    if source == "spark.fsstate":
        shown = spark_key or CONF_PREFIX + raw_key
        name = f"{raw_key!r} ({shown})"
        hint = f"; did you mean {CONF_PREFIX}{_camel(near[0])}?" if near else ""
    else:
        name, hint = repr(raw_key), (f"; did you mean {near[0]}=...?" if near else "")
    return ConfigError(
        f"unknown {source} setting {name} for {product.call}{hint} Known settings: {sorted(known)}"
    )


def _camel(name: str) -> str:
    """``memory_limit`` -> ``memoryLimit`` (how Spark conf keys are usually written)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def resolve_state_settings(
    product: Product,
    merged: dict[str, Any],
    storage_conf: dict[str, str],
    checkpoint: str | None,
) -> dict[str, Any]:
    """Validate the shared settings in ``merged`` (consumed) into :class:`StateSettings` fields.

    Args:
        product: whose call the messages name.
        merged: settings from :func:`merge_settings`; the shared ones are popped.
        storage_conf: object store settings from Spark conf (the call's ``storage_options``
            win over them).
        checkpoint: the checkpoint location, for the default state URI.

    Returns:
        Keyword arguments of :class:`StateSettings` (the state location checked).

    Raises:
        ConfigError: a setting is invalid or the state location unusable.
    """
    limit = merged.pop("memory_limit", None)
    limit_bytes = None if limit is None else parse_bytes(limit, "memory_limit")
    metrics = coerce("metrics", merged.pop("metrics", True), True)
    if not isinstance(metrics, bool):
        raise ConfigError(f"metrics={metrics!r} of {product.call}: give True or False")
    store_defaults = StoreConfig()
    store_kwargs = {
        k: coerce(k, merged.pop(k), getattr(store_defaults, k))
        for k in list(merged)
        if k in STORE_FIELDS
    }
    if not metrics and "record_summary" in STORE_FIELDS:  # no figures recorded at all
        store_kwargs["record_summary"] = False
    store = StoreConfig(**store_kwargs)
    engine_defaults = EngineConfig()
    engine_kwargs = {
        k: coerce(k, merged.pop(k), getattr(engine_defaults, k))
        for k in sorted(merged)
        if k in ENGINE_FIELDS
    }
    # validate the process-wide settings now, on the driver
    EngineConfig(
        memory_limit_bytes=limit_bytes or engine_defaults.memory_limit_bytes, **engine_kwargs
    )
    max_cached = coerce("max_cached_stores", merged.pop("max_cached_stores", None), 0)
    if max_cached is None:
        max_cached = MAX_CACHED_STORES_DEFAULT
    location = _state_location(product, merged, storage_conf, checkpoint)
    return {
        "state_uri": location.uri(),
        "location": location,
        "memory_limit_bytes": limit_bytes,
        "store": store,
        "engine": tuple(sorted(engine_kwargs.items())),
        "max_cached_stores": max_cached,
        "metrics": metrics,
    }


def _state_location(
    product: Product, merged: dict[str, Any], storage_conf: dict[str, str], checkpoint: str | None
) -> Location:
    """The state location of ``merged``'s ``state_uri`` and ``storage_options`` (both popped),
    checked (:func:`check_state_uri`).

    Raises:
        ConfigError: ``state_uri`` is not a non-empty string or path, ``storage_options`` is
            not a mapping, object store settings were given with a local path, or the location
            is unusable. Values are never shown: they may hold a secret.
    """
    uri = merged.pop("state_uri", None)
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if uri is not None and not isinstance(uri, str):
        raise ConfigError(
            f"state_uri of {product.call} is {_a(uri)}: give a directory path or URI as a "
            f"string (/data/state, s3://bucket/prefix, ...) via {product.state_uri_hint} or "
            "spark.fsstate.stateUri, or leave it out for the default (<checkpoint>/fsstate)"
        )
    if uri is not None and not uri.strip():
        raise ConfigError(
            f"state_uri={uri!r} of {product.call} is empty: give a directory or URI via "
            f"{product.state_uri_hint} or spark.fsstate.stateUri, or leave it out for the default "
            "(<checkpoint>/fsstate)"
        )
    uri = uri or default_state_uri(checkpoint)
    given = merged.pop("storage_options", None)
    if given is not None and not isinstance(given, Mapping):
        raise ConfigError(
            f"storage_options of {product.call} is {_a(given)}: give a dict of object store "
            "settings, name -> value (storage_options={'region': 'eu-west-1'}; in Spark conf: "
            "spark.fsstate.storage.<name>)"
        )
    storage = {**storage_conf, **dict(given or {})}
    target = Location.parse(uri)
    check_shared_location(target)
    if storage and target.is_local:
        raise local_options_error(
            storage,
            f"storage_options of {product.call} or spark.fsstate.storage.*",
            f"state_uri={target.uri()!r}",
        )
    return check_state_uri(uri, storage, product)


def _a(value: object) -> str:
    """``value``'s type for a message, with its article (``an int``, ``a str``)."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"
