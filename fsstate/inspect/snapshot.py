"""Reading any retained version of a state table as a ``pyarrow.Table``, as the engine sees it.

State files are Parquet, but reading them raw is wrong: rows are shadowed by newer sequence
numbers, deleted by tombstones and range tombstones, and expired by TTL. A
:class:`Snapshot` opens one committed version of a partition store read-only and resolves each
table with the engine's own vectorized resolution (:func:`fsstate.tables.resolve.resolve`,
the code behind ``scan`` and ``get_many``), so it returns exactly what ``get`` through the
tables would at that version.

Columns of :meth:`Snapshot.read` (see :func:`fsstate.tables.resolve.out_schema`): the grouping
key's fields, then the user key's fields (map state), then the value's fields (a value field
whose name a key field already has is prefixed ``value.``); opt-in ``_expires_at_ms`` and
``_seq`` (the sequence number that wrote the entry; a list element's identifies it). Rows are
in key order (then user key; a list's elements in append order). Every column is nullable.

TTL: rows are resolved at ``now_ms``; by default the clock the version was committed at (the
manifest's ``clock_ms``: the batch's processing time for a tiered Spark query, when that
version's expiry ran), so a version reads as its writer left it.

Lineages: a store's versions form its trunk and branches (:mod:`fsstate.store.lineage`); a
snapshot reads one version of one lineage's history (``branch``; by default the store's
lineage committed last of those no other continues, as the catalog's readers choose it; a
version below a branch's fork point is its source's).

Invariants:

* Read-only: nothing is written, no version is committed. Each read loads its table from the
  version's files into a store of its own and closes it: reads are independent and any
  number of them (the same table again, another key range) returns what ``get`` would.
* Cost: one manifest read, then the run files of the tables read (through the process's block
  cache); memory is the resolved table plus the op rows of its runs. A large table reads in
  key ranges (:meth:`Snapshot.cut_points`, ``start`` / ``stop``): each range costs the row
  groups that can hold it, and the ranges together return every row exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import pyarrow as pa

from fsstate.config import StoreConfig
from fsstate.errors import StoreClosedError, UnknownStateError
from fsstate.format.schema import TableSpec
from fsstate.inspect.catalog import StoreRef, as_fileio, current_branch
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.storage.manifest import Manifest, list_versions, read_manifest
from fsstate.store import PartitionStore, store_dir_for
from fsstate.store.lineage import check_branch, read_version
from fsstate.tables.resolve import out_schema
from fsstate.tables.scan import ScanTable


class Snapshot:
    """One committed version of a partition store, opened read-only.

    Use as a context manager, or call :meth:`close`.

    Args:
        uri: the store's root (a tiered query's ``<state_uri>/<query id>``), as a URI, a
            location or a FileIO.
        operator: operator (store) name.
        partition: partition id.
        version: committed version; None reads the newest.
        layout: the directory of the layout generation holding the version (``""``:
            generation 0; :func:`fsstate.inspect.catalog.find_stores` resolves it for a
            rescaled operator, :attr:`StoreRef.layout`).
        branch: the lineage the version is on (``""``: the trunk; None: the store's lineage
            committed last, one listing of the store; :attr:`StoreRef.branches` lists a
            store's branches, :mod:`fsstate.store.lineage`).

    Raises:
        VersionNotFoundError: the version is not committed or no longer retained (the store
            has no committed version, for ``version=None``).
        ManifestCorruptError: its manifest is damaged.
    """

    def __init__(
        self,
        uri: str | Location | FileIO,
        operator: str,
        partition: int,
        version: int | None = None,
        layout: str = "",
        branch: str | None = None,
    ) -> None:
        fileio = as_fileio(uri)
        store_dir = store_dir_for(operator, partition, layout)
        if branch is None:
            branch = current_branch(fileio, operator, partition, layout)
        check_branch(branch)
        if version is None:
            versions = list_versions(fileio, store_dir, branch)
            if not versions:  # raises VersionNotFoundError, naming it
                read_manifest(fileio, store_dir, 0, branch)
            version = versions[-1]
        self.manifest: Manifest = read_version(fileio, store_dir, version, branch)
        self._fileio, self._operator, self._partition = fileio, operator, partition
        self._layout, self.branch = layout, branch
        self._where = fileio.describe(store_dir)
        self._closed = False

    @classmethod
    def of(cls, fileio: FileIO, store: StoreRef, version: int | None = None) -> Snapshot:
        """The snapshot of a store found by :func:`fsstate.inspect.catalog.find_stores`."""
        return cls(
            store.root(fileio), store.operator, store.partition, version, store.layout, store.branch
        )

    @property
    def version(self) -> int:
        """The version read."""
        return self.manifest.version

    @property
    def clock_ms(self) -> int:
        """The store's clock when the version was committed (the default TTL time)."""
        m = self.manifest
        return m.clock_ms if m.clock_ms is not None else m.created_ms

    @property
    def specs(self) -> dict[str, TableSpec]:
        """The tables of the version by name."""
        return {name: entry.spec for name, entry in sorted(self.manifest.tables.items())}

    def spec(self, name: str) -> TableSpec:
        """The spec of table ``name``.

        Raises:
            UnknownStateError: the version has no table of that name.
        """
        entry = self.manifest.tables.get(name)
        if entry is None:
            raise UnknownStateError(
                f"state {name!r} is not in version {self.version} of store "
                f"{self._where} (its states: "
                f"{sorted(self.manifest.tables)}); pick one of those"
            )
        return entry.spec

    def schema(self, name: str, *, with_expiry: bool = False, with_seq: bool = False) -> pa.Schema:
        """The schema :meth:`read` returns for table ``name``."""
        return read_schema(self.spec(name), with_expiry=with_expiry, with_seq=with_seq)

    def stored_bytes(self, name: str) -> int:
        """Decoded bytes of table ``name``'s run files at this version (from the manifest)."""
        self.spec(name)
        return sum(ref.decoded_bytes for ref in self.manifest.tables[name].runs)

    def cut_points(self, name: str, chunk_bytes: int) -> list[tuple[Any, ...]]:
        """Keys that cut table ``name`` into key ranges of about ``chunk_bytes`` stored bytes.

        Read from the footers of its larger files (small files offer no cut). Pass two
        consecutive cuts (None before the first and after the last) to :meth:`read` as
        ``start`` / ``stop``: the ranges together read every row once, a key's rows (all its
        list elements or map entries) in one range.

        Args:
            name: state (table) name.
            chunk_bytes: stored (decoded) bytes per range to aim at (> 0).
        """
        self.spec(name)
        with self._table(name, None) as table:
            return table.cut_points(chunk_bytes=chunk_bytes)

    def read(
        self,
        name: str,
        *,
        now_ms: int | None = None,
        with_expiry: bool = False,
        with_seq: bool = False,
        start: tuple[Any, ...] | None = None,
        stop: tuple[Any, ...] | None = None,
    ) -> pa.Table:
        """The live rows of table ``name`` at this version.

        Args:
            name: state (table) name.
            now_ms: resolve TTL at this time (default :attr:`clock_ms`).
            with_expiry: add ``_expires_at_ms``.
            with_seq: add ``_seq``.
            start: read only keys from this cut on (see :meth:`cut_points`).
            stop: read only keys before this cut.
        """
        spec = self.spec(name)
        schema = read_schema(spec, with_expiry=with_expiry, with_seq=with_seq)
        if spec.key_schema is None:  # declared, never written
            return schema.empty_table()
        with self._table(name, now_ms) as table:
            got = table.scan_between(start, stop, with_expiry=with_expiry, with_seq=with_seq)
        return got.cast(schema)

    @contextmanager
    def _table(self, name: str, now_ms: int | None) -> Iterator[ScanTable]:
        """Table ``name`` loaded from the manifest into a store of its own, closed after use:
        every read starts from the version's files (a table's read state never carries over
        from one read to the next) and memory is given back after each."""
        if self._closed:
            raise StoreClosedError(f"snapshot of {self._where} is closed")
        store = PartitionStore(
            self._fileio,
            self._operator,
            self._partition,
            self.manifest,
            StoreConfig(),
            layout=self._layout,
            branch=self.branch,
        )
        try:
            store.set_time(self.clock_ms if now_ms is None else int(now_ms))
            table = store.table(name)
            assert isinstance(table, ScanTable)
            yield table
        finally:
            store.close()

    def close(self) -> None:
        """Close the snapshot (reads after this raise :class:`StoreClosedError`)."""
        self._closed = True

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(
        self,
        _exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_schema(spec: TableSpec, *, with_expiry: bool = False, with_seq: bool = False) -> pa.Schema:
    """The columns :meth:`Snapshot.read` returns for a table of ``spec`` (its key schema must
    be known; a table never written has only its value columns)."""
    if spec.key_schema is None:
        fields = [f.with_nullable(True) for f in spec.value_schema]
        if with_expiry:
            fields.append(pa.field("_expires_at_ms", pa.int64()))
        if with_seq:
            fields.append(pa.field("_seq", pa.int64()))
        return pa.schema(fields)
    return out_schema(spec, with_expiry, with_seq)


def read_table(
    uri: str | Location | FileIO,
    operator: str,
    partition: int,
    name: str,
    version: int | None = None,
    *,
    now_ms: int | None = None,
    with_expiry: bool = False,
    with_seq: bool = False,
    layout: str = "",
    branch: str | None = None,
) -> pa.Table:
    """Read table ``name`` of a store at a committed version as a ``pyarrow.Table``.

    The rows are exactly those the engine's reads return at that version (sequence
    shadowing, tombstones, range tombstones and TTL resolved). Hand the result to pandas
    (``.to_pandas()``), DuckDB or Polars as any Arrow table.

    Args:
        uri: the store's root: the ``uri`` given to :meth:`PartitionStore.open` (for a tiered
            Spark query, ``<state_uri>/<query id>``).
        operator: operator (store) name.
        partition: partition id.
        name: state (table) name.
        version: committed version (default: the newest).
        now_ms: resolve TTL at this time (default: the version's commit clock).
        with_expiry: add the ``_expires_at_ms`` column.
        with_seq: add the ``_seq`` column.
        layout: the layout generation directory (``""``: generation 0; see
            :func:`fsstate.inspect.catalog.find_stores` for a rescaled operator).
        branch: the lineage to read (``""``: the trunk; None: the store's lineage committed
            last; see :mod:`fsstate.store.lineage`).

    Raises:
        VersionNotFoundError: no such committed version (or none at all).
        UnknownStateError: the version has no table ``name``.
        ManifestCorruptError, DataFileCorruptError: a file of the version is damaged.

    Example:
        >>> import duckdb
        >>> counts = read_table("/tmp/state/<query id>", "Counter", 0, "count")
        >>> duckdb.sql("select * from counts order by 2 desc limit 5")
    """
    with Snapshot(uri, operator, partition, version, layout, branch) as snap:
        return snap.read(name, now_ms=now_ms, with_expiry=with_expiry, with_seq=with_seq)
