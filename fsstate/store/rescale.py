"""Rescaling an operator's state from N to M partitions: a new layout generation.

:func:`rescale` reads every live row of every table of every partition store of the generation
in force at a committed version ``v`` (resolved exactly as reads resolve it: sequence shadowing,
tombstones, range tombstones, TTL at the version's own clock), asks the caller for each row's
new partition (``partition_of``: a function of the partition key columns, as an Arrow table,
returning one partition per row; a Spark driver computes it with Spark's own hash partitioning,
so keys land where Spark's shuffle sends them), writes the rows into ``M`` new stores under a
new generation directory and publishes each one's first version as an epoch
(:meth:`fsstate.store.epoch.EpochRun.of_new_store`: the epoch record written as every epoch
writes it) numbered ``v`` (so the next batch, ``v + 1``, continues from there; or a later
``as_version``, when the rescale is itself a batch of the query, as Spark's offline
repartition of a checkpoint commits one), then publishes the generation's record
(:mod:`fsstate.store.layout`).

What is carried over, per table: every live row with its per-row expiry (``_expires_at_ms``:
TTL state keeps its deadlines; the new stores' TTL indexes are built as the rows are written);
list elements in their order; the *purge point* of tables whose keys start with a time (the
open-below range tombstone deadline indexes and window panes scan from), as the lowest of the
old partitions'; and the versions' meta: the epoch records merged across the old partitions
the way a driver merges them (:meth:`fsstate.store.record.EpochRecord.merge`), so the watermark
and the event-time maxima a driver reads from version ``v`` do not change, and the operator's
own keys by :func:`fsstate.store.record.merge_operator_meta`. The writer of a version is not
carried: the new stores were written by no query run.

Invariants:

* Atomic: the generation's record is published last, with put-if-absent; until then the
  generation does not exist for anyone (:func:`fsstate.store.layout.in_force`), the old one
  stays in force and untouched (nothing of it is written or deleted). A rescale killed at any
  point leaves an unreferenced directory at most, and can be re-run: it writes a fresh
  directory. Two rescales racing publish one generation; the other raises
  :class:`fsstate.errors.CommitConflictError` and its directory stays unreferenced.
* Old generations stay readable (by version, through :func:`fsstate.store.layout.in_force`);
  their directories and unreferenced ones are left to retention or a gc.
* Bounded memory: old partitions are read one at a time, each table in key ranges of about
  ``chunk_bytes`` stored bytes (:meth:`fsstate.tables.scan.ScanTable.cut_points`); the new
  stores spill through the process's memory controller like any writer.
* Requests on an object store: 1 GET of ``operator.json``, 1 LIST of the layout records, per
  old partition 1 GET of its manifest and its run files (each once), per new partition the run
  files of its tables and 1 conditional PUT (its manifest), 1 conditional PUT of the record.
  No request per key, no listing of data.
* Rows of a partition key ``partition_of`` places outside ``[0, M)`` raise
  :class:`fsstate.errors.ConfigError` before anything is published. A table without the
  partition key columns (by name, in its grouping key) cannot be rescaled: ConfigError.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from fsstate.config import StoreConfig
from fsstate.errors import CommitConflictError, ConfigError
from fsstate.format.schema import EXPIRES, KIND_LIST, KIND_MAP, KIND_VALUE, TableSpec
from fsstate.format.tombstones import RangeTombstones
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import Manifest
from fsstate.store.epoch import EpochRun
from fsstate.store.identity import store_dir_for
from fsstate.store.layout import Layout, in_force, new_layout_dir, publish_layout, read_layouts
from fsstate.store.lineage import list_branches, read_version
from fsstate.store.partition import PartitionStore
from fsstate.store.pool import StorePool
from fsstate.store.record import EpochRecord, Writer, merge_operator_meta
from fsstate.tables import ListTable, MapTable, TableBase, ValueTable
from fsstate.tables.scan import ScanTable

__all__ = [
    "CHUNK_BYTES",
    "RescaleProgress",
    "RescaleResult",
    "log_progress",
    "rescale",
]

log = logging.getLogger("fsstate.rescale")

CHUNK_BYTES = 32 << 20  # stored bytes of one key range read at a time
PartitionOf = Callable[[pa.Table], Any]  # key columns -> one int partition per row


@dataclass(frozen=True)
class RescaleProgress:
    """Where a rescale is (handed to the ``progress`` callback after each old partition).

    Attributes:
        operator: the operator.
        done: old partitions read so far.
        total: old partitions in all.
        rows: rows written so far.
        elapsed_ms: time since the rescale started.
    """

    operator: str
    done: int
    total: int
    rows: int
    elapsed_ms: float


def log_progress(p: RescaleProgress) -> None:
    """A ``progress`` callback that logs each step at INFO (``fsstate.rescale``)."""
    log.info(
        "fsstate: rescaling %r: %d of %d old partitions read, %d rows written, %.0f ms",
        p.operator,
        p.done,
        p.total,
        p.rows,
        p.elapsed_ms,
    )


@dataclass(frozen=True)
class RescaleResult:
    """What a rescale did.

    Attributes:
        operator: the operator.
        previous: the generation that was in force.
        layout: the new generation, in force now.
        rows: live rows written (list elements and map entries counted one by one).
        tables: the tables carried over.
    """

    operator: str
    previous: Layout
    layout: Layout
    rows: int
    tables: tuple[str, ...]


def _purge_point(spec: TableSpec, entry_ranges: pa.RecordBatch | None) -> int | None:
    """The purge point of a table whose keys start with a time: the bound of its open-below
    one-field range tombstone (see :func:`fsstate.operators.expiry.purged_below`)."""
    best: int | None = None
    for lo, hi, _seq in RangeTombstones.from_batch(entry_ranges).items:
        if lo is None and hi is not None and len(hi) == 1 and isinstance(hi[0], int):
            best = hi[0] if best is None else max(best, hi[0])
    return best


def _declare(store: PartitionStore, spec: TableSpec) -> TableBase:
    if spec.kind == KIND_VALUE:
        return store.value_table(spec.name, spec.value_schema, spec.key_schema, spec.ttl_ms)
    if spec.kind == KIND_LIST:
        return store.list_table(spec.name, spec.value_schema, spec.key_schema, spec.ttl_ms)
    assert spec.user_key_schema is not None
    return store.map_table(
        spec.name, spec.user_key_schema, spec.value_schema, spec.key_schema, spec.ttl_ms
    )


def _write(table: TableBase, rows: pa.Table, now_ms: int) -> None:
    """Write resolved rows (:meth:`ScanTable.scan_between` with expiry and seq) to ``table``."""
    spec = table.spec
    assert spec.key_schema is not None
    nk = len(spec.key_schema)
    nu = len(spec.user_key_schema) if spec.kind == KIND_MAP and spec.user_key_schema else 0
    nv = len(spec.value_schema)
    cols = rows.columns
    keys = pa.Table.from_arrays(cols[:nk], schema=spec.key_schema)
    ukeys = None
    if nu:
        assert spec.user_key_schema is not None
        ukeys = pa.Table.from_arrays(cols[nk : nk + nu], schema=spec.user_key_schema)
    values = pa.Table.from_arrays(cols[nk + nu : nk + nu + nv], schema=spec.value_schema)
    expires = rows.column(EXPIRES)
    if spec.ttl_ms is None and not table.indexed and expires.null_count == len(expires):
        if isinstance(table, ValueTable):
            table.put_many(keys, values)
        elif isinstance(table, MapTable):
            assert ukeys is not None
            table.put_many(keys, ukeys, values)
        else:
            assert isinstance(table, ListTable)
            table.append_many(keys, values)
        return
    # per row: each keeps its own expiry (the TTL of a write is its expiry minus the clock)
    key_list = list(zip(*(c.to_pylist() for c in keys.columns)))
    value_list = list(zip(*(c.to_pylist() for c in values.columns)))
    exp_list = expires.to_pylist()
    try:
        if isinstance(table, ValueTable):
            for k, v, e in zip(key_list, value_list, exp_list):
                table.ttl_ms = None if e is None else e - now_ms
                table.update(k, v)
        elif isinstance(table, MapTable):
            assert ukeys is not None
            ukey_list = list(zip(*(c.to_pylist() for c in ukeys.columns)))
            for k, u, v, e in zip(key_list, ukey_list, value_list, exp_list):
                table.ttl_ms = None if e is None else e - now_ms
                table.update(k, u, v)
        else:
            assert isinstance(table, ListTable)
            for k, v, e in zip(key_list, value_list, exp_list):
                table.ttl_ms = None if e is None else e - now_ms
                table.append(k, v)
    finally:
        table.ttl_ms = spec.ttl_ms


def _key_positions(operator: str, spec: TableSpec, keys: Sequence[str]) -> list[int]:
    assert spec.key_schema is not None
    names = spec.key_schema.names
    missing = [k for k in keys if k not in names]
    if missing:
        raise ConfigError(
            f"operator {operator!r}: state {spec.name!r} has no grouping-key column(s) "
            f"{missing} (its key: {names}), so its rows cannot be given a partition by "
            f"{list(keys)}; rescale with the columns the operator's input is partitioned by"
        )
    return [names.index(k) for k in keys]


def _partitions_of(
    operator: str,
    rows: pa.Table,
    positions: list[int],
    keys: Sequence[str],
    partition_of: PartitionOf,
    partitions: int,
) -> np.ndarray:
    if not positions:
        return np.zeros(rows.num_rows, dtype=np.int64)
    key_table = pa.Table.from_arrays([rows.column(i) for i in positions], names=list(keys))
    got = partition_of(key_table)
    if isinstance(got, (pa.Array, pa.ChunkedArray)):
        ids = np.asarray(got.to_numpy(zero_copy_only=False), dtype=np.int64)
    else:
        ids = np.asarray(got, dtype=np.int64)
    if len(ids) != rows.num_rows or (len(ids) and (ids.min() < 0 or ids.max() >= partitions)):
        raise ConfigError(
            f"operator {operator!r}: partition_of returned {len(ids)} partitions for "
            f"{rows.num_rows} keys, or some outside [0, {partitions}); it must return one "
            f"partition in [0, {partitions}) per key row"
        )
    return ids


def rescale(
    fileio: FileIO,
    operator: str,
    *,
    partitions: int,
    keys: Sequence[str],
    partition_of: PartitionOf,
    version: int | None,
    config: StoreConfig | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    progress: Callable[[RescaleProgress], None] | None = None,
    as_version: int | None = None,
    lineages: Sequence[str] | None = None,
    planned_ms: int | None = None,
    source: str | None = None,
) -> RescaleResult:
    """Rescale ``operator``'s state to ``partitions`` partitions (see the module docstring).

    Args:
        fileio: the state root (the operators' state URI).
        operator: the operator (store) name.
        partitions: the new partition count (>= 1).
        keys: the columns a row's partition is computed from (the operator's partition keys;
            empty: every row goes to partition 0, as a keyless stage's do).
        partition_of: the new partition of each key row: called with an Arrow table of the
            ``keys`` columns (as the state holds them), returns one int per row.
        version: the committed version to rescale (the one the next batch starts from);
            None: nothing was committed, only the new count is recorded.
        config: settings of the new stores.
        chunk_bytes: stored bytes read at a time from a table (> 0).
        progress: called after each old partition with a :class:`RescaleProgress`.
        as_version: the version the new stores commit the rows as (default ``version``): a
            later one when the rescale itself is a batch of the query (Spark's offline
            repartition of a checkpoint commits a batch ``version + 1`` that only rescales).
        lineages: the lineage to read in each old partition (:mod:`fsstate.store.lineage`;
            None: the trunk in every one); the new generation's record names them, and its
            trunk continues them.
        planned_ms: when the batch the rescale commits was planned (a query's repartition
            batch), recorded with each new store's first version
            (:class:`fsstate.store.record.Writer`: no run, that planning).
        source: the directory of the generation to read (None: the one holding
            ``lineages``, else the newest).

    Returns:
        What was done; ``result.layout.dir`` is the new generation's directory.

    Raises:
        ConfigError: bad arguments, no recorded partition count, a table without the keys, or
            ``partition_of`` answered out of range.
        VersionNotFoundError: an old partition has no such version.
        CommitConflictError: another rescale published the generation first (re-run).
        StorageError: storage failed; nothing was published, re-run.
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"rescale of {operator!r}: partitions must be an int >= 1")
    if chunk_bytes <= 0:
        raise ConfigError(f"rescale of {operator!r}: chunk_bytes must be > 0")
    target_version = version if as_version is None else as_version
    if target_version is not None and version is not None and target_version < version:
        raise ConfigError(
            f"rescale of {operator!r}: as_version={as_version} is older than version={version}; "
            "give a version at or after the one read"
        )
    t0 = time.perf_counter()
    where = (version, lineages, source)
    old, new = _next_layout(fileio, operator, partitions, keys, target_version, where)
    writer = None if planned_ms is None else Writer(None, None, planned_ms)
    job = _Job(fileio, operator, old, new, keys, partition_of, config or StoreConfig(), t0, writer)
    rows_written = 0
    names: tuple[str, ...] = ()
    if version is not None:
        assert target_version is not None
        rows_written, names = job.copy(version, target_version, chunk_bytes, progress)
    if not publish_layout(fileio, operator, new):
        raise CommitConflictError(
            f"operator {operator!r}: layout generation {new.generation} was published by another "
            f"rescale while this one ran (under {fileio.describe(operator)}); nothing of this one "
            "is in force: read the layouts again and re-run if the count is still not the one "
            "wanted"
        )
    log.info(
        "fsstate: rescaled %r from %s to %s partitions at version %s: %d rows in %.0f ms",
        operator,
        old.partitions,
        partitions,
        version,
        rows_written,
        (time.perf_counter() - t0) * 1000,
    )
    return RescaleResult(operator, old, new, rows_written, names)


