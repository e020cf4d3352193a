"""Manifests: the commit point of a store version.

A manifest is a JSON document at ``<store>/manifests/<version, 20 digits>.json`` listing every
live file of the version (inherited and new), the table specs, range tombstones and the next
sequence number. Publishing it atomically *is* the commit; data files are written before it
under unique names, so a crash at any point leaves either the old or the new version.

Format (``format_version`` 2)::

    {"format": "fsstate.storage.manifest", "format_version": 2, "version": 7,
     "operator": "...", "partition": 0, "created_ms": ..., "next_seq": 1234,
     "parent_version": 6, "parent_checksum": "<checksum of the manifest it was built on>",
     "lineage_next_seqs": [1001, 1100, 1180], "chain_from": 3, "retired": ["data/..."],
     "tables": [{"name": "count", "kind": "value", "ttl_ms": null, "incarnation": 17,
                 "key_schema": "<base64 Arrow IPC schema>", "value_schema": "...",
                 "user_key_schema": null,
                 "runs": [{"path": "data/...parquet", "rows": 10, "size_bytes": 900,
                           "min_seq": 0, "max_seq": 9}],
                 "ttl_runs": [...],
                 "range_tombstones": "<base64 Arrow IPC stream: lo, hi, seq>" | null}],
     "checksum": "<sha256 of the document without this field>"}

The checksum is over the canonical form (keys sorted, no whitespace: ``json.dumps(...,
sort_keys=True, separators=(",", ":"))``) of the document without it. Files are written in that
compact form with the checksum added (older ones were indented; readers parse either).

Version 2 added ``parent_version`` / ``parent_checksum`` (the lineage: which committed manifest
the store was at when it committed this one; null for a store opened empty) and the tables'
``incarnation`` (the sequence number consumed when the table was created, so a table dropped
and declared again is a different table). Lineage lets a process holding a clean copy of an
older version catch up incrementally (:mod:`fsstate.store.catchup`); :func:`descends` walks it.
Version 1 manifests are read with those fields null and are never caught up from.

Optional fields added within version 2 (absent means "unknown"; older readers ignore them and
stay correct, only more conservative): ``lineage_next_seqs``, the ``next_seq`` of up to
:data:`LINEAGE_STEPS_MAX` ancestors along the parent links, oldest first (a bottom compaction
keeps the tombstones that a copy at any of them would need to catch up), and the run files'
``tombstones_from_seq`` (:class:`fsstate.format.refs.FileRef`); ``chain_from``, the oldest
version from which every step of this version's lineage went from ``k - 1`` to ``k`` (so the
versions ``chain_from .. version`` form one chain), and ``retired``, the files the parent
referenced that this version no longer does (the garbage it makes): retention deletes them when
the parent leaves the retained window, without listing anything
(:mod:`fsstate.store.retention`); ``meta``, a small JSON object the store's user keeps with the
version (operators record the event time they have seen and the watermark they used), carried
from each version to the next; ``lineage``, the lineage (branch) the version belongs to
(``""``: the trunk; absent: written before lineages were named, and the directory it is in
says: :mod:`fsstate.store.lineage`); ``clock_ms``, the store's clock (processing time) when the
version was committed: the time at which its TTL expiry was applied, and so the time at which
readers of the version (:mod:`fsstate.inspect`) resolve TTL by default; a table's
``removed_fields``, the value fields earlier schema evolutions removed, with their stored types
(:mod:`fsstate.format.evolution`; an older reader ignores it and refuses files holding them);
``summary``, what the version did (rows total, updated, removed and expired, bytes written and
read, memory, spills, compactions, commit time, live files; per table the row figures):
:class:`fsstate.stats.VersionSummary`, whose docstring defines every figure. Absent (a version
written by an older fsstate, or with ``StoreConfig.record_summary`` off) means unknown; a
summary this reader cannot decode reads as absent, never as a corrupt manifest.
:func:`read_summary` reads it.

Branches: a store's versions form its trunk (``<store_dir>/manifests/``) and, where its state
was forked (:mod:`fsstate.store.lineage`), branches (``<store_dir>/branches/<branch>/``); every
function here takes the branch (``""``: the trunk). Every branch's manifests reference files of
the one ``<store_dir>/data`` directory; file paths are relative to the store directory.

Publishing: a version's manifest is published with put-if-absent
(:func:`publish_manifest`), so once written it never changes; an attempt that finds its
version already published gets the other attempt's manifest back and decides what to do
(:meth:`fsstate.store.partition.PartitionStore.commit`).

Invariants:

* A manifest that is truncated, fails its checksum, or has a newer format version raises
  :class:`fsstate.errors.ManifestCorruptError` naming the file; it is never half-applied.
* Readers accept every format version up to :data:`MANIFEST_FORMAT_VERSION`.
* :func:`descends` never answers True for a target that was not committed on top of the base:
  a missing or damaged intermediate manifest means "cannot tell", which is False.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fsstate.errors import (
    DAMAGE_REMEDY,
    FsStateError,
    ManifestCorruptError,
    StorageNotFoundError,
    VersionNotFoundError,
)
from fsstate.format.refs import (
    FileRef,
    decode_batch,
    decode_schema,
    encode_batch,
    encode_schema,
)
from fsstate.format.schema import TableSpec
from fsstate.stats import VersionSummary
from fsstate.storage.fileio import FileIO

MANIFEST_FORMAT_VERSION = 2
LINEAGE_STEPS_MAX = 32  # manifests read at most to prove that a target descends from a base
MANIFEST_DIR = "manifests"
BRANCH_DIR = "branches"  # <store_dir>/branches/<branch>/<version>.json: a branch's manifests


def manifest_dir(store_dir: str, branch: str = "") -> str:
    """Directory of the manifests of ``branch`` (``""``: the trunk, ``manifests``)."""
    if not branch:
        return f"{store_dir}/{MANIFEST_DIR}"
    return f"{store_dir}/{BRANCH_DIR}/{branch}"


def manifest_path(store_dir: str, version: int, branch: str = "") -> str:
    """Relative path of the manifest of ``version`` (of ``branch``; ``""``: the trunk)."""
    return f"{manifest_dir(store_dir, branch)}/{version:020d}.json"


@dataclass
class TableEntry:
    """What a manifest records about one state table."""

    spec: TableSpec
    runs: list[FileRef] = field(default_factory=list)
    ttl_runs: list[FileRef] = field(default_factory=list)
    range_tombstones: pa.RecordBatch | None = None
    incarnation: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        s = self.spec
        out = {
            "name": s.name,
            "kind": s.kind,
            "ttl_ms": s.ttl_ms,
            "key_schema": encode_schema(s.key_schema),
            "value_schema": encode_schema(s.value_schema),
            "user_key_schema": encode_schema(s.user_key_schema),
            "runs": [r.to_json() for r in self.runs],
            "ttl_runs": [r.to_json() for r in self.ttl_runs],
            "range_tombstones": encode_batch(self.range_tombstones),
            "incarnation": self.incarnation,
        }
        if s.removed_fields is not None:
            out["removed_fields"] = encode_schema(s.removed_fields)
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> TableEntry:
        """Inverse of :meth:`to_json`."""
        value_schema = decode_schema(obj["value_schema"])
        assert value_schema is not None
        spec = TableSpec(
            name=obj["name"],
            kind=obj["kind"],
            value_schema=value_schema,
            key_schema=decode_schema(obj.get("key_schema")),
            user_key_schema=decode_schema(obj.get("user_key_schema")),
            ttl_ms=obj.get("ttl_ms"),
            removed_fields=decode_schema(obj.get("removed_fields")),
        )
        return TableEntry(
            spec=spec,
            runs=[FileRef.from_json(r) for r in obj.get("runs", [])],
            ttl_runs=[FileRef.from_json(r) for r in obj.get("ttl_runs", [])],
            range_tombstones=decode_batch(obj.get("range_tombstones")),
            incarnation=_opt_int(obj.get("incarnation")),
        )


@dataclass
class Manifest:
    """One committed version of a partition store."""

    version: int
    operator: str
    partition: int
    next_seq: int
    tables: dict[str, TableEntry]
    created_ms: int = 0
    parent_version: int | None = None
    parent_checksum: str | None = None
    lineage_next_seqs: list[int] = field(default_factory=list)
    chain_from: int | None = None
    retired: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    clock_ms: int | None = None
    summary: VersionSummary | None = None
    lineage: str | None = None  # the branch it belongs to ("" trunk; None: not recorded)
    checksum: str = ""  # set when serialized or parsed

    def tombstone_horizon_seq(self) -> int:
        """Smallest ``next_seq`` of this version and the ancestors a copy may catch up from.

        Tombstones with a seq at or above it must survive compaction on this lineage; older
        ones may go (a copy that old cannot catch up: its lineage walk would be too long).
        """
        return min([*self.lineage_next_seqs, self.next_seq])

    def child_lineage(self) -> list[int]:
        """``lineage_next_seqs`` of a manifest committed on top of this one."""
        return [*self.lineage_next_seqs, self.next_seq][-LINEAGE_STEPS_MAX:]

    def files(self) -> set[str]:
        """Every file path (relative to the store directory) the version needs."""
        out: set[str] = set()
        for t in self.tables.values():
            out.update(r.path for r in t.runs)
            out.update(r.path for r in t.ttl_runs)
        return out

    def to_bytes(self) -> bytes:
        """Serialized manifest with its checksum."""
        body = {
            "format": "fsstate.storage.manifest",
            "format_version": MANIFEST_FORMAT_VERSION,
            "version": self.version,
            "operator": self.operator,
            "partition": self.partition,
            "created_ms": self.created_ms or int(time.time() * 1000),
            "next_seq": self.next_seq,
            "parent_version": self.parent_version,
            "parent_checksum": self.parent_checksum,
            "lineage_next_seqs": self.lineage_next_seqs,
            "chain_from": self.chain_from,
            "retired": self.retired,
            "tables": [t.to_json() for t in self.tables.values()],
        }
        if self.meta:
            body["meta"] = self.meta
        if self.clock_ms is not None:
            body["clock_ms"] = self.clock_ms
        if self.lineage is not None:
            body["lineage"] = self.lineage
        if self.summary is not None:
            body["summary"] = self.summary.to_json()
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        body["checksum"] = self.checksum = hashlib.sha256(canonical.encode()).hexdigest()
        # compact, as the checksum's form: the C encoder (an indent falls back to Python's
        # encoder, which took most of a small commit's serializing time)
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def from_bytes(data: bytes, where: str) -> Manifest:
        """Parse and verify a manifest; ``where`` names the file in errors."""
        try:
            body = json.loads(data.decode("utf-8"))
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except (UnicodeDecodeError, ValueError) as exc:
            raise ManifestCorruptError(
                f"manifest {where} is not valid JSON ({exc}): it is truncated or corrupted; "
                f"{DAMAGE_REMEDY}",
                where,
            ) from exc
        checksum = body.pop("checksum", None)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        if checksum != hashlib.sha256(canonical.encode()).hexdigest():
            raise ManifestCorruptError(
                f"manifest {where} fails its checksum: it was modified or corrupted; "
                f"{DAMAGE_REMEDY}",
                where,
            )
        fmt = body.get("format_version")
        if body.get("format") != "fsstate.storage.manifest" or not isinstance(fmt, int):
            raise ManifestCorruptError(f"{where} is not an fsstate manifest", where)
        if fmt > MANIFEST_FORMAT_VERSION:
            raise ManifestCorruptError(
                f"manifest {where} has format version {fmt}, this fsstate reads up to "
                f"{MANIFEST_FORMAT_VERSION}: upgrade fsstate",
                where,
            )
        try:
            tables = [TableEntry.from_json(t) for t in body["tables"]]
            return Manifest(
                version=int(body["version"]),
                operator=str(body["operator"]),
                partition=int(body["partition"]),
                next_seq=int(body["next_seq"]),
                tables={t.spec.name: t for t in tables},
                created_ms=int(body.get("created_ms", 0)),
                parent_version=_opt_int(body.get("parent_version")),
                parent_checksum=_opt_str(body.get("parent_checksum")),
                lineage_next_seqs=[int(x) for x in body.get("lineage_next_seqs") or []],
                chain_from=_opt_int(body.get("chain_from")),
                retired=[str(x) for x in body.get("retired") or []],
                meta=dict(body.get("meta") or {}),
                clock_ms=_opt_int(body.get("clock_ms")),
                summary=_summary(body.get("summary")),
                lineage=_opt_str(body.get("lineage")),
                checksum=str(checksum),
            )
        except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
            raise ManifestCorruptError(
                f"manifest {where} has a bad field ({exc}); {DAMAGE_REMEDY}", where
            ) from exc


def _summary(obj: Any) -> VersionSummary | None:
    """The ``summary`` field, or None if absent or undecodable (it informs, it never decides)."""
    if obj is None:
        return None
    try:
        return VersionSummary.from_json(obj)
    except (TypeError, ValueError, AttributeError):
        return None


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def read_manifest(fileio: FileIO, store_dir: str, version: int, branch: str = "") -> Manifest:
    """Read and verify the manifest of ``version`` (of ``branch``).

    Raises:
        VersionNotFoundError: no manifest for that version.
        ManifestCorruptError: the manifest cannot be decoded.
    """
    path = manifest_path(store_dir, version, branch)
    try:
        data = fileio.read_bytes(path)
    except StorageNotFoundError as exc:
        available = list_versions(fileio, store_dir, branch)
        of = f" (branch {branch})" if branch else ""
        raise VersionNotFoundError(
            f"version {version} of store {fileio.describe(store_dir)}{of} does not exist "
            f"(retained versions: {_summarize(available)}); open one of those, or start "
            "from an empty store"
        ) from exc
    return Manifest.from_bytes(data, fileio.describe(path))


def read_summary(
    fileio: FileIO, store_dir: str, version: int, branch: str = ""
) -> VersionSummary | None:
    """The summary of committed ``version`` (of ``branch``); None if it recorded none.

    Raises:
        VersionNotFoundError: no manifest for that version.
        ManifestCorruptError: the manifest cannot be decoded.
    """
    return read_manifest(fileio, store_dir, version, branch).summary


def read_summaries(
    fileio: FileIO, store_dir: str, versions: list[int] | None = None, branch: str = ""
) -> list[tuple[int, VersionSummary | None]]:
    """``(version, summary)`` of ``versions`` (None: every committed version of ``branch``),
    ascending; a version retention deleted meanwhile is left out."""
    todo = list_versions(fileio, store_dir, branch) if versions is None else sorted(versions)
    out = []
    for v in todo:
        try:
            out.append((v, read_summary(fileio, store_dir, v, branch)))
        except VersionNotFoundError:
            continue
    return out


def publish_manifest(
    fileio: FileIO, store_dir: str, manifest: Manifest, branch: str = ""
) -> Manifest:
    """Publish a manifest if its version has none yet (the commit point).

    Returns:
        ``manifest`` if this call published it; else the manifest another attempt published
        for the version (compare checksums to tell).
    """
    if manifest.lineage is None:
        manifest.lineage = branch  # every version names its lineage
    data = manifest.to_bytes()
    if fileio.publish_if_absent(manifest_path(store_dir, manifest.version, branch), data):
        return manifest
    return read_manifest(fileio, store_dir, manifest.version, branch)


def list_versions(fileio: FileIO, store_dir: str, branch: str = "") -> list[int]:
    """Committed versions of ``branch`` present in the store directory, ascending."""
    out = []
    for entry in fileio.list(manifest_dir(store_dir, branch)):
        name = entry.path.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def _summarize(versions: list[int]) -> str:
    if not versions:
        return "none"
    if len(versions) <= 6:
        return ", ".join(map(str, versions))
    return f"{versions[0]}..{versions[-1]} ({len(versions)} versions)"


def descends(
    fileio: FileIO, store_dir: str, base: Manifest, target: Manifest, branch: str = ""
) -> bool:
    """Whether ``target`` was committed on top of ``base`` (directly or through versions).

    Lineage: every manifest records the version and checksum of the manifest its store was at
    when it committed. The target descends from the base if walking ``parent`` links from the
    target reaches the base's version with the base's exact checksum, reading at most
    :data:`LINEAGE_STEPS_MAX` intermediate manifests. A re-committed version (a retried or
    speculative task) has another checksum, so a diverged copy is never advanced.
    """
    if not base.checksum or target.version <= base.version:
        return False
    m = target
    for _ in range(LINEAGE_STEPS_MAX):
        pv, ps = m.parent_version, m.parent_checksum
        if pv is None or ps is None or pv < base.version:
            return False
        if pv == base.version:
            return ps == base.checksum
        try:
            parent = read_manifest(fileio, store_dir, pv, branch)
        except FsStateError:
            return False
        if parent.checksum != ps:
            return False
        m = parent
    return False
