"""The epoch record: what a committed version says about the epoch that made it.

Every epoch commits its version with a record in the version's meta (:mod:`fsstate.store.epoch`
writes it): who committed it, and for a driver of operators what the next epoch is planned
from, without reading any data (:mod:`fsstate.operators.planning`):

=====================  ==========================================================================
meta key               field
=====================  ==========================================================================
``record_format``      :data:`RECORD_FORMAT` (absent: format 0, written before this module; the
                       same keys, read the same way)
``writer``             :class:`Writer`: the query run and the operator instance that committed
``watermark_ms``       the eviction watermark the epoch used (absent: 0)
``event_time_max_ms``  the running maximum event time per watermark input, in ms, over this
                       partition's epochs so far (absent: none seen)
``combine``            :class:`CombineRecord`: how the epoch's input was combined before the
                       shuffle (absent: no record, e.g. epoch 0 or a rescaled stage)
=====================  ==========================================================================

Other meta keys belong to the operator that wrote them (e.g. a window operator's open panes);
the record neither reads nor writes them, and a rescale merges them with
:func:`merge_operator_meta`.

Invariants:

* ``EpochRecord.from_meta(record.to_meta()) == record`` for every record; a meta of format 0
  reads as the record its keys describe; a format newer than :data:`RECORD_FORMAT` raises
  :class:`fsstate.errors.ConfigError` (written by a newer fsstate) instead of being misread.
* One merge across the partitions of an epoch (:meth:`EpochRecord.merge`): the largest
  watermark, the largest event time per input, the combine records summed (none if any
  partition has none: no decision data), no writer.
* One reader of versions' metas across partitions (:func:`read_metas`: one GET each, at most
  :data:`READ_THREADS_MAX` at once), used by :func:`read_records` (receipts handed in by the
  caller, a Spark driver's accumulator, first; a partition without the version makes the
  result None) and by the flow driver's lineage check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fsstate.errors import ConfigError, VersionNotFoundError
from fsstate.storage.fileio import FileIO
from fsstate.storage.manifest import read_manifest
from fsstate.store.identity import WRITER_META, store_dir_for

__all__ = [
    "COMBINE_META",
    "EVENT_TIME_META",
    "FORMAT_META",
    "READ_THREADS_MAX",
    "RECORD_FORMAT",
    "RECORD_KEYS",
    "WATERMARK_META",
    "CombineRecord",
    "EpochRecord",
    "Writer",
    "merge_operator_meta",
    "read_metas",
    "read_records",
]

RECORD_FORMAT = 1
FORMAT_META = "record_format"
WATERMARK_META = "watermark_ms"
EVENT_TIME_META = "event_time_max_ms"
COMBINE_META = "combine"
RECORD_KEYS = (FORMAT_META, WRITER_META, WATERMARK_META, EVENT_TIME_META, COMBINE_META)
READ_THREADS_MAX = 16  # manifests read at once (object stores: one GET each)

Receipts = Mapping[tuple[str, int, int], Mapping[str, Any]]  # (operator, partition, epoch) -> meta


@dataclass(frozen=True)
class Writer:
    """Who commits an epoch: the query run, the operator instance within it and, when the
    caller knows it, when the epoch's batch was planned (``planned_ms``).

    Two instances of one run committing the same version are two operators sharing a store
    (:meth:`is_foreign_to`); an attempt of another run (a re-run after a restart) is not.
    """

    run: str | None
    instance: str | None = None
    planned_ms: int | None = None

    def to_meta(self) -> dict[str, Any]:
        """The ``writer`` meta value."""
        out: dict[str, Any] = {"run": self.run, "instance": self.instance}
        if self.planned_ms is not None:
            out["planned_ms"] = self.planned_ms
        return out

    @classmethod
    def from_meta(cls, value: Any) -> Writer | None:
        """The writer a version's ``writer`` meta value names (None: none recorded)."""
        if not isinstance(value, Mapping):
            return None
        planned = value.get("planned_ms")
        return cls(
            _opt_str(value.get("run")),
            _opt_str(value.get("instance")),
            planned if isinstance(planned, int) and not isinstance(planned, bool) else None,
        )

    def is_foreign_to(self, ours: Writer) -> bool:
        """Whether this (published) writer is another instance of ``ours``'s run."""
        return ours.run is not None and self.run == ours.run and self.instance != ours.instance