def _next_layout(
    fileio: FileIO,
    operator: str,
    partitions: int,
    keys: Sequence[str],
    target_version: int | None,
    where: tuple[int | None, Sequence[str] | None, str | None],
) -> tuple[Layout, Layout]:
    """The generation read (the one holding ``lineages``, else the one in force) and the one
    the rescale writes.

    Raises:
        ConfigError: no partition count is recorded, or ``lineages`` do not fit its count.
    """
    version, lineages, source = where
    layouts = read_layouts(fileio, operator)
    old = next((g for g in layouts if g.dir == source), None)
    if old is None:
        old = _read_generation(fileio, operator, layouts, lineages)
    if old.partitions is None:
        raise ConfigError(
            f"operator {operator!r}: no partition count is recorded under "
            f"{fileio.describe(operator)}; only state written by the operator runner can be "
            "rescaled here"
        )
    if lineages is not None and len(lineages) != old.partitions:
        raise ConfigError(
            f"rescale of {operator!r}: {len(lineages)} lineages given for the "
            f"{old.partitions} partitions of generation {old.generation}; give one per partition"
        )
    gen = layouts[-1].generation + 1
    since = -1 if target_version is None else target_version
    new = Layout(
        gen,
        partitions,
        new_layout_dir(gen),
        since,
        tuple(keys),
        layouts[0].kind,
        source=old.dir,
        lineages=tuple(lineages or ()),
        read=version,
    )
    return old, new


