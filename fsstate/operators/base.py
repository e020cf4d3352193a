"""The operator contract: whole Arrow batches in, state through batched table calls, batches out.

An :class:`Operator` processes the input rows of one partition for one epoch (a micro-batch):
it declares its tables on the partition's store (:meth:`Operator.bind`), reads and writes them
with batched calls (``get_many``, ``put_many``, ``delete_many``, ``scan``, ``scan_prefixes``,
range deletes) and returns its output rows. :mod:`fsstate.operators.runner` opens the store at
the previous epoch, runs the operator and commits the epoch.

Time follows Spark: event times are microseconds since the Unix epoch (Arrow ``timestamp[us]``
columns, or int64), watermarks and delays are milliseconds, and a value is *at or below* a
watermark when ``value_us <= watermark_ms * 1000``. Each epoch carries two watermarks
(:class:`Epoch`): ``late_ms`` (the previous epoch's watermark; input at or below it is late)
and ``evict_ms`` (this epoch's; state at or below it is emitted or removed).

Invariants every operator keeps:

* Deterministic: the output and the state an epoch leaves depend only on the store's version
  and on the *set* of input rows (the runner sorts the input canonically,
  :func:`canonical_order`, led by the columns the operator groups by when it names them,
  :meth:`Operator.leading_order`), so every attempt of an epoch produces the same output and
  the same state. That is what makes a version published by another attempt safe to adopt, and so
  task retries, recomputed stages and re-run batches exactly-once.
* Between epochs an operator holds nothing outside its store but caches it can rebuild; a
  cache is valid only for the store object and version it was built from
  (:meth:`Operator.bind` is called whenever the runner hands over a store).
* Output schemas are fixed by the input schema (:meth:`Operator.output_schema`), so an empty
  epoch still returns a typed empty table.
* Combining before the shuffle (decomposable aggregates): an operator that can
  (:meth:`Operator.can_combine`) turns any subset of an epoch's input rows into fewer rows
  (:meth:`Operator.combine`, stateless, run map-side per input partition with the epoch's
  late watermark); a copy made by :meth:`Operator.with_combined` takes those rows, from any
  number of input partitions, as its input and gives exactly the output and state the raw
  rows would (and the same event times for the watermark); whether an epoch combines is
  decided from the previous epoch's record (:mod:`fsstate.operators.combining`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fsstate.errors import ConfigError, SchemaError
from fsstate.format.segment import same_as_next
from fsstate.store.partition import PartitionStore
from fsstate.store.record import CombineRecord

SIDE = "_side"  # joins: the column telling left (0) from right (1) input rows


@dataclass(frozen=True)
class Epoch:
    """What an operator knows about the epoch it processes.

    Attributes:
        epoch: the epoch (Spark's micro-batch id), the store version it commits.
        partition: the partition.
        late_ms: input at or below this watermark is late (the previous epoch's watermark).
        evict_ms: state at or below this watermark is emitted or removed (this epoch's).
        now_ms: the epoch's processing time, the same for every attempt of the epoch (None
            when the driver gives none); the store's TTL clock is set to it.
        sorted_by: the columns the batch's canonical order leads with (the operator's
            :meth:`Operator.leading_order`, when the runner could honour it; empty otherwise):
            the rows of one value of them are contiguous, in ascending order, nulls last.
    """

    epoch: int
    partition: int
    late_ms: int = 0
    evict_ms: int = 0
    now_ms: int | None = None
    sorted_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.late_ms > self.evict_ms:
            raise ConfigError(
                f"epoch {self.epoch}: the late-row watermark {self.late_ms} ms is above the "
                f"eviction watermark {self.evict_ms} ms; watermarks never move back"
            )


class Operator(ABC):
    """A stateful operator over whole Arrow batches (see the module docstring).

    Args:
        name: the operator's state name, unique within a query (its stores live under it).
    """

    #: whether the operator reads the epoch's processing time (``Epoch.now_ms``): a driver
    #: then fixes one per micro-batch, the same for every attempt
    uses_clock: bool = False
    #: the raw input schema of a copy that takes combined rows (:meth:`with_combined`)
    raw_schema: pa.Schema | None = None

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigError(
                f"operator name {name!r} must be a non-empty string without '/' (it names "
                "the operator's state directory)"
            )
        self.name = name
        self._bound: tuple[int, int | None] | None = None
        # what the last process() saw, for the combine decision (fsstate.operators.combining);
        # set by operators that combine, None otherwise
        self.last_stats: CombineRecord | None = None

    # -- declared by each operator ---------------------------------------------------------
    @abstractmethod
    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The schema of the output for input of ``input_schema`` (raises SchemaError)."""

    @abstractmethod
    def declare(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        """Declare the operator's tables on ``store`` for input of ``input_schema``
        (idempotent; raises SchemaError if the input does not fit the operator)."""

    @abstractmethod
    def process(self, batch: pa.Table, epoch: Epoch) -> pa.Table:
        """Consume one partition's input for one epoch; return the output rows."""

    def event_times(self, batch: pa.Table) -> dict[str, pa.Array]:
        """Event times (µs) of the input per watermark input, for the watermark (default:
        none; single-input operators with a time column return ``{"input": times}``)."""
        return {}

    def leading_order(self, input_schema: pa.Schema) -> tuple[str, ...]:
        """Top-level columns the runner's canonical order should sort by first (default:
        none), so that an operator grouping by them needs no sort of its own; the runner says
        in ``Epoch.sorted_by`` whether it did (:func:`leading_columns`)."""
        return ()

    def reset_caches(self) -> None:  # noqa: B027
        """Forget caches derived from state (called when the store changes identity/version)."""

    # -- combining before the shuffle (see the module docstring) ----------------------------
    def can_combine(self, input_schema: pa.Schema) -> bool:
        """Whether :meth:`combine` pre-aggregates input of ``input_schema`` (default: no)."""
        return False

    def combined_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The schema of :meth:`combine`'s rows for raw input of ``input_schema``."""
        raise NotImplementedError(f"operator {self.name!r} does not combine")

    def combine(self, batch: pa.Table, late_ms: int) -> pa.Table:
        """Map side: some raw input rows of an epoch pre-aggregated (stateless)."""
        raise NotImplementedError(f"operator {self.name!r} does not combine")

    def with_combined(self, input_schema: pa.Schema) -> Operator:
        """A copy that takes :meth:`combine`'s rows of raw input of ``input_schema``."""
        import copy

        if not self.can_combine(input_schema):
            raise ConfigError(f"operator {self.name!r} does not combine this input")
        twin = copy.copy(self)
        twin.raw_schema = input_schema
        twin._bound = None
        return twin

    def schema_of(self, input_schema: pa.Schema) -> pa.Schema:
        """The raw input schema (a combined copy's, or ``input_schema`` itself)."""
        return self.raw_schema if self.raw_schema is not None else input_schema

    # -- binding ----------------------------------------------------------------------------
    def bind(self, store: PartitionStore, input_schema: pa.Schema) -> None:
        """Hand the operator the store of the partition it runs next (at the epoch's parent)."""
        ident = (id(store), store.version)
        if self._bound != ident:
            self.reset_caches()
        self.store = store
        self.declare(store, input_schema)
        self._bound = ident

    def after_commit(self, store: PartitionStore) -> None:
        """The runner committed ``store``: caches built in the epoch stay valid for it."""
        self._bound = (id(store), store.version)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("store", None)
        state["_bound"] = None
        for k in [k for k in state if k.startswith("_cache")]:
            state[k] = None
        return state


# -- helpers shared by the operators -----------------------------------------------------------
def require_columns(op: str, schema: pa.Schema, names: Sequence[str]) -> None:
    """Raise SchemaError naming the operator and the missing columns."""
    missing = [n for n in names if n not in schema.names]
    if missing:
        raise SchemaError(
            f"operator {op!r}: input has no column(s) {missing}; it has {schema.names}"
        )


def require_time(op: str, schema: pa.Schema, name: str) -> None:
    """Raise SchemaError unless column ``name`` of ``schema`` can be an event time (a timestamp
    or an integer of microseconds): checked when a flow is built, not in a worker."""
    t = schema.field(name).type
    if not (pa.types.is_timestamp(t) or pa.types.is_integer(t)):
        raise SchemaError(
            f"operator {op!r}: event-time column {name!r} has type {t}; use a timestamp or "
            "int64 microseconds"
        )


def time_us(col: pa.Array | pa.ChunkedArray, op: str, name: str) -> pa.Array:
    """An event-time column as int64 microseconds (timestamps of any unit, or integers).

    Raises:
        SchemaError: the column is neither a timestamp nor an integer.
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = arr.type
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            arr = arr.cast(pa.timestamp("us", t.tz))
        return arr.view(pa.int64()) if hasattr(arr, "view") else arr.cast(pa.int64())
    if pa.types.is_integer(t):
        return arr.cast(pa.int64())
    raise SchemaError(
        f"operator {op!r}: event-time column {name!r} has type {t}; use a timestamp or int64 "
        "microseconds"
    )


def _sortable(t: pa.DataType) -> bool:
    """Whether the canonical order sorts by a column of type ``t``."""
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t))


def _order_column(col: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """A column the canonical order sorts by directly: the column itself if it sorts, a
    dictionary's values; None for any other nested column (a tie-breaker,
    :func:`_printed`) and for a column of nulls."""
    t = col.type
    if _sortable(t):
        return col
    if pa.types.is_dictionary(t):
        decoded = col.cast(t.value_type)
        return decoded if _sortable(decoded.type) else None
    return None


def _printed(col: pa.ChunkedArray) -> pa.Array:
    """The ``repr`` of each value of a nested column (lists, maps, dictionaries of them):
    what rows equal in every other column are ordered by."""
    return pa.array([None if v is None else repr(v) for v in col.to_pylist()], pa.string())


def leading_columns(schema: pa.Schema, first: Sequence[str]) -> tuple[str, ...]:
    """``first`` if :func:`canonical_order` can lead with those columns of ``schema`` (each
    a top-level, sortable column whose name no other column of the flattened batch has),
    else ``()``."""
    if not first:
        return ()
    flat_names = [n for f in schema for n in _flat_names(f)]
    for name in first:
        i = schema.get_field_index(name)
        if i < 0 or not _sortable(schema.field(i).type) or flat_names.count(name) != 1:
            return ()
    return tuple(first)


def _flat_names(field: pa.Field) -> list[str]:
    """The names ``Table.flatten`` gives a field's leaf columns (``parent.child``)."""
    if not pa.types.is_struct(field.type):
        return [field.name]
    return [f"{field.name}.{n}" for child in field.type for n in _flat_names(child)]


def canonical_order(batch: pa.Table, first: Sequence[str] = ()) -> pa.Table:
    """The rows sorted by every column, nulls last: one order for one set of rows, whatever
    order they arrived in. Struct fields are flattened; ``first`` (checked by
    :func:`leading_columns`) lead, the other sortable columns follow in schema order, and
    rows equal in all of them are ordered by the printed values of the nested columns (lists,
    maps), converted only when there are such rows."""
    if batch.num_rows < 2:
        return batch
    flat = batch.flatten() if any(pa.types.is_struct(t) for t in batch.schema.types) else batch
    while any(pa.types.is_struct(t) for t in flat.schema.types):
        flat = flat.flatten()
    lead = [flat.schema.get_field_index(n) for n in first]
    cols: dict[str, Any] = {}
    nested: list[int] = []
    for i in [*lead, *(j for j in range(flat.num_columns) if j not in lead)]:
        col = _order_column(flat.column(i))
        if col is not None:
            cols[f"c{i}"] = col
        elif not pa.types.is_null(flat.schema.field(i).type):
            nested.append(i)
    order = _sort_order(cols) if cols else None
    if nested and (order is None or _has_ties(cols, order)):
        cols.update({f"c{i}": _printed(flat.column(i)) for i in nested})
        order = _sort_order(cols)
    return batch if order is None else batch.take(order)


def _sort_order(cols: dict[str, Any]) -> pa.Array:
    """Ascending sort indices by ``cols`` in their order, nulls last."""
    return pc.sort_indices(pa.table(cols), sort_keys=[(n, "ascending") for n in cols])


def _has_ties(cols: dict[str, Any], order: pa.Array) -> bool:
    """Whether two rows are equal in every one of ``cols`` (nulls equal, NaN equal)."""
    taken = [pc.take(c, order) for c in cols.values()]
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in taken]
    return bool(same_as_next(arrays).any())


def max_ms(times_us: pa.Array) -> int | None:
    """The largest event time in milliseconds (floor, as Spark's ``microsToMillis``)."""
    if not len(times_us) or times_us.null_count == len(times_us):
        return None
    top = pc.max(times_us).as_py()
    return None if top is None else int(top) // 1000


def take_rows(table: pa.Table, mask: np.ndarray[Any, Any]) -> pa.Table:
    """Rows of ``table`` where the numpy bool ``mask`` is set (the table itself if all)."""
    if mask.all():
        return table
    return table.filter(pa.array(mask))


def row_struct(rows: pa.Table, struct_type: pa.StructType, start: int) -> pa.StructArray:
    """Columns ``start ..`` of ``rows`` (state-row columns holding a row's fields, in order)
    as one struct array of ``struct_type`` (the join operators' input rows)."""
    arrays = [
        rows.column(start + i).combine_chunks().cast(struct_type.field(i).type)
        for i in range(struct_type.num_fields)
    ]
    return pa.StructArray.from_arrays(arrays, fields=list(struct_type))
