"""The settings of a tiered processor: :class:`TieredConfig` and :func:`resolve_config`.

Precedence, highest first: the arguments of :func:`fsstate_spark.tiered`, then ``spark.fsstate.*``
settings of the active SparkSession (read on the driver when ``tiered()`` is called), then the
defaults (:mod:`fsstate_spark.settings`, shared with the other products).

Default ``state_uri``: ``<spark.sql.streaming.checkpointLocation>/fsstate`` when that Spark
setting is present, else the absolute path of ``./fsstate_state`` in the driver's working
directory. A local path is only right for local mode or a single machine; a cluster needs a
URI every executor can reach (``s3://``, ``gs://``, ``hdfs://``, a shared mount).

Invariants:

* A :class:`TieredConfig` is immutable, picklable (it travels to the Python workers with the
  processor) and fully validated: every bad setting fails in :func:`resolve_config`, on the
  driver, with a :class:`fsstate.errors.ConfigError` naming the setting and ``tiered()``.
* The state URI is checked by writing and deleting a small probe file, so an unwritable
  location fails at ``tiered()`` and not in the middle of a streaming query.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from fsstate.config import parse_flag
from fsstate.errors import ConfigError
from fsstate_spark.settings import (
    ENGINE_FIELDS,
    SHARED_FIELDS,
    STORE_FIELDS,
    Product,
    StateSettings,
    copy_conf,
    merge_settings,
    resolve_state_settings,
    spark_settings,
)
from fsstate_spark.state.map_order import ENCODING_CONF, ENCODINGS, UNSAFEROW

TIERED = Product("tiered()", "tiered(state_uri=...)")
TIERED_FIELDS = STORE_FIELDS | ENGINE_FIELDS | SHARED_FIELDS | {"name", "fast_loop"}
_NAME_RE = re.compile(r"^[A-Za-z0-9._=-]+$")


@dataclass(frozen=True)
class TieredConfig(StateSettings):
    """The validated settings of one tiered processor (and the shared ones of
    :class:`fsstate_spark.settings.StateSettings`).

    Attributes:
        name: store name; the stores of a query live under ``<state_uri>/<query id>/<name>``.
        fast_loop: run the processor with fsstate's keyed loop where the executors' Python
            worker is fsstate's (:mod:`fsstate_spark.tiered.fast_loop`; ``spark.fsstate.fastLoop``);
            False: PySpark's own per-key loop.
        name_given: whether ``name`` was given (``name=`` or ``spark.fsstate.name``); else it
            is the processor's class name, and a query whose state is under one other tiered
            operator continues that one (:func:`fsstate_spark.tiered.lifecycle.operator_name`).
        state_encoding: Spark's state encoding (``spark.sql.streaming.stateStore.encodingFormat``,
            read on the driver): map state iterates in Spark's MapState order for it
            (:mod:`fsstate_spark.state.map_order`); bounded input always uses ``unsaferow``.
    """

    name: str = "tiered"
    state_encoding: str = UNSAFEROW
    name_given: bool = False
    fast_loop: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _NAME_RE.match(self.name):
            raise ConfigError(
                f"tiered(name={self.name!r}): use letters, digits and . _ = - only (it names a "
                "directory)"
            )
        if self.state_encoding not in ENCODINGS:
            raise ConfigError(
                f"{ENCODING_CONF}={self.state_encoding!r} is not an encoding fsstate knows "
                f"({ENCODINGS}); tiered map state follows Spark's MapState order for it"
            )


def resolve_config(
    processor_name: str,
    state_uri: str | os.PathLike[str] | None,
    memory_limit: int | str | None,
    name: str | None,
    options: dict[str, Any],
    conf: dict[str, str] | None = None,
) -> TieredConfig:
    """Merge arguments, Spark settings and defaults into a validated :class:`TieredConfig`.

    Args:
        processor_name: class name of the wrapped processor (the default store name).
        state_uri: argument of ``tiered()`` or None.
        memory_limit: argument of ``tiered()`` (bytes or ``"256MiB"``) or None.
        name: store name argument or None.
        options: other keyword arguments of ``tiered()``: :class:`fsstate.StoreConfig` fields,
            :class:`fsstate.controller.EngineConfig` fields, ``max_cached_stores``,
            ``storage_options``.
        conf: ``spark.fsstate.*`` settings (see :func:`fsstate_spark.settings.spark_settings`);
            read from the active session when None.

    Raises:
        ConfigError: any setting is unknown or invalid, or the state URI is unusable.
    """
    conf = spark_settings({ENCODING_CONF: "_state_encoding"}) if conf is None else copy_conf(conf)
    checkpoint = conf.pop("_checkpoint_location", None)
    encoding = conf.pop("_state_encoding", UNSAFEROW).strip().lower()
    merged, storage_conf = merge_settings(TIERED, TIERED_FIELDS, options, conf)
    for key, value in (("state_uri", state_uri), ("memory_limit", memory_limit), ("name", name)):
        if value is not None:
            merged[key] = value
    given = "name" in merged
    op_name = str(merged.pop("name", processor_name))
    fast = merged.pop("fast_loop", True)
    fast_loop = parse_flag(fast, "tiered(fast_loop=...)") if isinstance(fast, str) else fast
    if not isinstance(fast_loop, bool):
        raise ConfigError(f"tiered(fast_loop={fast!r}): give True or False")
    TieredConfig(state_uri="", name=op_name, state_encoding=encoding)  # validate before I/O
    shared = resolve_state_settings(TIERED, merged, storage_conf, checkpoint)
    return TieredConfig(
        name=op_name, state_encoding=encoding, name_given=given, fast_loop=fast_loop, **shared
    )