@dataclass(frozen=True)
class CombineRecord:
    """How one epoch's input was combined (:mod:`fsstate.operators.combining` decides on it).

    Attributes:
        rows: raw input rows the epoch's input stands for.
        input: rows the stage received (``rows`` when not combined).
        groups: distinct groups among them.
        combined: whether the input was combined.
        skip_until: combining is not tried again before this epoch.
    """

    rows: int = 0
    input: int = 0
    groups: int = 0
    combined: bool = False
    skip_until: int = 0

    def to_meta(self) -> dict[str, int]:
        """The ``combine`` meta value."""
        return {
            "rows": self.rows,
            "input": self.input,
            "groups": self.groups,
            "combined": int(self.combined),
            "skip_until": self.skip_until,
        }

    @classmethod
    def from_meta(cls, value: Any) -> CombineRecord | None:
        """The record of a ``combine`` meta value (None: none, or not a record)."""
        if not isinstance(value, Mapping):
            return None
        names = ("rows", "input", "groups", "combined", "skip_until")
        if any(not _is_int(value.get(n, 0)) for n in names):
            return None
        rows = int(value.get("rows", 0))
        return cls(
            rows,
            int(value.get("input", rows)),
            int(value.get("groups", rows)),
            bool(value.get("combined", 0)),
            int(value.get("skip_until", 0)),
        )

    @classmethod
    def merge(cls, records: Iterable[CombineRecord | None]) -> CombineRecord | None:
        """The stage's record from its partitions' (None if one has none)."""
        out = cls()
        for r in records:
            if r is None:
                return None
            out = cls(
                out.rows + r.rows,
                out.input + r.input,
                out.groups + r.groups,
                out.combined or r.combined,
                max(out.skip_until, r.skip_until),
            )
        return out


@dataclass(frozen=True)
class EpochRecord:
    """The record of one committed version (see the module docstring).

    Attributes:
        watermark_ms: the eviction watermark the epoch used.
        event_time_max_ms: the running maximum event time per watermark input (ms).
        combine: how the input was combined (None: no record).
        writer: who committed (None: not recorded, or a merge of several partitions).
    """

    watermark_ms: int = 0
    event_time_max_ms: Mapping[str, int] = field(default_factory=dict)
    combine: CombineRecord | None = None
    writer: Writer | None = None

    def to_meta(self) -> dict[str, Any]:
        """The record as meta keys (fields at their defaults are left out)."""
        meta: dict[str, Any] = {FORMAT_META: RECORD_FORMAT}
        if self.writer is not None:
            meta[WRITER_META] = self.writer.to_meta()
        if self.watermark_ms:
            meta[WATERMARK_META] = self.watermark_ms
        if self.event_time_max_ms:
            meta[EVENT_TIME_META] = dict(self.event_time_max_ms)
        if self.combine is not None:
            meta[COMBINE_META] = self.combine.to_meta()
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> EpochRecord:
        """The record of a version's meta (format 0 or :data:`RECORD_FORMAT`).

        Raises:
            ConfigError: the record was written in a newer format.
        """
        fmt = meta.get(FORMAT_META, 0)
        if not _is_int(fmt) or int(fmt) > RECORD_FORMAT:
            raise ConfigError(
                f"an epoch record of format {fmt!r} was written by a newer fsstate (this one "
                f"reads formats 0 to {RECORD_FORMAT}): upgrade fsstate to read this state"
            )
        seen = meta.get(EVENT_TIME_META) or {}
        return cls(
            int(meta.get(WATERMARK_META) or 0),
            {str(k): int(v) for k, v in seen.items()} if isinstance(seen, Mapping) else {},
            CombineRecord.from_meta(meta.get(COMBINE_META)),
            Writer.from_meta(meta.get(WRITER_META)),
        )

    def with_event_times(self, maxima: Mapping[str, int]) -> EpochRecord:
        """This record with the running maxima raised by ``maxima`` (per input)."""
        seen = dict(self.event_time_max_ms)
        for name, top in maxima.items():
            seen[name] = max(seen.get(name, top), top)
        return EpochRecord(self.watermark_ms, seen, self.combine, self.writer)

    @classmethod
    def merge(cls, records: Iterable[EpochRecord]) -> EpochRecord:
        """One epoch's record across partitions (see the module docstring)."""
        wm = 0
        maxima: dict[str, int] = {}
        combines: list[CombineRecord | None] = []
        for r in records:
            wm = max(wm, r.watermark_ms)
            for n, v in r.event_time_max_ms.items():
                maxima[n] = max(maxima.get(n, v), v)
            combines.append(r.combine)
        return cls(wm, maxima, CombineRecord.merge(combines) if combines else None)


