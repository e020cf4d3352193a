"""A seeded random model of lineages (issue 66), against a reference per lineage, local and on
the S3 server.

Query runs write lineages of an operator's state as ``tiered()`` tasks do (each run its own
lineage, forked at its first batch; every partition commits every batch through an epoch that
records the run and the batch's planning): runs commit, spill during a batch, leave background
merges unpublished, crash (some partitions committed, or none), restart from their head, are
copied or rolled back to an older retained version, start at batch 0; the state is rescaled out
and back (a new layout generation continuing the lineage); collections run with no grace and
with the default, with leases held or let go, and with injected read errors (nothing may be
deleted then). The reference keeps each lineage's states by version and what must be readable:
every version in a live lineage's own retained window, and every version of the history a
live lineage's window reaches that still exists. After every step each of those versions is
read and compared; at the end, every one again in a fresh interpreter.

``FSSTATE_LINEAGE_STEPS`` sets the steps (``make test``: 40 per storage; ``make
test-lineage-model``: 400), ``FSSTATE_TEST_SEED`` the seed; the seed is printed on failure.
"""

from __future__ import annotations

import os
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fsstate import PartitionStore
from fsstate.config import StoreConfig
from fsstate.errors import GarbageCollectionError, StorageError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from fsstate.store.epoch import EpochRun
from fsstate.store.gc import collect
from fsstate.store.identity import store_dir_for
from fsstate.store.layout import Layout, publish_layout, read_layouts
from fsstate.store.lineage import fork_version, lineage_for
from fsstate.store.pool import StorePool
from fsstate.store.record import EpochRecord, Writer
from fsstate.store.rescale import rescale
from tests.support.engine import KEY, VAL, run_probe, settle_leases
from tests.support.plugin import s3_options

OP, STATE, RETAIN = "op", "v", 4
STEPS = int(os.environ.get("FSSTATE_LINEAGE_STEPS") or 40)
State = dict[str, int]


