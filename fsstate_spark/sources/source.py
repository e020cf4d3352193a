"""``spark.read.format("fsstate")`` and ``format("fsstate-metadata")``: tiered state as DataFrames.

Python data sources (PySpark 4's ``pyspark.sql.datasource``) over :mod:`fsstate.inspect`, so a
read resolves exactly as ``get`` does (sequence shadowing, tombstones, range tombstones, TTL
at the version's commit clock unless ``nowMs`` is given). Register them once per session with
:func:`register_sources`.

Options of ``fsstate`` (Spark's state reader's names where they mean the same thing):

=========================  =====================================================================
``path``                   a checkpoint location (its ``fsstate/`` and query id are found) or a
                           state URI (``spark.fsstate.state_uri``); required
``queryId``                the query's id under a shared state URI (default: the checkpoint's,
                           or the only one)
``operatorName``           the tiered store name (default: the only one)
``stateVarName``           the state variable (default: the only one)
``batchId``                the version to read (default: the newest every partition has)
``branch``                 the branch to read: another lineage of the query, after its checkpoint
                           was copied, restored or rolled back (fsstate; default the trunk,
                           with a warning naming the branches if there are any)
``flattenCollectionTypes`` ``true`` (default): a row per list element / map entry; ``false``:
                           one row per key with ``list_value`` / ``map_value``
``readChangeFeed``         ``true``: the changes of ``changeStartBatchId`` .. ``changeEndBatchId``
                           (default the newest) as ``batch_id``, ``change_type`` (``update`` /
                           ``delete``) rows (see :mod:`fsstate.inspect.changes`)
``includeExpiry``          add ``_expires_at_ms`` (fsstate)
``includeSequence``        add ``_seq`` (fsstate: the sequence number that wrote the entry)
``nowMs``                  resolve TTL at this time instead of the version's commit clock
``partitionBytes``         a store whose state variable holds more than this many stored bytes
                           (decoded) is read as several input partitions, key ranges of about
                           this size (fsstate; default 128 MiB, as ``maxPartitionBytes``)
``storage.<name>``         object store settings (as ``spark.fsstate.storage.<name>``)
=========================  =====================================================================

Columns mirror Spark's reader: ``key`` (struct of the grouping key), then ``value`` (value
state), ``list_element`` or ``list_value`` (list state), ``user_map_key`` and ``user_map_value``
or ``map_value`` (map state), then ``partition_id``; a change feed starts with ``batch_id``
and ``change_type``. ``format("fsstate-metadata")`` (option ``path`` and ``queryId``) has a
row per store and state variable at its newest version: query id, operator, partition,
retained batch ids, state kind, schemas, TTL, files, rows and bytes on storage.

Invariants:

* The declared schema is exactly the schema of the Arrow batches the reader yields (types,
  timestamps, nullability): both come from one Arrow schema (:func:`_arrow_schema`).
* One input partition per partition store, or, for a store larger than ``partitionBytes``,
  one per key range (cut at row-group starts of its files, :meth:`Snapshot.cut_points`):
  every key's rows (all its list elements or map entries) are read by exactly one input
  partition. A change feed reads one input partition per store. Nothing is written.
* Value state reads the same rows flattened or not (as Spark's reader); list and map state
  unflattened give one row per key. In a change feed a ``delete`` row's ``value`` /
  ``user_map_value`` is null (not a struct of nulls), as in Spark's feed; a deleted list
  element keeps its value, which says which element went.
* Filter pushdown (``partition_id`` equality / ``IN``, pruning stores) is offered only when
  the session enables Python filter pushdown (``spark.sql.python.filterPushdown.enabled``)
  at registration: Spark refuses a reader that implements ``pushFilters`` otherwise. PySpark
  4.0 has no filter pushdown: there every read scans all stores (filters apply after).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from fsstate.config import parse_flag
from fsstate.format.schema import KIND_LIST, KIND_MAP, schema_to_text
from fsstate.inspect import Snapshot, StoreRef, find_stores, read_changes
from fsstate.inspect.catalog import read_store_manifest
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.tables.resolve import first_of_group
from fsstate_spark.pyspark import FILTERS_PUSHDOWN
from fsstate_spark.pyspark.arrow import from_arrow_schema
from fsstate_spark.settings import STORAGE_PREFIX, default_state_uri, spark_settings
from fsstate_spark.sources.selection import EXPIRY_COL, SEQ_COL, Selection, select, selected_query

Filter: Any
EqualTo: Any
In: Any
if FILTERS_PUSHDOWN:  # Spark's pushed filters are 4.1+
    from pyspark.sql.datasource import EqualTo, Filter, In
else:
    Filter = EqualTo = In = None


def _struct_type(schema: pa.Schema) -> pa.StructType:
    return pa.struct([f.with_nullable(True) for f in schema])


def _nested(sel: Selection) -> bool:
    """Whether a read nests a key's list elements or map entries in one row (unflattened list
    or map state; value state reads the same rows either way, as Spark's reader)."""
    return not sel.flatten and sel.spec.kind in (KIND_LIST, KIND_MAP)


