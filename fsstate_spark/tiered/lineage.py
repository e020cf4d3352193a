"""Which lineage of a query's state a task continues: recorded in Spark's own state, so that
fsstate's state follows the checkpoint as Spark's does.

A ``tiered()`` query keeps its state under ``<state_uri>/<query id>``, and a copied, restored or
rolled-back checkpoint has the same query id as its original. Each run of a query writes a
lineage of its own (:mod:`fsstate.store.lineage` rule 1): at the run's first batch ``b`` every
task forks version ``b - 1`` of the lineage its checkpoint goes with. Which one that is, is
recorded in Spark's own state, which lives *in* the checkpoint: at the end of the task that
forked, fsstate writes to one state variable of Spark's, :data:`LINEAGE_VAR`, the lineage it
started and the version it started from with its checksum (:class:`Lineage`), under a key of
its own per partition (:func:`marker_key`). Spark commits that row with the batch, atomically
with the rest of its checkpoint, so a copy of the checkpoint taken after any later batch says
"state on lineage ``x``", whatever its original did after.

The first task of a run in a partition (or a task whose process has not seen the run's lineage
yet) reads the marker in ``init``, before anything is read or written, and opens the lineage
it names (checking the checksum where the marker names version ``b - 1``:
:mod:`fsstate_spark.tiered.lifecycle`); if that version was not committed by this run, it forks
it into the run's lineage. Every version records when Spark planned its batch
(:func:`planned_ms`: the batch timestamp of the checkpoint's offsets log, the same for every
retry and re-run of one planning), so a retried task adopts what another attempt of its
planning committed, and the tools find a checkpoint's lineage from its offsets log alone
(:mod:`fsstate.inspect.lineage`).

Invariants:

* A marker is read and written only in a streaming task whose Spark handle is live (never on
  the driver's schema pass), read only when the lifecycle needs it (a run's first batch in a
  partition, or a process new to the run) and written only by the task that started the
  run's lineage: measured on 4.3, reading it costs a task 1-8 ms of Spark's state server (its
  first state access) and writing it 13 ms, so a running query's later batches do neither;
  every task asks the batch's timestamp (0.1 ms).
  A read asks ``exists`` before ``get`` (one more round trip only where a marker was written):
  Spark's state server logs a WARN for a ``get`` of an empty value state.
* The marker key is a valid grouping key of the query's key schema, distinct per partition
  where the first key field is a string or an integer; it lives only in :data:`LINEAGE_VAR`,
  a column family of its own, so it never meets the user's state.
* A marker of another layout generation or partition (a rescaled checkpoint: Spark's offline
  repartition moves the rows by their key) is ignored
  (the choice of a source in :class:`fsstate_spark.tiered.lifecycle.StoreCache`).
* The PySpark internals it needs (a handle's state-server client and its batch timestamp
  request, the same on 4.0 to 4.3) are read through :mod:`fsstate_spark.pyspark.handle`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from fsstate_spark.pyspark.handle import batch_timestamp, client_of

log = logging.getLogger(__name__)

LINEAGE_VAR = "_fsstate_lineage"  # Spark state variable: the lineage a partition committed
# "branch STRING, version LONG, checksum STRING, layout STRING, partition INT", as a StructType:
# a DDL string costs two round trips to the JVM's SQL parser per task (PySpark's handle)
LINEAGE_SCHEMA = StructType(
    [
        StructField("branch", StringType(), True),
        StructField("version", LongType(), True),
        StructField("checksum", StringType(), True),
        StructField("layout", StringType(), True),
        StructField("partition", IntegerType(), True),
    ]
)


@dataclass(frozen=True)
class Lineage:
    """What Spark's state of a partition says fsstate committed with it.

    Attributes:
        branch: the branch of the store's versions (``""``: the trunk).
        version: the version (the batch id).
        checksum: the checksum of that version's manifest.
        layout: the layout generation directory of the store.
        partition: the partition that wrote the marker.
    """

    branch: str
    version: int
    checksum: str
    layout: str
    partition: int

    def to_row(self) -> tuple[Any, ...]:
        """The value row of :data:`LINEAGE_VAR`."""
        return (self.branch, self.version, self.checksum, self.layout, self.partition)

    @classmethod
    def from_row(cls, row: Any) -> Lineage | None:
        """The marker of a value row (None: none, or not readable)."""
        if row is None:
            return None
        try:
            branch, version, checksum, layout, partition = tuple(row)
            return cls(
                str(branch or ""), int(version), str(checksum), str(layout or ""), int(partition)
            )
        except (TypeError, ValueError):
            log.warning("fsstate: unreadable lineage marker %r ignored", row)
            return None


def _client(handle: Any) -> Any | None:
    """The state-server client of a live executor handle (None: the driver's schema pass)."""
    client = client_of(handle)
    state = getattr(client, "handle_state", None)
    if client is None or getattr(state, "name", "PRE_INIT") == "PRE_INIT":
        return None
    return client


def planned_ms(handle: Any) -> int | None:
    """When Spark planned this micro-batch (its batch timestamp, from the checkpoint's offsets
    log), asked of the state server; None where the handle cannot say."""
    client = _client(handle)
    if client is None:
        return None
    try:
        ts = batch_timestamp(client)
    except Exception as exc:  # an older server: no planning time, so no lineage check
        log.warning("fsstate: the batch timestamp is not available here (%s)", exc)
        return None
    return ts if ts >= 0 else None


class MarkerSource(Protocol):
    """Where a task reads its partition's :class:`Lineage` from (when it needs it)."""

    def read(self) -> Lineage | None:
        """The recorded lineage (None: none)."""
        ...


class SparkMarker:
    """The :data:`LINEAGE_VAR` row of one task's partition, through Spark's handle."""

    def __init__(self, handle: Any, state: Any, partition: int) -> None:
        self._client = _client(handle)
        self._state = state
        self._key = marker_key(self._client.key_schema, partition) if self._client else None

    @property
    def live(self) -> bool:
        """Whether this task can read and write the marker."""
        return self._client is not None

    def read(self) -> Lineage | None:
        """The marker Spark's state holds for the partition (None: none)."""
        if self._client is None:
            return None
        self._client.set_implicit_key(self._key)
        try:
            # exists() first: Spark's state server logs a WARN for every get() of an empty
            # value state, and on the trunk (no fork yet) the marker is never written
            if not self._state.exists():
                return None
            return Lineage.from_row(self._state.get())
        finally:
            self._client.remove_implicit_key()

    def write(self, lineage: Lineage) -> None:
        """Record ``lineage`` in Spark's state (committed by Spark with the batch)."""
        if self._client is None:
            return
        self._client.set_implicit_key(self._key)
        try:
            self._state.update(lineage.to_row())
        finally:
            self._client.remove_implicit_key()


def marker_key(schema: Any, partition: int) -> tuple[Any, ...]:
    """A grouping key of Spark type ``schema`` (a StructType) for ``partition``'s marker."""
    fields = list(getattr(schema, "fields", []) or [])
    return tuple(_value(f.dataType, partition if i == 0 else None) for i, f in enumerate(fields))


def _value(spark_type: Any, partition: int | None) -> Any:
    """A value of ``spark_type`` (distinct per partition for strings and integers)."""
    name = type(spark_type).__name__
    p = partition or 0
    if name in ("StringType", "VarcharType", "CharType"):
        return f"\x00fsstate-lineage-{p}" if partition is not None else ""
    if name in ("LongType", "IntegerType"):
        return -(2**31) + p
    if name in ("ShortType", "ByteType"):
        return -(2**7) + p % 128
    if name in ("FloatType", "DoubleType"):
        return float(-(2**31) + p)
    if name == "DecimalType":
        return decimal.Decimal(p)
    if name == "BooleanType":
        return False
    if name == "BinaryType":
        return bytes(f"fsstate-lineage-{p}", "ascii")
    if name == "DateType":
        return dt.date(1970, 1, 1)
    if name in ("TimestampType", "TimestampNTZType"):
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC if name == "TimestampType" else None)
    if name == "StructType":
        return tuple(_value(f.dataType, None) for f in spark_type.fields)
    if name == "ArrayType":
        return []
    if name == "MapType":
        return {}
    return None