def _read_generation(
    fileio: FileIO, operator: str, layouts: list[Layout], lineages: Sequence[str] | None
) -> Layout:
    """The generation whose stores hold ``lineages`` (partition ``p`` lineage
    ``lineages[p]``: the newest such generation), else the newest one."""
    wanted = [line for line in lineages or () if line]
    if not wanted:
        return in_force(layouts)
    for gen in reversed(layouts):
        if gen.partitions is None:
            continue
        found = {
            b
            for p in range(gen.partitions)
            for b in list_branches(fileio, store_dir_for(operator, p, gen.dir))
        }
        if set(wanted) <= found:
            return gen
    raise ConfigError(
        f"rescale of {operator!r}: no generation of its state under {fileio.describe(operator)} "
        f"holds the lineages {sorted(set(wanted))}; give the lineages the checkpoint runs on"
    )


@dataclass(frozen=True)
class _Job:
    """One rescale's fixed parts: from the ``old`` generation to the ``new`` one."""

    fileio: FileIO
    operator: str
    old: Layout
    new: Layout
    keys: Sequence[str]
    partition_of: PartitionOf
    config: StoreConfig
    t0: float
    writer: Writer | None = None

    def copy(
        self,
        version: int,
        target_version: int,
        chunk_bytes: int,
        progress: Callable[[RescaleProgress], None] | None,
    ) -> tuple[int, tuple[str, ...]]:
        """Copy every old partition's ``version`` into the new stores, committed as
        ``target_version``; returns the rows written and the tables carried over."""
        assert self.old.partitions is not None and self.new.partitions is not None
        lines = self.new.lineages or ("",) * self.old.partitions
        manifests: list[Manifest] = [
            read_version(
                self.fileio, store_dir_for(self.operator, q, self.old.dir), version, lines[q]
            )
            for q in range(self.old.partitions)
        ]
        now_ms = max((m.clock_ms if m.clock_ms is not None else m.created_ms) for m in manifests)
        targets = self._targets(manifests, now_ms)
        rows_written = 0
        names: set[str] = set()
        try:
            for q, manifest in enumerate(manifests):
                rows_written += _copy_partition(self, q, manifest, targets, chunk_bytes, now_ms)
                names.update(manifest.tables)
                if progress is not None:
                    ms = (time.perf_counter() - self.t0) * 1000
                    done = RescaleProgress(self.operator, q + 1, len(manifests), rows_written, ms)
                    progress(done)
            # each new store's first version is an epoch's (its record: the old partitions'
            # merged); published, the store is closed (a pool that keeps none)
            record = EpochRecord.merge(EpochRecord.from_meta(m.meta) for m in manifests)
            published = StorePool(max_idle=0)
            for target in targets:
                run = EpochRun.of_new_store(
                    target, target_version, writer=self.writer, pool=published
                )
                run.commit(record)
        finally:
            for target in targets:
                if not target.closed:
                    target.close()
        return rows_written, tuple(sorted(names))

    def _targets(self, manifests: Sequence[Manifest], now_ms: int) -> list[PartitionStore]:
        """The new generation's stores, empty, with the operator's merged meta keys, every
        table declared and its purge point carried over."""
        assert self.new.partitions is not None
        specs: dict[str, TableSpec] = {}
        floors: dict[str, list[int | None]] = {}
        for m in manifests:
            for name, entry in m.tables.items():
                have = specs.get(name)
                if have is None or (have.key_schema is None and entry.spec.key_schema):
                    specs[name] = entry.spec
                floors.setdefault(name, []).append(_purge_point(entry.spec, entry.range_tombstones))
        meta = merge_operator_meta(m.meta for m in manifests)
        targets: list[PartitionStore] = []
        try:
            for p in range(self.new.partitions):
                target = PartitionStore(
                    self.fileio, self.operator, p, None, self.config, layout=self.new.dir
                )
                targets.append(target)
                target.set_time(now_ms)
                target.meta = dict(meta)
                for name, spec in sorted(specs.items()):
                    table = _declare(target, spec)
                    points = floors[name]
                    if points and all(p is not None for p in points):
                        table.delete_range(None, (min(p for p in points if p is not None),))
        except BaseException:
            for target in targets:
                target.close()
            raise
        return targets


