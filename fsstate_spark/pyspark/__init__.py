"""PySpark's internals, behind one package: the only place that touches them.

fsstate_spark supports the PySpark minors in :data:`SUPPORTED_MINORS` (the adapters, the
compatibility matrix of :mod:`devkit.compat_matrix` and the docs' support table read this
tuple). Their public APIs agree on what fsstate uses, except for a few internals and late
features, adapted here:

* :mod:`fsstate_spark.pyspark.arrow`: Spark schemas to Arrow, and Arrow to pandas and back
  as Spark's Python worker converts for ``transformWithStateInPandas``
  (``pyspark.sql.conversion`` from 4.2, that release's serializers before).
* :mod:`fsstate_spark.pyspark.worker`: the Python worker's set-up of a transformWithState
  task (``read_udfs``, its eval types, its Arrow framing), read by one small module per minor
  where they differ (``v4_1``, ``v4_2``, ``v4_3``; the pieces they share: ``task``).
* :mod:`fsstate_spark.pyspark.state_client`: Spark's state-server client as the keyed loop
  drives it (the deferred implicit key, expired timers); ``handle``: what is read of a
  handle's client elsewhere (the batch timestamp, the DDL parser).
* ``rows``: ``Row`` subclasses with fast field reads (``Row.__fields__``).
* ``session``: the active session and context, py4j's gateway, the checkpoint manager;
  ``listener``: a query listener's JVM twin.
* ``plans``: a DataFrame's and a ``GroupedData``'s plan, classic (py4j) and Spark Connect.

Invariants:

* Only this package imports PySpark's worker, serializers, Arrow/pandas conversion and
  state-server client modules, or reads a ``_``-prefixed attribute of a PySpark or py4j object
  (``make lint``: :mod:`lint.private`; :mod:`pyspark_fsstate.worker`, the worker's entry
  module, imports ``pyspark.worker`` itself since it must not import fsstate at start-up).
* :func:`minor` is the one parse of PySpark's version; a minor outside
  :data:`SUPPORTED_MINORS` is refused by :func:`require_supported_pyspark` where fsstate starts
  work, and otherwise treated as the nearest supported one.
* This module imports nothing of PySpark but its version (the Python worker imports it).
"""

from __future__ import annotations

import pyspark

from fsstate.errors import ConfigError

SUPPORTED_MINORS: tuple[tuple[int, int], ...] = ((4, 0), (4, 1), (4, 2), (4, 3))
"""The PySpark minors fsstate_spark supports."""


def minor(version: str | None = None) -> tuple[int, int] | None:
    """``(major, minor)`` of a PySpark version string such as ``"4.1.4"`` or ``"4.2.0.dev1"``
    (default: the running PySpark's); None if it is not ``X.Y...``."""
    parts = (pyspark.__version__ if version is None else version).split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


PYSPARK_MINOR: tuple[int, int] = minor() or SUPPORTED_MINORS[-1]
"""The running PySpark's ``(major, minor)`` (an unparsable development version: the newest
supported)."""

ROW_TRANSFORM_WITH_STATE: bool = PYSPARK_MINOR >= (4, 1)
"""Whether Spark has Row-flavour ``transformWithState`` (its eval types are 4.1+)."""

TWS_PANDAS_ARROW_CAST: bool = PYSPARK_MINOR >= (4, 1)
"""Whether Spark's worker casts a ``transformWithStateInPandas`` output column with Arrow when
its pandas type does not convert directly (4.0's worker does not)."""

FILTERS_PUSHDOWN: bool = PYSPARK_MINOR >= (4, 1)
"""Whether Python data sources can take pushed filters (``pyspark.sql.datasource.Filter``,
imported by :mod:`fsstate_spark.sources.source`, not here: ``pyspark.sql.datasource`` costs a
Python worker that never reads a state source ~40 ms to import)."""

OFFLINE_REPARTITION: bool = PYSPARK_MINOR >= (4, 2)
"""Whether Spark can repartition a stopped query's checkpoint (4.2+:
:func:`fsstate_spark.pyspark.session.checkpoint_manager`)."""


def _supported_range() -> str:
    first, last = SUPPORTED_MINORS[0], SUPPORTED_MINORS[-1]
    return (
        f"PySpark {first[0]}.{first[1]} to {last[0]}.{last[1]} "
        f"(pyspark>={first[0]}.{first[1]},<{last[0]}.{last[1] + 1})"
    )


def unsupported_major() -> ImportError | None:
    """The error to raise at import if the running PySpark is of another major than the
    supported minors' (None: it is not), before anything imports PySpark 4's modules."""
    if pyspark.__version__.startswith(f"{SUPPORTED_MINORS[0][0]}."):
        return None
    return ImportError(
        f"fsstate_spark runs on {_supported_range()}; this is PySpark "
        f"{pyspark.__version__}: install a supported PySpark (docs/compatibility.md)"
    )


def require_supported_pyspark(what: str) -> None:
    """Refuse a PySpark minor outside :data:`SUPPORTED_MINORS` in one line naming the range.

    Args:
        what: the call that needs a supported PySpark, for the message.

    Raises:
        ConfigError: the running PySpark's minor is not supported.
    """
    if (minor() or SUPPORTED_MINORS[-1]) not in SUPPORTED_MINORS:
        raise ConfigError(
            f"{what}: fsstate runs on {_supported_range()}; this is PySpark "
            f"{pyspark.__version__}: install a supported PySpark or an fsstate release that "
            "supports yours (docs/compatibility.md)"
        )
