"""Options of ``format("fsstate")`` resolved to a :class:`Selection`: which query, operator,
state variable, version or change range, and how to shape and split the read.

Invariants:

* Resolving costs one listing of the query's stores and one manifest read; it writes nothing.
* A :class:`Selection` is frozen and picklable: the driver resolves it once and it travels to
  the readers unchanged, so every input partition reads the same version of the same state.
* A read names its lineage (option ``branch``; :mod:`fsstate.store.lineage`: each run of a
  query, a copied, restored or rolled-back checkpoint's too, goes on on one of its own) or
  reads the operator's lineage committed last, with one warning naming the other live ones
  (never silent); it reads every partition of the operator or refuses
  (:class:`fsstate.errors.PartialStateError`), unless option ``partial``.
* A bad, missing or ambiguous option raises :class:`fsstate.errors.ConfigError` naming the
  option and what to give instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from fsstate.config import parse_flag
from fsstate.errors import ConfigError, PartialStateError, StorageNotFoundError
from fsstate.format.schema import TableSpec
from fsstate.inspect import StoreRef, find_stores
from fsstate.inspect.catalog import (
    branch_names,
    live_lineages,
    missing_partitions,
    on_branch,
    read_store_manifest,
)
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.lineage import check_branch
from fsstate_spark.settings import STATE_DIR

log = logging.getLogger(__name__)

EXPIRY_COL = "_expires_at_ms"
SEQ_COL = "_seq"
PARTITION_BYTES = 128 * 1024 * 1024  # default of option partitionBytes


def _flag(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    return parse_flag(raw, f"fsstate source: option {name}")


def _int(options: dict[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw))
    except ValueError:
        raise ConfigError(f"fsstate source: option {name}={raw!r} must be an integer") from None
    if value < 0:
        raise ConfigError(f"fsstate source: option {name}={raw!r} must be >= 0")
    return value


def _one(what: str, found: Sequence[str], option: str, where: str) -> str:
    if len(found) == 1:
        return found[0]
    if not found:
        raise ConfigError(f"fsstate source: no {what} found under {where}")
    raise ConfigError(
        f"fsstate source: {where} holds several {what}s ({', '.join(found)}); choose one with "
        f"option {option}"
    )


@dataclass(frozen=True)
class Selection:
    """What a read resolved its options to (picklable: it travels to the readers)."""

    location: Location
    query_id: str
    operator: str
    name: str
    spec: TableSpec
    stores: tuple[StoreRef, ...]
    version: int
    change_start: int | None
    change_end: int | None
    flatten: bool
    with_expiry: bool
    with_seq: bool
    now_ms: int | None
    partition_bytes: int = PARTITION_BYTES
    partitions: frozenset[int] | None = field(default=None)
    branch: str = ""  # "" : the trunk

    @property
    def layout(self) -> str:
        """The layout generation directory of the stores read (``""``: generation 0)."""
        return self.stores[0].layout if self.stores else ""

    @property
    def change_feed(self) -> bool:
        """Whether this reads a change feed."""
        return self.change_start is not None


def _storage(options: dict[str, str]) -> dict[str, str]:
    return {k[len("storage.") :]: v for k, v in options.items() if k.startswith("storage.")}


def _checkpoint_query(loc: Location) -> str | None:
    """The query id of a checkpoint location (None: ``loc`` is not a checkpoint)."""
    try:
        meta = json.loads(FileIO(loc).read_bytes("metadata").decode("utf-8"))
    except (StorageNotFoundError, ValueError, UnicodeDecodeError):
        return None
    return str(meta["id"]) if isinstance(meta, dict) and "id" in meta else None


def selected_query(options: dict[str, str], session_root: Location | None) -> tuple[Location, str]:
    """The root of one query's stores (``<state URI>/<query id>``) named by the options, and
    the query id.

    ``path`` is a checkpoint location (its query id is read from its ``metadata``; the state
    is looked for in ``<path>/fsstate``, then under the session's state URI) or a state URI
    (the query is ``queryId``, or the only one there).

    Raises:
        ConfigError: ``path`` is missing, or no (single) query's state is found.
    """
    lower = {k.lower(): v for k, v in options.items()}
    path = lower.get("path")
    if not path:
        raise ConfigError(
            'fsstate source: option "path" is required: a checkpoint location or a state URI'
        )
    loc = Location.parse(path, _storage(options) or None)
    query = lower.get("queryid")
    checkpoint_query = _checkpoint_query(loc)
    if checkpoint_query is not None:
        query = query or checkpoint_query
        candidates = [loc.child(STATE_DIR)] + ([session_root] if session_root else [])
        for root in candidates:
            if find_stores(FileIO(root.child(query))):
                return root.child(query), query
        raise ConfigError(
            f"fsstate source: no tiered state of query {query} (checkpoint {loc.describe()}) "
            f"under {' or '.join(c.describe() for c in candidates)}; if the query ran with "
            "another spark.fsstate.stateUri, pass that as path with option queryId"
        )
    if query is None:
        found = sorted({s.prefix for s in find_stores(FileIO(loc))})
        query = _one("query", found, "queryId", loc.describe())
    return (loc.child(query) if query else loc), query


def _operator_stores(lower: dict[str, str], io: FileIO, where: str) -> tuple[str, list[StoreRef]]:
    """The operator read (option ``operatorName``, or the only one) and its stores."""
    stores = find_stores(io, prefix="")
    operator = lower.get("operatorname") or _one(
        "operator", sorted({s.operator for s in stores}), "operatorName", where
    )
    stores = [s for s in stores if s.operator == operator]
    if not stores:
        raise ConfigError(
            f"fsstate source: no committed state of operator {operator!r} under {where}; "
            "check path, queryId and operatorName"
        )
    return operator, stores


def _on_branch(
    lower: dict[str, str], stores: list[StoreRef], operator: str, where: str
) -> tuple[str, list[StoreRef]]:
    """The lineage read (option ``branch``, default the operator's current lineage: the one
    committed last) and the stores holding it; other live lineages are named in a warning,
    and partitions without the lineage read are refused unless option ``partial``."""
    named = lower.get("branch")
    if named is None:
        branch = stores[0].branch
        others = [n or "the trunk" for n in live_lineages(stores) if n != branch]
        if others:
            log.warning(
                "fsstate source: reading %s of operator %r under %s, the lineage committed "
                "last; other live lineages (a copied, restored or rolled-back checkpoint): %s. "
                "Choose one with option branch",
                f"branch {branch}" if branch else "the trunk",
                operator,
                where,
                ", ".join(others),
            )
        views = [s for s in stores if s.versions]
    else:
        branch = check_branch(named)
        views = on_branch(stores, branch)
        if not views:
            raise ConfigError(
                f"fsstate source: operator {operator!r} under {where} has no branch {branch!r} "
                f"(its branches: {', '.join(branch_names(stores)) or 'none'}); check option "
                "branch"
            )
    return branch, views


def _whole(lower: dict[str, str], io: FileIO, stores: list[StoreRef], operator: str) -> None:
    """Refuse a read of part of an operator's state (partitions without the lineage read),
    unless option ``partial``.

    Raises:
        PartialStateError: partitions are missing and ``partial`` is not set.
    """
    if _flag(lower, "partial", False):
        return
    for _, lacking in missing_partitions(io, stores).items():
        line = stores[0].branch
        raise PartialStateError(
            f"fsstate source: partitions {lacking} of operator {operator!r} hold no version of "
            f"{'branch ' + line if line else 'the trunk'}, the lineage read: the rows would be "
            "part of its state, so nothing was read. See fsstate verify (and fsstate-spark "
            "repair); option partial=true reads the partitions there are"
        )


def _batches(lower: dict[str, str], newest: int) -> tuple[bool, int, int | None, int | None]:
    """(change feed, version read, change start, change end) from the batch options; the
    version defaults to ``newest`` (the newest one every partition has)."""
    change_feed = _flag(lower, "readchangefeed", False)
    version = _int(lower, "batchid")
    start = _int(lower, "changestartbatchid")
    end = _int(lower, "changeendbatchid")
    if change_feed:
        if start is None:
            raise ConfigError("fsstate source: readChangeFeed needs option changeStartBatchId")
        if version is not None:
            raise ConfigError("fsstate source: give batchId or readChangeFeed, not both")
        end = newest if end is None else end
        version = end
    elif start is not None or end is not None:
        raise ConfigError(
            "fsstate source: changeStartBatchId / changeEndBatchId need readChangeFeed=true"
        )
    return change_feed, newest if version is None else version, start, end


def _stores_at(
    io: FileIO, stores: list[StoreRef], operator: str, version: int, where: str
) -> list[StoreRef]:
    """The stores holding ``version``: those of the layout generation then in force (seen on
    the lineage ``stores`` are seen on where that generation holds it)."""
    since = stores[0].since
    if version >= since:
        return stores
    older = find_stores(io, prefix="", operator=operator, version=version)
    # the lineage read, or (a rescale read another lineage into the newer generation) the
    # older generation's lineage committed last
    stores = on_branch(older, stores[0].branch) or [s for s in older if s.versions]
    if not stores:
        raise ConfigError(
            f"fsstate source: no state of operator {operator!r} at batch {version} under "
            f"{where} (it was rescaled at batch {since} and the older layout "
            "generation is gone); read a later batch"
        )
    return stores


def _state_spec(
    lower: dict[str, str], io: FileIO, store: StoreRef, operator: str, version: int
) -> tuple[str, TableSpec]:
    """The state variable read (option ``stateVarName``, or the only one) and its spec at
    ``version`` (one manifest read)."""
    manifest = read_store_manifest(io, store, version)
    name = lower.get("statevarname") or _one(
        "state variable", sorted(manifest.tables), "stateVarName", f"operator {operator!r}"
    )
    entry = manifest.tables.get(name)
    if entry is None:
        raise ConfigError(
            f"fsstate source: operator {operator!r} has no state variable {name!r} at batch "
            f"{version} (it has: {', '.join(sorted(manifest.tables)) or 'none'})"
        )
    return name, entry.spec


def select(options: dict[str, str], session_root: Location | None = None) -> Selection:
    """Resolve the options of a read (one listing and a manifest read per store).

    Args:
        options: the reader's options.
        session_root: the state URI of the session that registered the source (where
            ``tiered()`` puts state by default).

    Raises:
        ConfigError: an option is missing, malformed or ambiguous; the message says which.
        VersionNotFoundError: the batch id is not retained by every partition.
    """
    opts = {k: str(v) for k, v in options.items()}
    lower = {k.lower(): v for k, v in opts.items()}
    loc, query_id = selected_query(opts, session_root)
    io = FileIO(loc)
    where = loc.describe()
    operator, stores = _operator_stores(lower, io, where)
    branch, stores = _on_branch(lower, stores, operator, where)
    _whole(lower, io, stores, operator)
    newest = min(s.latest for s in stores)  # the newest version every partition has
    change_feed, version, start, end = _batches(lower, newest)
    stores = _stores_at(io, stores, operator, version, where)
    name, spec = _state_spec(lower, io, stores[0], operator, version)
    flatten = _flag(lower, "flattencollectiontypes", True)
    if change_feed and not flatten and spec.kind != "value":
        raise ConfigError(
            "fsstate source: readChangeFeed reads list and map state flattened; drop "
            "flattenCollectionTypes=false"
        )
    return Selection(
        location=loc,
        query_id=query_id,
        operator=operator,
        name=name,
        spec=spec,
        stores=tuple(stores),
        version=version,
        change_start=start if change_feed else None,
        change_end=end if change_feed else None,
        flatten=flatten,
        with_expiry=_flag(lower, "includeexpiry", False),
        with_seq=_flag(lower, "includesequence", False),
        now_ms=_int(lower, "nowms"),
        partition_bytes=_partition_bytes(lower),
        branch=branch,
    )


def _partition_bytes(lower: dict[str, str]) -> int:
    value = _int(lower, "partitionbytes")
    if value is None:
        return PARTITION_BYTES
    if value == 0:
        raise ConfigError("fsstate source: option partitionBytes must be > 0")
    return value