def merge_operator_meta(metas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The operator's own meta keys of one version across partitions (record keys left out):
    numbers by their maximum, dicts of numbers by the maximum per key, lists of numbers by
    their sorted union (a per-partition summary such as the window operator's open panes
    becomes a superset for every new partition; a partition without it, null, makes it null:
    not known), anything else as the first partition has it."""
    out: dict[str, Any] = {}
    for meta in metas:
        for k, v in meta.items():
            if k in RECORD_KEYS:
                continue
            if k not in out:
                out[k] = dict(v) if isinstance(v, dict) else v
            else:
                out[k] = _merge_value(out[k], v)
    return out


def _merge_value(have: Any, v: Any) -> Any:
    """One operator meta value merged with another partition's (see merge_operator_meta)."""
    if _number(v) and _number(have):
        return max(have, v)
    if isinstance(have, list) and isinstance(v, list):
        if all(_number(x) for x in [*have, *v]):
            return sorted(set(have) | set(v))
        return have
    if (isinstance(have, list) and v is None) or (have is None and isinstance(v, list)):
        return None
    if isinstance(v, dict) and isinstance(have, dict):
        for n, x in v.items():
            y = have.get(n)
            have[n] = max(x, y) if _number(x) and _number(y) else have.get(n, x)
    return have


def read_metas(
    fileio: FileIO, operator: str, partitions: Sequence[int], version: int, layout: str = ""
) -> dict[int, dict[str, Any] | None]:
    """The meta of ``version`` of each partition in ``partitions`` of ``operator`` (layout
    directory ``layout``, the trunk): one GET each, at most :data:`READ_THREADS_MAX` at once;
    None for a partition without the version.

    Raises:
        ManifestCorruptError: a manifest is damaged.
    """

    def read(p: int) -> dict[str, Any] | None:
        try:
            return read_manifest(fileio, store_dir_for(operator, p, layout), version).meta
        except VersionNotFoundError:
            return None

    todo = list(partitions)
    if len(todo) <= 1:
        return {p: read(p) for p in todo}
    with ThreadPoolExecutor(min(READ_THREADS_MAX, len(todo))) as pool:
        return dict(zip(todo, pool.map(read, todo)))


def read_records(
    fileio: FileIO,
    operator: str,
    partitions: int,
    version: int,
    layout: str = "",
    receipts: Receipts | None = None,
) -> tuple[list[EpochRecord] | None, int]:
    """Every partition's record of ``version`` of ``operator`` (layout directory ``layout``):
    from ``receipts`` where a task handed one in, else from the partition's manifest
    (:func:`read_metas`).

    Returns:
        The records in partition order (None if a partition has no such version), and the
        number of manifests read.
    """
    received = receipts or {}
    metas: dict[int, Mapping[str, Any] | None] = {}
    missing: list[int] = []
    for p in range(partitions):
        meta = received.get((operator, p, version))
        if meta is not None:
            metas[p] = meta
        else:
            missing.append(p)
    metas.update(read_metas(fileio, operator, missing, version, layout))
    if any(metas[p] is None for p in range(partitions)):
        return None, len(missing)
    return [EpochRecord.from_meta(metas[p] or {}) for p in range(partitions)], len(missing)


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int)  # bools too: ``combined`` was written as one


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