def _part(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def _branch(line: _Line) -> str:
    """The lineage's name on storage (a rescale's generation writes its trunk)."""
    return "" if line.name.endswith(":") else line.name


@dataclass
class _Line:
    """One lineage in the reference: where it lives, its source, its states by version."""

    name: str
    layout: str
    partitions: int
    source: tuple[str, int] | None  # (lineage, version) it forked, or read by a rescale
    states: dict[int, State] = field(default_factory=dict)
    planned: dict[int, int] = field(default_factory=dict)
    reach: int = -1  # the newest version some partition committed (a crash cut its batch)

    @property
    def head(self) -> int:
        return max(self.states)


@dataclass
class _Run:
    """A query run: the lineage it writes and its stores (one per partition)."""

    id: str
    line: str
    stores: list[PartitionStore]


class Model:
    """The state, its writers and the reference (see the module docstring)."""

    def __init__(self, fileio: FileIO, rng: random.Random) -> None:
        self.fileio, self.rng = fileio, rng
        self.cfg = StoreConfig(retain_versions=RETAIN, orphan_scan_every_commits=1 << 30)
        self.lines: dict[str, _Line] = {}
        self.exists: set[tuple[str, int]] = set()  # (lineage, version) on storage
        self.runs: dict[str, _Run] = {}
        self.clock = 1_000
        self.pool = StorePool(max_idle=1 << 20)  # epochs release their stores here, open
        self.replan: dict[str, int] = {}  # lineage -> planning of a batch a crash cut short
        publish_layout(fileio, OP, Layout(0, 2))

    # -- writers ---------------------------------------------------------------------------
    def start(self, source: tuple[str, int] | None) -> _Run:
        """A new run: its lineage forked from ``source`` (None: batch 0)."""
        self.clock += 1
        run_id = f"run{self.clock}"
        version = -1 if source is None else source[1]
        name = lineage_for(version, self.clock, run_id)
        src = self.lines[source[0]] if source else None
        layout, parts = (src.layout, src.partitions) if src else ("", 2)
        stores = []
        for p in range(parts):
            if src is None:
                s = PartitionStore(self.fileio, OP, p, None, self.cfg)
                s.fork_to(name)
            else:
                where = store_dir_for(OP, p, layout)
                fork_version(self.fileio, where, version, source=_branch(src), branch=name)
                s = PartitionStore.open(self.fileio, OP, p, version, self.cfg, layout, branch=name)
            stores.append(s)
        line = _Line(name, layout, parts, source)
        if src is not None:
            line.states[version] = dict(src.states[version])
            self.exists.add((name, version))
        self.lines[name] = line
        run = self.runs[run_id] = _Run(run_id, name, stores)
        return run

    def commit(self, run: _Run, partial: bool = False) -> None:
        """The run's next batch: random writes in every partition, committed in each (in only
        some with ``partial``: a crash mid-batch, after which the run is gone)."""
        line = self.lines[run.line]
        v = (line.head if line.states else -1) + 1
        self.clock += 1
        planned = self.replan.pop(line.source[0], self.clock) if line.source else self.clock
        base = dict(line.states.get(v - 1, {}))
        writes = {f"k{self.rng.randrange(16)}": self.rng.randrange(1000) for _ in range(4)}
        base.update(writes)
        upto = self.rng.randrange(1, line.partitions) if partial and line.partitions > 1 else None
        for p, store in enumerate(run.stores):
            t = store.value_table(STATE, VAL, KEY)
            for k, n in writes.items():
                if _part(k, line.partitions) == p:
                    t.update((k,), (n, run.id))
            if self.rng.random() < 0.2:
                store.spill()
            if upto is not None and p >= upto:
                continue
            writer = Writer(run.id, "i", planned)
            EpochRun.of_store(store, v, writer=writer, pool=self.pool).commit(EpochRecord())
        if upto is not None:
            self.replan[line.name] = planned  # its restart runs that planning again
            self.exists.discard((line.name, v - RETAIN))  # dropped where the batch committed
            line.reach = v  # there the window starts one later
            self.crash(run)
            return
        line.states[v] = base
        line.planned[v] = planned
        self.exists.add((line.name, v))
        self.exists.discard((line.name, v - RETAIN))  # its own retention's drop
        if self.rng.random() < 0.3:
            for store in run.stores:
                store.compact(force=True)  # a merge waiting for the next commit

    def crash(self, run: _Run) -> None:
        for s in run.stores:
            s.close()
        del self.runs[run.id]

    def rescale_run(self, run: _Run) -> _Run:
        """Stop ``run``, rescale its lineage's head to the other partition count (a new
        generation whose trunk continues it), and start a run on the new generation."""
        line = self.lines[run.line]
        self.crash(run)
        parts = 1 if line.partitions == 2 else 2
        done = rescale(
            self.fileio,
            OP,
            partitions=parts,
            keys=["user"],
            partition_of=lambda t: [_part(k, parts) for k in t.column("user").to_pylist()],
            version=line.head,
            as_version=line.head + 1,
            lineages=[line.name] * line.partitions,
            source=line.layout,
        )
        name = f"{done.layout.dir}:"  # the new generation's trunk, in the reference
        trunk = _Line(name, done.layout.dir, parts, (line.name, line.head))
        trunk.states[line.head + 1] = dict(line.states[line.head])
        self.lines[name] = trunk
        self.exists.add((name, line.head + 1))
        return self.start((name, line.head + 1))

    # -- the reference of what must be readable ----------------------------------------------
    def live(self) -> list[_Line]:
        out = []
        for line in self.lines.values():
            if not line.states:
                continue
            if any(c.source == (line.name, line.head) for c in self.lines.values()):
                continue  # a restart (or a rescale) went on from its head
            out.append(line)
        return out

    def history(self, line: _Line) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        cur, v, n = line, line.head, RETAIN - max(0, line.reach - line.head)
        while n > 0 and cur is not None and v >= 0:
            floor = min(cur.states)
            if v >= floor:
                out.add((cur.name, v))
                v, n = v - 1, n - 1
                continue
            if cur.source is None:
                break
            v, cur = min(v, cur.source[1]), self.lines[cur.source[0]]
        return out

    def required(self) -> set[tuple[str, int]]:
        keep: set[tuple[str, int]] = set()
        for line in self.live():
            keep |= self.history(line)
        own = {
            (ln.name, v)
            for ln in self.live()
            for v in ln.states
            if v > max(ln.head, ln.reach) - RETAIN
        }
        return (keep | own) & self.exists

    def after_gc(self) -> None:
        keep = set()
        for line in self.live():
            keep |= self.history(line)
            keep |= {(line.name, v) for v in line.states if v > max(line.head, line.reach) - RETAIN}
        self.exists &= keep

    # -- reads -------------------------------------------------------------------------------
    def reads(self) -> list[tuple[str, int, int, str, str]]:
        """(expected key, partitions, version, branch, layout) of every required version."""
        out = []
        for name, v in sorted(self.required()):
            line = self.lines[name]
            out.append((name, line.partitions, v, _branch(line), line.layout))
        return out

    def check(self) -> None:
        for name, parts, v, branch, layout in self.reads():
            got: State = {}
            for p in range(parts):
                s = PartitionStore.open(self.fileio, OP, p, v, self.cfg, layout, branch=branch)
                t = s.value_table(STATE, VAL, KEY)
                got.update({k[0]: t.get(k)[0] for k in t.keys()})  # type: ignore[index]
                s.close()
            assert got == self.lines[name].states[v], (name, v, layout)


def _gc(model: Model, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = model.rng
    if rng.random() < 0.5:
        settle_leases()  # writers' pending files stay leased, the rest is let go
    grace = rng.choice([0, 0, 600_000])
    if rng.random() < 0.3:  # an injected read error: nothing may be deleted
        real = FileIO.read_bytes
        before = {e.path for e in model.fileio.list("", recursive=True)}
        nth = [rng.randrange(1, 6)]

        def flaky(self: FileIO, path: str) -> bytes:
            if (path.endswith(".json") and "/manifests/" in path) or "/branches/" in path:
                nth[0] -= 1
                if nth[0] == 0:
                    raise StorageError(f"503 reading {path}")
            return real(self, path)

        monkeypatch.setattr(FileIO, "read_bytes", flaky)
        try:
            collect(model.fileio, OP, retain=RETAIN, grace_ms=grace, abandoned_ms=0)
        except GarbageCollectionError:
            monkeypatch.undo()
            assert {e.path for e in model.fileio.list("", recursive=True)} == before
            return
        finally:
            monkeypatch.undo()
    else:
        collect(model.fileio, OP, retain=RETAIN, grace_ms=grace, abandoned_ms=0)
    model.after_gc()


def _step(model: Model, monkeypatch: pytest.MonkeyPatch) -> str:
    rng = model.rng
    runs = list(model.runs.values())
    roll = rng.random()
    if not runs or roll < 0.08:
        if not model.lines or rng.random() < 0.3:
            model.commit(model.start(None))
            return "batch 0"
        name, v = rng.choice(sorted(model.required()))
        for other in [r for r in runs if r.line == name and model.lines[name].head == v]:
            model.crash(other)  # a copy of a stopped query (fsstate-spark fork stops none)
        model.commit(model.start((name, v)))
        return f"fork of {name}@{v}"
    run = rng.choice(runs)
    if roll < 0.15:
        model.crash(run)
        model.commit(model.start((run.line, model.lines[run.line].head)))
        return "restart"
    if roll < 0.2:
        model.commit(run, partial=True)
        return "crash mid-batch"
    if roll < 0.24 and len(model.lines) < 60:
        model.commit(model.rescale_run(run))
        return "rescale"
    if roll < 0.34:
        _gc(model, monkeypatch)
        return "gc"
    model.commit(run)
    return "commit"


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "local":
        return Location.parse(str(tmp_path / "state"))
    info = request.getfixturevalue("s3_server")
    return Location.parse(request.getfixturevalue("s3_uri"), s3_options(info))


def test_random_lineages_lose_nothing(root: Location, monkeypatch: pytest.MonkeyPatch) -> None:
    seed = int(os.environ.get("FSSTATE_TEST_SEED") or random.randrange(1 << 30))
    model = Model(FileIO(root), random.Random(seed))
    done: list[str] = []
    try:
        for _ in range(STEPS):
            done.append(_step(model, monkeypatch))
            model.check()
        _gc(model, monkeypatch)
        model.check()
        _fresh_check(root, model)
    except BaseException as exc:
        raise AssertionError(
            f"seed {seed} (FSSTATE_TEST_SEED={seed}), after {done[-5:]}: {exc}"
        ) from exc
    finally:
        for run in list(model.runs.values()):
            model.crash(run)
    assert len(read_layouts(model.fileio, OP)) >= 1


_READER = """
import json
from fsstate import PartitionStore
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from tests.support.engine import KEY, VAL
args = json.loads({args!r})
fileio = FileIO(Location.parse(args["uri"], args["options"]))
out = []
for name, parts, v, branch, layout in args["reads"]:
    got = {{}}
    for p in range(parts):
        s = PartitionStore.open(fileio, "op", p, v, layout=layout, branch=branch)
        t = s.value_table("v", VAL, KEY)
        got.update({{k[0]: t.get(k)[0] for k in t.keys()}})
        s.close()
    out.append(got)
print("PROBE " + json.dumps(out))
"""


def _fresh_check(root: Location, model: Model) -> None:
    """Every required version read again in a new interpreter (no block cache)."""
    import json

    reads = model.reads()
    args = {"uri": root.uri(), "options": dict(root.options), "reads": reads}
    got, _ = run_probe(_READER.format(args=json.dumps(args)), timeout_s=600)
    want = [model.lines[name].states[v] for name, _, v, _, _ in reads]
    assert got == want
