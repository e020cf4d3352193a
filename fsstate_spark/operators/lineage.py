"""A flow's state follows its checkpoint: which checkpoint owns a state URI, and which planning
of a micro-batch each version is.

A flow's stores sit right under its state URI (``<state_uri>/<operator>/<partition>``), keyed
by nothing of the query. The default state URI, ``<checkpoint>/fsstate``, is inside the
checkpoint, so a copied or restored checkpoint carries its state with it; an explicit one is
shared by every checkpoint pointed at it (a copy, a restored backup, another query), which
would otherwise adopt each other's versions as their own. :class:`FlowLineage` keeps them
apart, for the flow driver (:mod:`fsstate_spark.operators.driver`):

* **Owner** (:meth:`FlowLineage.claim`, at the first micro-batch of a run, before the driver
  writes anything): ``<state_uri>/_fsstate_owner.json`` (:data:`OWNER_FILE`) records the
  checkpoint that owns the state, its resolved location and query id (:class:`Owner`,
  put-if-absent: the first run to see a state URI claims it, state written before the record
  existed included), and where the state was then. A run of another checkpoint location, or of
  another query (a new checkpoint at the owner's location), is refused with a
  :class:`fsstate.errors.ConfigError`; a record naming another state location came with a
  copied or moved state directory (a fork: checkpoint and state copied together), and the
  run claims the copy. The default state URI is recorded too, but never refuses (it follows
  its checkpoint: a copied checkpoint's record is re-pointed at the copy); so an explicit
  ``state_uri`` naming another checkpoint's ``fsstate`` directory is refused as well.
* **Planning** (:meth:`FlowLineage.planned_ms`): every version a flow commits records when
  Spark planned its batch, the ``batchTimestampMs`` of the checkpoint's ``offsets/<batch>``
  (:func:`fsstate.inspect.checkpoint.batch_timestamp_ms`; one GET per batch), in the epoch's
  :class:`fsstate.store.record.Writer`. Every attempt and re-run of one planning has the same
  (a restart re-runs a batch from its offsets entry): it adopts what an earlier attempt
  published (exactly once); a version of another planning is refused by the commit
  (:func:`fsstate.store.commit.check_adoptable`).
* **Check** (:meth:`FlowLineage.check`, before any task of the batch runs): at the first batch
  ``b`` of a run, every partition of every stage is asked for version ``b``
  (:func:`fsstate.store.record.read_metas`); one committed by another planning (a
  checkpoint restored from a backup, or rolled back, beside state that went on) raises
  :class:`fsstate.errors.LineageConflictError` before anything is written. While a checked
  batch finds its version (a re-run adopting it), the next batch is checked too; once one
  finds none, no later version can be there and checking stops.

Invariants:

* Nothing here writes but the owner record; nothing is written before the owner check passed.
* A version without a recorded planning (written before this module, or by a checkpoint fsstate
  cannot read: ``hdfs://``) is adopted as before; a checkpoint fsstate cannot read makes the
  versions record none (logged once).
* Picklable (Spark Connect pickles the driver): the checkpoint's FileIO is made where it runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fsstate.errors import ConfigError, LineageConflictError, StorageNotFoundError
from fsstate.inspect.checkpoint import batch_timestamp_ms, read_query_id
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.identity import WRITER_META
from fsstate.store.record import Writer, read_metas
from fsstate_spark.operators.settings import FlowSettings
from fsstate_spark.runtime import fileio_for

__all__ = ["OWNER_FILE", "FlowLineage", "Owner", "published_plannings"]

log = logging.getLogger(__name__)

OWNER_FILE = "_fsstate_owner.json"  # <state_uri>/_fsstate_owner.json: the owning checkpoint
OWNER_FORMAT = 1
SHOWN_PARTITIONS = 5  # partitions a message names


@dataclass(frozen=True)
class Owner:
    """The checkpoint a state URI belongs to.

    Attributes:
        checkpoint: its location (:func:`fsstate_spark.operators.settings.resolved_checkpoint`).
        query_id: its query id (None: the checkpoint could not be read).
        state: where the state was when it was claimed (another place: the state directory
            was copied or moved, record and all, and is claimed anew).
    """

    checkpoint: str
    query_id: str | None
    state: str

    def to_bytes(self) -> bytes:
        doc = {
            "format": OWNER_FORMAT,
            "checkpoint": self.checkpoint,
            "query_id": self.query_id,
            "state": self.state,
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Owner:
        """The owner an :data:`OWNER_FILE` records.

        Raises:
            ConfigError: the record is unreadable or of a newer format.
        """
        try:
            doc = json.loads(data)
            fmt, checkpoint, query, state = (
                doc["format"],
                doc["checkpoint"],
                doc.get("query_id"),
                doc["state"],
            )
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                f"the owner record {where} is unreadable: delete it (the next run claims the "
                "state for its checkpoint) if that checkpoint is the state's"
            ) from None
        if not isinstance(fmt, int) or fmt > OWNER_FORMAT:
            raise ConfigError(
                f"the owner record {where} has format {fmt!r}, written by a newer fsstate: "
                "upgrade fsstate to run this query"
            )
        return cls(str(checkpoint), None if query is None else str(query), str(state))


class FlowLineage:
    """The flow driver's owner record, planning times and version check (module docstring)."""

    def __init__(self, config: FlowSettings) -> None:
        self.config = config
        self.checking = True  # check the next batch's versions (until one finds none)
        self._ckpt: FileIO | None = None
        self._ckpt_known = False  # _ckpt resolved (None then: not readable here)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ckpt"], state["_ckpt_known"] = None, False
        return state

    # -- the checkpoint ------------------------------------------------------------------------
    def checkpoint(self) -> FileIO | None:
        """The checkpoint directory (None: no location given, or one fsstate cannot read)."""
        if not self._ckpt_known:
            self._ckpt_known = True
            where = self.config.checkpoint_location
            if not where:
                return None
            root = self.config.root
            if not where.startswith("/") and "://" not in where:  # dbfs:/x
                self._unreadable(ConfigError(f"{where}: not a location fsstate reads"))
                return None
            try:
                scheme = Location.parse(where).scheme
                options = dict(root.options) if scheme == root.scheme else {}
                self._ckpt = fileio_for(Location.parse(where, options), False)
            except ConfigError as exc:
                self._unreadable(exc)
        return self._ckpt

    def _unreadable(self, exc: Exception) -> None:
        log.warning(
            "fsstate: the checkpoint %s is not readable by fsstate (%s): the flow's versions "
            "record no planning time, and a restored checkpoint is not detected",
            self.config.checkpoint_location,
            exc,
        )
        self._ckpt = None

    def planned_ms(self, batch: int) -> int | None:
        """When Spark planned micro-batch ``batch`` (None: the checkpoint is not readable)."""
        ckpt = self.checkpoint()
        if ckpt is None:
            return None
        try:
            return batch_timestamp_ms(ckpt, batch)
        except (ConfigError, StorageNotFoundError) as exc:
            self._unreadable(exc)
            return None

    def writer(self, base: Writer, batch: int) -> Writer:
        """``base`` with when ``batch`` was planned."""
        return Writer(base.run, base.instance, self.planned_ms(batch))

    # -- the owner -------------------------------------------------------------------------
    def claim(self, state: FileIO) -> None:
        """Record this checkpoint as the state's owner, or check it is (module docstring).

        Raises:
            ConfigError: the state belongs to another checkpoint or query; nothing was written.
        """
        if not self.config.checkpoint_location:
            return
        query = None
        ckpt = self.checkpoint()
        if ckpt is not None:
            try:
                query = read_query_id(ckpt)
            except (ConfigError, StorageNotFoundError) as exc:
                self._unreadable(exc)
        root = self.config.root
        here = root.path if root.is_local else f"{root.scheme}://{root.bucket}/{root.path}"
        mine = Owner(self.config.checkpoint_location, query, here)
        where = state.describe(OWNER_FILE)
        if state.publish_if_absent(OWNER_FILE, mine.to_bytes()):
            log.info("fsstate: state %s claimed for checkpoint %s", where, mine.checkpoint)
            return
        have = Owner.from_bytes(state.read_bytes(OWNER_FILE), where)
        if have == mine:
            return
        # the state follows its checkpoint (<checkpoint>/fsstate), or was copied or moved with
        # its record: this checkpoint claims it
        if self.config.state_in_checkpoint or have.state != mine.state:
            log.info("fsstate: state %s (owned by %s) claimed for %s", where, have, mine)
            state.publish_bytes(OWNER_FILE, mine.to_bytes())
            return
        uri = self.config.state_uri
        if have.checkpoint != mine.checkpoint:
            raise ConfigError(
                f"ops.write_stream(state_uri={uri!r}): that state belongs to the query whose "
                f"checkpoint is {have.checkpoint} ({where}), not to this one at "
                f"{mine.checkpoint}; nothing was written. Give each query its own state_uri, or "
                "leave state_uri out for <checkpoint>/fsstate; to fork a query with an explicit "
                "state_uri, copy its state directory too and point state_uri at the copy (a "
                f"checkpoint moved from {have.checkpoint}: delete {where})"
            )
        if None not in (have.query_id, mine.query_id) and have.query_id != mine.query_id:
            raise ConfigError(
                f"ops.write_stream(state_uri={uri!r}): that state belongs to query "
                f"{have.query_id} ({where}), and the checkpoint at {mine.checkpoint} is now "
                f"query {mine.query_id} (a new checkpoint); nothing was written. Restore the "
                "checkpoint that goes with the state, or give the new query its own state_uri "
                "(or delete the state directory to start over)"
            )
        if have.query_id is None and mine.query_id is not None:  # recorded without one
            state.publish_bytes(OWNER_FILE, mine.to_bytes())

    # -- the versions of a batch -----------------------------------------------------------
    def check(
        self, state: FileIO, stages: Sequence[tuple[str, str]], batch: int, planned: int | None
    ) -> None:
        """Before batch ``batch`` runs: refuse it if a stage holds its version from another
        planning (``stages``: (operator, layout directory) of each stage).

        Raises:
            LineageConflictError: version ``batch`` was committed by another planning.
        """
        if not self.checking:
            return
        if planned is None:  # no planning time: nothing to tell lineages apart by
            self.checking = False
            return
        found = False
        for name, layout in stages:
            plannings = published_plannings(state, name, self.config.partitions, layout, batch)
            found = found or bool(plannings)
            other = sorted((p, ms) for p, ms in plannings.items() if ms not in (None, planned))
            if other:
                parts = [p for p, _ in other]
                raise LineageConflictError(
                    f"micro-batch {batch}: the state under {self.config.state_uri!r} already "
                    f"holds version {batch} of operator {name!r} (partitions "
                    f"{parts[:SHOWN_PARTITIONS]}{' ...' if len(parts) > SHOWN_PARTITIONS else ''}"
                    f") from another planning of the batch (at {other[0][1]} ms; this checkpoint "
                    f"planned it at {planned} ms): the checkpoint is older than its state "
                    "(restored from a backup, or rolled back?); nothing was written. Restore the "
                    "state directory that goes with the checkpoint (back them up together), or "
                    "start over with a new checkpoint and state directory",
                    batch,
                )
        self.checking = found


def published_plannings(
    fileio: FileIO, operator: str, partitions: int, layout: str, version: int
) -> dict[int, int | None]:
    """partition -> when the batch of ``version`` was planned (None: not recorded), for every
    partition of ``operator`` that holds ``version`` (:func:`fsstate.store.record.read_metas`:
    one GET each)."""
    metas = read_metas(fileio, operator, range(partitions), version, layout)
    out: dict[int, int | None] = {}
    for p, meta in metas.items():
        if meta is not None:
            writer = Writer.from_meta(meta.get(WRITER_META))
            out[p] = None if writer is None else writer.planned_ms
    return out