def _arrow_schema(sel: Selection) -> pa.Schema:
    """The Arrow schema of the batches (and, through Spark's types, the declared schema)."""
    spec = sel.spec
    flat = not _nested(sel)
    key = pa.field("key", _struct_type(spec.key_schema or pa.schema([])))
    value = _struct_type(spec.value_schema)
    fields: list[pa.Field] = []
    if sel.change_feed:
        fields += [pa.field("batch_id", pa.int64()), pa.field("change_type", pa.string())]
    fields.append(key)
    if spec.kind == KIND_MAP:
        assert spec.user_key_schema is not None
        ukey = _struct_type(spec.user_key_schema)
        if sel.flatten:
            fields += [pa.field("user_map_key", ukey), pa.field("user_map_value", value)]
        else:
            fields.append(pa.field("map_value", pa.map_(ukey, value)))
    elif spec.kind == KIND_LIST:
        if sel.flatten:
            fields.append(pa.field("list_element", value))
        else:
            fields.append(pa.field("list_value", pa.list_(value)))
    else:
        fields.append(pa.field("value", value))
    if flat and sel.with_expiry:
        fields.append(pa.field(EXPIRY_COL, pa.int64()))
    if flat and sel.with_seq:
        fields.append(pa.field(SEQ_COL, pa.int64()))
    fields.append(pa.field("partition_id", pa.int32()))
    return pa.schema(fields)


def spark_schema(sel: Selection) -> StructType:
    """The declared schema of a read."""
    return from_arrow_schema(_arrow_schema(sel))


def _struct(
    cols: list[pa.Array], schema: pa.Schema, n: int, null: pa.Array | None = None
) -> pa.StructArray:
    """The columns as one struct column; rows where ``null`` is true are null structs."""
    if not len(schema):
        return pa.array([{}] * n, pa.struct([]))
    fields = [f.with_nullable(True) for f in schema]
    arrays = [c.cast(f.type) for c, f in zip(cols, fields)]
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=null)


def shape(sel: Selection, table: pa.Table, partition: int) -> pa.RecordBatch:
    """A snapshot or change table of one store in the source's columns."""
    spec = sel.spec
    schema = _arrow_schema(sel)
    key_schema = spec.key_schema or pa.schema([])
    cols = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    names = table.column_names
    out: list[pa.Array] = []
    at = 0
    deleted: pa.Array | None = None  # change feed: a delete row's value is null, as Spark's
    if sel.change_feed:
        out += [cols[0], cols[1]]
        at = 2
        if spec.kind != KIND_LIST:  # a deleted list element's value says which element went
            deleted = pc.fill_null(pc.equal(cols[1], "delete"), False)
    n = table.num_rows
    nk = len(key_schema)
    key = _struct(cols[at : at + nk], key_schema, n)
    at += nk
    ukey: pa.StructArray | None = None
    if spec.kind == KIND_MAP:
        assert spec.user_key_schema is not None
        nu = len(spec.user_key_schema)
        ukey = _struct(cols[at : at + nu], spec.user_key_schema, n)
        at += nu
    nv = len(spec.value_schema)
    value = _struct(cols[at : at + nv], spec.value_schema, n, deleted)
    extra = {names[i]: cols[i] for i in range(at + nv, len(cols))}
    if not _nested(sel):
        out.append(key)
        if ukey is not None:
            out += [ukey, value]
        else:
            out.append(value)
        if sel.with_expiry:
            out.append(extra[EXPIRY_COL])
        if sel.with_seq:
            out.append(extra[SEQ_COL])
        rows = n
    else:  # one row per key: the elements (in append order) or the entries, nested
        starts = np.flatnonzero(first_of_group(cols[:nk])) if n else np.array([], np.int64)
        offsets = pa.array(np.append(starts, n).astype(np.int32))
        out.append(key.take(pa.array(starts, pa.int64())))
        if ukey is not None:
            out.append(pa.MapArray.from_arrays(offsets, ukey, value))
        else:
            out.append(pa.ListArray.from_arrays(offsets, value))
        rows = len(starts)
    out.append(pa.array(np.full(rows, partition, np.int32)))
    return pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(out, schema)], schema=schema)