def _copy_partition(
    job: _Job,
    q: int,
    manifest: Manifest,
    targets: list[PartitionStore],
    chunk_bytes: int,
    now_ms: int,
) -> int:
    """Copy old partition ``q``'s live rows into the new stores; returns the rows written."""
    operator, keys = job.operator, job.keys
    src = PartitionStore(job.fileio, operator, q, manifest, job.config, layout=job.old.dir)
    written = 0
    try:
        clock = manifest.clock_ms if manifest.clock_ms is not None else manifest.created_ms
        src.set_time(clock)
        for name in sorted(manifest.tables):
            table = src.table(name)
            assert isinstance(table, ScanTable)
            spec = table.spec
            if spec.key_schema is None:
                continue  # declared, never written
            positions = _key_positions(operator, spec, keys) if keys else []
            cuts: list[Any] = table.cut_points(chunk_bytes=chunk_bytes)
            for start, stop in zip([None, *cuts], [*cuts, None]):
                got = table.scan_between(start, stop, with_expiry=True, with_seq=True)
                if not got.num_rows:
                    continue
                ids = _partitions_of(operator, got, positions, keys, job.partition_of, len(targets))
                for p in np.unique(ids):
                    part = got.filter(pa.array(ids == p))
                    _write(targets[int(p)].table(name), part, now_ms)
                    written += part.num_rows
            table.release_all()  # this table's views and runs: one table in memory at a time
    finally:
        src.close()
    return written