class StorePartition(InputPartition):
    """One partition store of a read, or one key range of it (``start`` / ``stop``: cuts of
    :meth:`fsstate.inspect.Snapshot.cut_points`, None for an open end)."""

    def __init__(
        self,
        partition: int,
        start: tuple[Any, ...] | None = None,
        stop: tuple[Any, ...] | None = None,
    ) -> None:
        super().__init__((partition, start, stop))
        self.partition, self.start, self.stop = partition, start, stop


def store_partitions(sel: Selection, partition: int) -> list[StorePartition]:
    """The input partitions of one store: key ranges if it is larger than
    ``sel.partition_bytes`` (one manifest read; footers of its large files if so)."""
    if sel.change_feed:
        return [StorePartition(partition)]
    root = FileIO(sel.location)
    with Snapshot(root, sel.operator, partition, sel.version, sel.layout, sel.branch) as snap:
        if snap.stored_bytes(sel.name) <= sel.partition_bytes:
            return [StorePartition(partition)]
        cuts = snap.cut_points(sel.name, sel.partition_bytes)
    edges: list[tuple[Any, ...] | None] = [None, *cuts, None]
    return [StorePartition(partition, a, b) for a, b in pairwise(edges)]


def read_partition(
    sel: Selection,
    partition: int,
    start: tuple[Any, ...] | None = None,
    stop: tuple[Any, ...] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one partition store (of its keys in ``[start, stop)``)."""
    root = FileIO(sel.location)
    if sel.change_feed:
        assert sel.change_start is not None
        table = read_changes(
            root,
            sel.operator,
            partition,
            sel.name,
            sel.change_start,
            sel.change_end,
            with_expiry=sel.with_expiry,
            with_seq=sel.with_seq,
            layout=sel.layout,
            branch=sel.branch,
        )
    else:
        with Snapshot(root, sel.operator, partition, sel.version, sel.layout, sel.branch) as snap:
            table = snap.read(
                sel.name,
                now_ms=sel.now_ms,
                with_expiry=sel.with_expiry,
                with_seq=sel.with_seq,
                start=start,
                stop=stop,
            )
    yield shape(sel, table, partition)


class FsStateReader(DataSourceReader):
    """Reads one state variable of a tiered query (see the module docstring)."""

    def __init__(self, sel: Selection) -> None:
        self.sel = sel
        self.wanted: frozenset[int] | None = None

    def partitions(self) -> Sequence[InputPartition]:
        """One input partition per partition store (pruned by pushed filters), or per key
        range of a store larger than ``partitionBytes``."""
        parts = sorted(s.partition for s in self.sel.stores)
        if self.wanted is not None:
            parts = [p for p in parts if p in self.wanted]
        return [q for p in parts for q in store_partitions(self.sel, p)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one partition store (or key range) as Arrow batches."""
        assert isinstance(partition, StorePartition)
        yield from read_partition(self.sel, partition.partition, partition.start, partition.stop)


class FsStatePushdownReader(FsStateReader):
    """:class:`FsStateReader` that prunes stores by ``partition_id`` filters."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take ``partition_id = n`` and ``partition_id IN (...)``; return the others."""
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("partition_id",):
                self._restrict({int(f.value)})
            elif isinstance(f, In) and f.attribute == ("partition_id",):
                self._restrict({int(v) for v in f.value if v is not None})
            else:
                yield f

    def _restrict(self, parts: set[int]) -> None:
        self.wanted = frozenset(parts) if self.wanted is None else self.wanted & parts


class FsStateDataSource(DataSource):
    """``spark.read.format("fsstate")``: one state variable of a tiered query."""

    pushdown = False

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "fsstate"

    def _selection(self) -> Selection:
        sel = getattr(self, "_sel", None)
        if sel is None:
            sel = self._sel = select(dict(self.options), _session_root(self))
        return sel

    def schema(self) -> StructType:
        """Spark's schema of the read (resolved from the stores' manifests)."""
        return spark_schema(self._selection())

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader of the selected state variable."""
        sel = self._selection()
        return FsStatePushdownReader(sel) if self.pushdown else FsStateReader(sel)


class FsStatePushdownDataSource(FsStateDataSource):
    """:class:`FsStateDataSource` for sessions with Python filter pushdown enabled."""

    pushdown = True


METADATA_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("operator_name", pa.string()),
        ("partition_id", pa.int32()),
        ("min_batch_id", pa.int64()),
        ("max_batch_id", pa.int64()),
        ("num_batches", pa.int32()),
        ("state_var_name", pa.string()),
        ("state_kind", pa.string()),
        ("key_schema", pa.string()),
        ("user_key_schema", pa.string()),
        ("value_schema", pa.string()),
        ("ttl_ms", pa.int64()),
        ("num_files", pa.int64()),
        ("disk_rows", pa.int64()),
        ("disk_bytes", pa.int64()),
    ]
)


class MetadataReader(DataSourceReader):
    """Reads the manifests of every store under a state root."""

    def __init__(self, location: Location, query_id: str, stores: list[StoreRef]) -> None:
        self.location = location
        self.query_id = query_id
        self.stores = stores

    def partitions(self) -> Sequence[InputPartition]:
        """One input partition per store."""
        return [InputPartition(i) for i in range(len(self.stores))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """A row per state variable of one store (one row with null state columns if none)."""
        store = self.stores[int(partition.value)]
        manifest = read_store_manifest(FileIO(self.location), store)
        rows: list[dict[str, Any]] = []
        base = {
            "query_id": self.query_id,
            "operator_name": store.operator,
            "partition_id": store.partition,
            "min_batch_id": store.versions[0],
            "max_batch_id": store.latest,
            "num_batches": len(store.versions),
        }
        for name, entry in sorted(manifest.tables.items()):
            refs = [*entry.runs, *entry.ttl_runs]
            rows.append(
                {
                    **base,
                    "state_var_name": name,
                    "state_kind": str(entry.spec.kind),
                    "key_schema": schema_to_text(entry.spec.key_schema),
                    "user_key_schema": schema_to_text(entry.spec.user_key_schema),
                    "value_schema": schema_to_text(entry.spec.value_schema),
                    "ttl_ms": entry.spec.ttl_ms,
                    "num_files": len(refs),
                    "disk_rows": sum(r.rows for r in entry.runs),
                    "disk_bytes": sum(r.size_bytes for r in refs),
                }
            )
        if not rows:
            rows.append(base)
        yield pa.RecordBatch.from_pylist(rows, schema=METADATA_SCHEMA)


class FsStateMetadataSource(DataSource):
    """``spark.read.format("fsstate-metadata")``: the stores and state variables of a query."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "fsstate-metadata"

    def schema(self) -> StructType:
        """The fixed metadata schema."""
        return from_arrow_schema(METADATA_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader over every store (of ``queryId``, when given)."""
        loc, query_id = selected_query(dict(self.options), _session_root(self))
        return MetadataReader(loc, query_id, find_stores(FileIO(loc), prefix=""))


def _session_root(source: DataSource) -> Location | None:
    """The session state URI bound by :func:`register_sources` (None if unbound)."""
    uri = getattr(source, "session_state_uri", None)
    if not uri:
        return None
    return Location.parse(uri, getattr(source, "session_storage", None) or None)


def register_sources(spark: SparkSession) -> None:
    """Register ``fsstate`` and ``fsstate-metadata`` with a session.

    The registered classes carry the session's state URI (``spark.fsstate.stateUri``, else
    ``<spark.sql.streaming.checkpointLocation>/fsstate``, else ``./fsstate_state``: where
    ``tiered()`` puts state by default), so a checkpoint location is enough as ``path``.
    Filter pushdown is offered if the session has ``spark.sql.python.filterPushdown.enabled``
    set when this is called (register again after changing it), and PySpark has it (4.1+).
    """
    conf = spark_settings()
    uri = conf.get("state_uri") or default_state_uri(conf.get("_checkpoint_location"))
    storage = {k[len(STORAGE_PREFIX) :]: v for k, v in conf.items() if k.startswith(STORAGE_PREFIX)}
    pushdown = "spark.sql.python.filterPushdown.enabled"
    enabled = FILTERS_PUSHDOWN and parse_flag(
        str(spark.conf.get(pushdown, "false")), f"Spark setting {pushdown}"
    )
    base = FsStatePushdownDataSource if enabled else FsStateDataSource
    bound = {"session_state_uri": uri, "session_storage": storage}
    # defined here, not importable: cloudpickle ships these classes (and their settings) by value
    spark.dataSource.register(type("SessionFsStateDataSource", (base,), bound))
    spark.dataSource.register(type("SessionFsStateMetadataSource", (FsStateMetadataSource,), bound))
