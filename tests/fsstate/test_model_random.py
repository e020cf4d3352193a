"""Seeded model-based random tests: the engine against a plain-dict reference model.

Each seed runs a few thousand random operations on six state tables (value, list and map state,
each with and without TTL; int and composite grouping keys; declared and inferred key schemas)
and compares the engine with :class:`tests.support.model.ModelStore` after every operation that
observes state. Besides reads and writes the mix holds batched Arrow operations, range deletes,
processing-time moves (mostly forward), TTL cleanup passes, commits (a commit of the next
version is the commit of an epoch, :class:`fsstate.store.epoch.EpochRun`), reopening at the
latest or at an older retained version (uncommitted changes are lost; later commits overwrite
later versions), re-commits, sealing, view eviction, spilling, and bad input that must change
nothing.

Every ``FULL_EVERY`` steps (and at the end) every key of every table is compared, plus the TTL
index: its entries must be exactly the model's (one per row with an expiry for value and map
state, the minimum per grouping key for list state), so it never holds more entries than the
primary data, and a cleanup pass looks up exactly the entries expired before it.

Two memory profiles alternate by seed: a tiny budget (the controller spills on almost every
check, a tiny block cache makes larger files read by row group, compaction after each commit,
orphans collected without grace time) and background compaction (a thread merges runs while the
test reads).

``test_window_keys_match_model`` runs the same mix over (timestamp window start, id) keys and
``test_grouping_key_types_survive_spill_and_reopen`` checks every key type once (both found
the stable-hash bug of timestamp and decimal keys in run Bloom filters).

Reproduce a failure with ``FSSTATE_SEED=<seed> pytest tests/fsstate/test_model_random.py``;
``FSSTATE_OPS`` changes the number of operations per seed. Failure messages name the seed, the
step and the last operations.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from devkit.s3_server import S3Info
from fsstate import PartitionStore, StoreConfig, read_changes, read_table
from fsstate.compaction import Compactor, compact_table
from fsstate.config import EngineConfig
from fsstate.controller import MemoryController
from fsstate.errors import FsStateError, VersionNotFoundError
from fsstate.format.schema import NAN
from fsstate.storage.location import Location
from fsstate.storage.manifest import LINEAGE_STEPS_MAX
from fsstate.store.epoch import EpochRun
from fsstate.store.pool import StorePool
from fsstate.tables import ListTable, MapTable, TableBase, ValueTable
from fsstate.tables.cursor import Getter, Updater
from tests.support.model import LIST, MAP, VALUE, ModelStore, engine_rows_with_ttl, is_live
from tests.support.plugin import s3_options

OPERATOR = "model-op"
PARTITION = 3
START_MS = 1_000_000
FULL_EVERY = 150
TRACE_LEN = 40
HOT_KEYS = 4

VALUE_SCHEMA = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])
INT_KEY_SCHEMA = pa.schema([pa.field("id", pa.int32(), nullable=False)])
COMP_KEY_SCHEMA = pa.schema([pa.field("w", pa.string()), pa.field("i", pa.int64())])
STR_UKEY_SCHEMA = pa.schema([pa.field("u", pa.string())])
INT_UKEY_SCHEMA = pa.schema([pa.field("u", pa.int64())])

INT_KEYS: list[tuple[Any, ...]] = [(i,) for i in range(20)]
COMP_KEYS: list[tuple[Any, ...]] = [(w, i) for w in "abcd" for i in range(5)]
# time-window keys (window start, id): the grouping keys range deletes are meant for
WINDOW_KEY_SCHEMA = pa.schema(
    [pa.field("start", pa.timestamp("us", tz="UTC")), pa.field("i", pa.int64())]
)
WINDOW_T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
WINDOW_STEP = dt.timedelta(seconds=10)
WINDOW_KEYS: list[tuple[Any, ...]] = [
    (WINDOW_T0 + w * WINDOW_STEP, i) for w in range(4) for i in range(5)
]
STR_UKEYS: list[tuple[Any, ...]] = [(f"u{i}",) for i in range(5)]
INT_UKEYS: list[tuple[Any, ...]] = [(i,) for i in range(5)]
# float keys holding NaN and null (NaN is the engine's one NaN object, as every key it reads
# back holds, so the model's dicts and the engine's keys compare equal)
FLOAT_KEY_SCHEMA = pa.schema([pa.field("x", pa.float64()), pa.field("i", pa.int64())])
FLOAT_KEYS: list[tuple[Any, ...]] = [(x, i) for x in (-1.5, 0.0, 2.5, NAN, None) for i in range(4)]
FLOAT_UKEY_SCHEMA = pa.schema([pa.field("u", pa.float64())])
FLOAT_UKEYS: list[tuple[Any, ...]] = [(0.5,), (NAN,), (None,), (-1.0,)]
STRINGS = ["x", "y", "zz", "", None, "long-" * 5]
TTL_CHOICES = [None, 40, 80, 150, 300]


@dataclass(frozen=True)
class TableDef:
    """How one state table of the test is declared and which keys it uses."""

    name: str
    kind: str
    key_kind: str  # "int", "comp" (str, int), "window" (timestamp, int), "float" (float, int)
    ttl_ms: int | None
    declare_key_schema: bool
    ukey_schema: pa.Schema | None = None

    @property
    def keys(self) -> list[tuple[Any, ...]]:
        """The grouping-key universe."""
        return {"int": INT_KEYS, "comp": COMP_KEYS, "window": WINDOW_KEYS, "float": FLOAT_KEYS}[
            self.key_kind
        ]

    @property
    def ukeys(self) -> list[tuple[Any, ...]]:
        """The user-key universe (map state)."""
        assert self.ukey_schema is not None
        if self.ukey_schema.equals(FLOAT_UKEY_SCHEMA):
            return FLOAT_UKEYS
        return INT_UKEYS if self.ukey_schema.equals(INT_UKEY_SCHEMA) else STR_UKEYS

    @property
    def key_schema(self) -> pa.Schema:
        """The schema of the grouping keys."""
        return {
            "int": INT_KEY_SCHEMA,
            "comp": COMP_KEY_SCHEMA,
            "window": WINDOW_KEY_SCHEMA,
            "float": FLOAT_KEY_SCHEMA,
        }[self.key_kind]


TABLES = [
    TableDef("val", VALUE, "int", ttl_ms=None, declare_key_schema=True),
    TableDef("val_ttl", VALUE, "comp", ttl_ms=100, declare_key_schema=False),
    TableDef("lst", LIST, "comp", ttl_ms=None, declare_key_schema=True),
    TableDef("lst_ttl", LIST, "int", ttl_ms=80, declare_key_schema=False),
    TableDef("map", MAP, "int", None, True, INT_UKEY_SCHEMA),
    TableDef("map_ttl", MAP, "comp", 120, False, STR_UKEY_SCHEMA),
]
# the same mix over time-window keys (declared and inferred timestamp key schemas)
WINDOW_TABLES = [
    TableDef("win_val", VALUE, "window", ttl_ms=None, declare_key_schema=True),
    TableDef("win_val_ttl", VALUE, "window", ttl_ms=100, declare_key_schema=False),
    TableDef("win_lst", LIST, "window", ttl_ms=80, declare_key_schema=True),
    TableDef("win_map", MAP, "window", None, False, STR_UKEY_SCHEMA),
    TableDef("win_map_ttl", MAP, "window", 120, True, INT_UKEY_SCHEMA),
]
# the same mix over float keys holding NaN and null (declared: a null cannot be inferred)
FLOAT_TABLES = [
    TableDef("f_val", VALUE, "float", ttl_ms=None, declare_key_schema=True),
    TableDef("f_val_ttl", VALUE, "float", ttl_ms=100, declare_key_schema=True),
    TableDef("f_lst_ttl", LIST, "float", ttl_ms=80, declare_key_schema=True),
    TableDef("f_map", MAP, "float", None, True, FLOAT_UKEY_SCHEMA),
    TableDef("f_map_ttl", MAP, "float", 120, True, FLOAT_UKEY_SCHEMA),
]


def _seeds() -> list[int]:
    env = os.environ.get("FSSTATE_SEED")
    if env:
        return [int(env)]
    return [11, 202, 3003, 40004, 500005, 6000006]


def _ops_per_seed() -> int:
    return int(os.environ.get("FSSTATE_OPS", "1500"))


def _key_table(d: TableDef, keys: list[tuple[Any, ...]]) -> pa.Table:
    cols = list(zip(*keys, strict=True)) if keys else [() for _ in d.key_schema]
    return pa.table(
        {f.name: pa.array(list(c), type=f.type) for f, c in zip(d.key_schema, cols, strict=True)}
    ).cast(pa.schema([f.with_nullable(True) for f in d.key_schema]))


def _ukey_table(d: TableDef, ukeys: list[tuple[Any, ...]]) -> pa.Table:
    assert d.ukey_schema is not None
    return pa.table({"u": pa.array([u[0] for u in ukeys], type=d.ukey_schema.field(0).type)})


def _value_table(values: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table(
        {
            "n": pa.array([v[0] for v in values], type=pa.int64()),
            "s": pa.array([v[1] for v in values], type=pa.string()),
        }
    )


def _pylist(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The column's Python values, every NaN the object ``NAN`` (the model's keys hold it)."""
    return [NAN if v != v else v for v in column.to_pylist()]


def _units(table: pa.Table, d: TableDef) -> dict[Any, Any]:
    """Unit -> value of a snapshot (list state: key -> sorted elements, as a multiset)."""
    width = len(d.key_schema) + (1 if d.kind == MAP else 0)
    out: dict[Any, Any] = {}
    for t in zip(*(_pylist(c) for c in table.columns)):
        if d.kind == LIST:
            out.setdefault(t[:width], []).append(t[width:])
        else:
            out[t[:width]] = t[width:]
    return {k: sorted(v, key=repr) if d.kind == LIST else v for k, v in out.items()}


def _replay(before: pa.Table, feed: pa.Table, d: TableDef) -> dict[Any, Any]:
    """``before`` with the change feed's updates put and deletes removed."""
    out = _units(before, d)
    width = len(d.key_schema) + (1 if d.kind == MAP else 0)
    for t in zip(*(_pylist(c) for c in feed.drop_columns(["batch_id"]).columns)):
        kind, unit, value = t[0], t[1 : 1 + width], t[1 + width :]
        if d.kind == LIST:
            elems = out.setdefault(unit, [])
            if kind == "update":
                elems.append(value)
            else:
                elems.remove(value)
            out[unit] = sorted(elems, key=repr)
            if not elems:
                del out[unit]
        elif kind == "update":
            out[unit] = value
        else:
            del out[unit]
    return out


def _found_values(result: pa.Table) -> list[tuple[Any, ...] | None]:
    """Decode a get_many result (value columns plus ``_found``) into values or None."""
    assert result.column_names == [*VALUE_SCHEMA.names, "_found"], result.column_names
    out: list[tuple[Any, ...] | None] = []
    for row in result.to_pylist():
        found = row.pop("_found")
        out.append(tuple(row.values()) if found else None)
    return out


class KeyCursorCell:
    """The current-key cell of key-cursor accessors (what Spark's adapter binds per key)."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None


class Runner:
    """Drives one seeded run: the engine store, the model and the random operation mix."""

    def __init__(self, seed: int, root: Path | Location, defs: list[TableDef]) -> None:
        self.seed = seed
        self.defs = defs
        self.by_kind = {kind: [d for d in defs if d.kind == kind] for kind in (VALUE, LIST, MAP)}
        self.rng = random.Random(seed)
        self.inspect_rng = random.Random(seed ^ 0x5EED)  # the op mix stays that of the seed
        self.root: str | Location = root if isinstance(root, Location) else str(root)
        self.step = 0
        self.trace: deque[str] = deque(maxlen=TRACE_LEN)
        retain = self.rng.randint(2, 6)
        self.profile = "tiny-budget" if seed % 2 == 0 else "background-compaction"
        if self.profile == "tiny-budget":
            # memory pressure: the controller spills on almost every check; compaction only
            # when asked; orphans are collected every other commit without grace time
            self.controller = MemoryController(
                EngineConfig(
                    memory_limit_bytes=1024 * 1024,
                    high_watermark=0.05,
                    low_watermark=0.03,
                    check_every_growth=32,
                    block_cache_fraction=0.03,  # larger files are read by row group
                    compaction_max_runs=3,
                    background_compaction=False,
                )
            )
            self.config = StoreConfig(
                retain_versions=retain, orphan_grace_ms=0, orphan_scan_every_commits=2
            )
        else:
            # a background thread compacts tables with more than two runs after each commit
            # (orphans keep their grace time: a merged run is unreferenced until swapped in)
            self.controller = MemoryController(
                EngineConfig(compaction_max_runs=2, background_compaction=True)
            )
            self.config = StoreConfig(retain_versions=retain)
        self.model = ModelStore(retain, START_MS)
        self.ttl: dict[str, int | None] = {d.name: d.ttl_ms for d in self.defs}
        self.opened: list[PartitionStore] = []
        self.pool = StorePool()  # where committed epochs release the store (this run keeps it)
        self.workers: list[PartitionStore | None] = [None, None, None]  # op_switch_worker
        self.worker = 0
        self.prev_worker = 1
        # lineage, as storage holds it: version -> (commit id, parent version, parent commit id),
        # and the (version, commit id) each store object was last opened, committed or caught
        # up at (by id(); ``opened`` keeps the objects alive)
        self.commit_ids = 0
        self.manifests: dict[int, tuple[int, int | None, int | None]] = {}
        self.heads: dict[int, tuple[int, int] | None] = {}
        self.store = self._open(None)
        self.heads[id(self.store)] = None
        self.tables: dict[str, TableBase] = {}
        self._declare_all()
        self.stats: dict[str, int] = {}
        self.cursors: dict[str, tuple[ValueTable, KeyCursorCell, Getter, Updater]] = {}
        self.map_cursors: dict[str, tuple[Any, ...]] = {}
        self.list_cursors: dict[str, tuple[Any, ...]] = {}

    # -- plumbing ------------------------------------------------------------------------------
    def ctx(self, what: str) -> str:
        """Failure context: seed, step, what was compared and the last operations."""
        ops = "\n  ".join(self.trace)
        return (
            f"seed={self.seed} step={self.step} now={self.model.now}: {what}\n"
            f"reproduce: FSSTATE_SEED={self.seed} pytest {__file__}\n"
            f"last operations (oldest first):\n  {ops}"
        )

    def check(self, got: Any, expected: Any, what: str) -> None:
        """Assert engine == model."""
        assert got == expected, self.ctx(f"{what}: engine={got!r} model={expected!r}")

    def log(self, text: str) -> None:
        """Record an operation in the trace."""
        self.trace.append(f"[{self.step}] {text}")

    def _open(self, version: int | None) -> PartitionStore:
        """Open the store at ``version``, bound to this run's private memory controller."""
        store = PartitionStore.open(self.root, OPERATOR, PARTITION, version, self.config)
        self.opened.append(store)
        store.controller.unregister(store)
        store.controller = self.controller
        store.ctx.cache = self.controller.cache
        self.controller.register(store)
        store.set_time(self.model.now)
        return store

    def close_all(self) -> None:
        """Close every store this run opened (abandoned ones included), ending its work."""
        for store in self.opened:
            if not store.closed:
                store.close()

    def _declare(self, d: TableDef) -> None:
        """Declare one table in the engine and the model."""
        ks = d.key_schema if d.declare_key_schema else None
        ttl = self.ttl[d.name]
        t: TableBase
        if d.kind == VALUE:
            t = self.store.value_table(d.name, VALUE_SCHEMA, ks, ttl_ms=ttl)
        elif d.kind == LIST:
            t = self.store.list_table(d.name, VALUE_SCHEMA, ks, ttl_ms=ttl)
        else:
            assert d.ukey_schema is not None
            t = self.store.map_table(d.name, d.ukey_schema, VALUE_SCHEMA, ks, ttl_ms=ttl)
        self.tables[d.name] = t
        self.model.declare(d.name, d.kind, ttl)

    def _declare_all(self) -> None:
        """Declare every table, in random order."""
        self.tables = {}
        for d in self.rng.sample(self.defs, len(self.defs)):
            self._declare(d)

    def vt(self, d: TableDef) -> ValueTable:
        """The engine's value table of ``d``."""
        t = self.tables[d.name]
        assert isinstance(t, ValueTable)
        return t

    def lt(self, d: TableDef) -> ListTable:
        """The engine's list table of ``d``."""
        t = self.tables[d.name]
        assert isinstance(t, ListTable)
        return t

    def mt(self, d: TableDef) -> MapTable:
        """The engine's map table of ``d``."""
        t = self.tables[d.name]
        assert isinstance(t, MapTable)
        return t

    def value(self) -> tuple[Any, ...]:
        """A random value tuple (sometimes with nulls)."""
        r = self.rng.random()
        if r < 0.03:
            return (None, None)
        n = None if r < 0.06 else self.rng.randrange(-50, 1000)
        return (n, self.rng.choice(STRINGS))

    def values(self, lo: int = 0, hi: int = 4) -> list[tuple[Any, ...]]:
        """A few random values."""
        return [self.value() for _ in range(self.rng.randint(lo, hi))]

    def key(self, d: TableDef) -> tuple[Any, ...]:
        """A random grouping key of ``d`` (half of the time one of a few hot keys)."""
        keys = d.keys
        return self.rng.choice(keys[:HOT_KEYS] if self.rng.random() < 0.5 else keys)

    def ukey(self, d: TableDef) -> tuple[Any, ...]:
        """A random user key of ``d``."""
        return self.rng.choice(d.ukeys)

    # -- comparisons -----------------------------------------------------------------------------
    def compare_key(self, d: TableDef, k: tuple[Any, ...]) -> None:
        """Compare everything the engine returns for one grouping key."""
        m = self.model
        if d.kind == VALUE:
            self.check(self.vt(d).get(k), m.value_get(d.name, k), f"{d.name}.get({k})")
        elif d.kind == LIST:
            self.check(self.lt(d).get(k), m.list_get(d.name, k), f"{d.name}.get({k})")
        else:
            t = self.mt(d)
            items = m.map_items(d.name, k)
            self.check(list(t.items(k)), items, f"{d.name}.items({k})")
            self.check(list(t.user_keys(k)), [u for u, _ in items], f"{d.name}.user_keys({k})")
            self.check(list(t.values(k)), [v for _, v in items], f"{d.name}.values({k})")
            for u in d.ukeys:
                exp = m.map_get(d.name, k, u)
                self.check(t.get(k, u), exp, f"{d.name}.get({k}, {u})")
                self.check(t.contains(k, u), exp is not None, f"{d.name}.contains({k}, {u})")
        self.check(self.tables[d.name].exists(k), m.exists(d.name, k), f"{d.name}.exists({k})")

    def compare_keys(self, d: TableDef) -> None:
        """Compare the live grouping keys of a table."""
        got = list(self.tables[d.name].keys())
        self.check(len(got), len(set(got)), f"{d.name}.keys() has no duplicates")
        self.check(set(got), self.model.keys(d.name), f"{d.name}.keys()")

    def check_ttl_index(self, d: TableDef, exact: bool, load: bool) -> None:
        """TTL index invariants (only if the index is in memory, unless ``load``)."""
        t = self.tables[d.name]
        if not (load or t.ttl_loaded):
            return
        idx = t.ttl_index()
        with_ttl = self.model.rows_with_ttl(d.name)
        assert len(idx) <= with_ttl, self.ctx(
            f"{d.name}: TTL index holds {len(idx)} entries, more than the {with_ttl} primary "
            f"rows with an expiry; entries={idx.entries()}"
        )
        if exact:
            self.check(
                set(idx.entries()), self.model.expected_ttl_index(d.name), f"{d.name} TTL index"
            )

    def full_compare(self) -> None:
        """Compare every key of every table, keys(), primary rows with TTL and TTL indexes."""
        self.stats["full_compares"] = self.stats.get("full_compares", 0) + 1
        for d in self.defs:
            self.compare_keys(d)
            for k in d.keys:
                self.compare_key(d, k)
            self.check(
                engine_rows_with_ttl(self.tables[d.name]),
                self.model.rows_with_ttl(d.name),
                f"{d.name}.primary_rows_with_ttl()",
            )
            self.check_ttl_index(d, exact=True, load=True)

    def check_read_version(self, version: int) -> None:
        """``fsstate.read_table`` of a committed version (while the store goes on, and after
        spills and compactions) equals the model's snapshot of it, and the change feed of the
        version replays the version before it into it."""
        self.stats["read_versions"] = self.stats.get("read_versions", 0) + 1
        now, snap = self.model.now, self.model.snapshots[version]
        for d in self.defs:
            rows, width = snap.get(d.name, {}), len(d.key_schema)
            got = read_table(self.root, OPERATOR, PARTITION, d.name, version, with_seq=True)
            tuples = list(zip(*(_pylist(c) for c in got.columns)))
            have: dict[Any, Any] = {}
            want: dict[Any, Any] = {}
            for t in tuples:
                if d.kind == VALUE:
                    have[t[:width]] = t[width:-1]
                elif d.kind == LIST:
                    have.setdefault(t[:width], []).append(t[width:-1])
                else:
                    have[(t[:width], t[width : width + 1])] = t[width + 1 : -1]
            for k, row in rows.items():
                if d.kind == VALUE and is_live(row[1], now):
                    want[k] = row[0]
                elif d.kind == LIST and any(is_live(e, now) for _, e in row):
                    want[k] = [v for v, e in row if is_live(e, now)]
                elif d.kind == MAP:
                    want.update({(k, u): v for u, (v, e) in row.items() if is_live(e, now)})
            self.check(have, want, f"read_table({d.name}, version {version})")
            if version - 1 in self.model.snapshots:  # the change feed of this version
                before = read_table(self.root, OPERATOR, PARTITION, d.name, version - 1)
                feed = read_changes(self.root, OPERATOR, PARTITION, d.name, version, version)
                self.check(
                    _replay(before, feed, d),
                    _units(got.drop_columns(["_seq"]), d),
                    f"read_changes({d.name}, {version}) replayed on version {version - 1}",
                )

    # -- value operations ------------------------------------------------------------------------
    def cursor_ops(self, d: TableDef) -> tuple[KeyCursorCell, Getter, Updater]:
        """Key-cursor accessors of ``d``'s current table object (new ones after a reopen)."""
        t = self.vt(d)
        got = self.cursors.get(d.name)
        if got is None or got[0] is not t:
            cell = KeyCursorCell()

            def get_slow() -> tuple[Any, ...] | None:
                assert cell.key is not None
                return t.get(cell.key)

            def update_slow(value: tuple[Any, ...]) -> None:
                assert cell.key is not None
                t.update(cell.key, value)

            get, update = t.cursor_ops(cell, get_slow, update_slow)
            got = self.cursors[d.name] = (t, cell, get, update)
        return got[1], got[2], got[3]

    def op_value_update(self) -> None:
        d = self.rng.choice(self.by_kind[VALUE])
        k, v = self.key(d), self.value()
        if self.rng.random() < 0.5:
            self.log(f"{d.name}.update({k}, {v}) by key cursor")
            cell, _, update = self.cursor_ops(d)
            cell.key = k
            update(v)
            cell.key = None
        else:
            self.log(f"{d.name}.update({k}, {v})")
            self.vt(d).update(k, v)
        self.model.value_update(d.name, k, v)

    def op_value_clear(self) -> None:
        d = self.rng.choice(self.by_kind[VALUE])
        k = self.key(d)
        self.log(f"{d.name}.clear({k})")
        self.vt(d).clear(k)
        self.model.clear(d.name, k)

    def op_value_get(self) -> None:
        d = self.rng.choice(self.by_kind[VALUE])
        k = self.key(d)
        expected = self.model.value_get(d.name, k)
        if self.rng.random() < 0.5:
            self.log(f"{d.name}.get({k}) by key cursor")
            cell, get, _ = self.cursor_ops(d)
            cell.key = k
            self.check(get(), expected, f"{d.name}.get({k}) by key cursor")
            cell.key = None
        else:
            self.log(f"{d.name}.get({k})")
            self.check(self.vt(d).get(k), expected, f"{d.name}.get({k})")

    def op_value_put_many(self) -> None:
        d = self.rng.choice(self.by_kind[VALUE])
        keys = [self.key(d) for _ in range(self.rng.randint(0, 8))]
        vals = [self.value() for _ in keys]
        self.log(f"{d.name}.put_many({keys}, {vals})")
        self.vt(d).put_many(_key_table(d, keys), _value_table(vals))
        for k, v in zip(keys, vals, strict=True):
            self.model.value_update(d.name, k, v)

    def op_value_get_many(self) -> None:
        d = self.rng.choice(self.by_kind[VALUE])
        keys = [self.key(d) for _ in range(self.rng.randint(0, 8))]
        self.log(f"{d.name}.get_many({keys})")
        got = _found_values(self.vt(d).get_many(_key_table(d, keys)))
        self.check(got, [self.model.value_get(d.name, k) for k in keys], f"{d.name}.get_many")

    # -- list operations -------------------------------------------------------------------------
    def op_list_put(self) -> None:
        d = self.rng.choice(self.by_kind[LIST])
        k, vals = self.key(d), self.values()
        self.log(f"{d.name}.put({k}, {vals})")
        self.lt(d).put(k, vals)
        self.model.list_put(d.name, k, vals)

    def list_cursor_append(self, d: TableDef) -> tuple[KeyCursorCell, Any]:
        """The key-cursor ``append_value`` of ``d``'s current list table object."""
        t = self.lt(d)
        got = self.list_cursors.get(d.name)
        if got is None or got[0] is not t:
            cell = KeyCursorCell()

            def append_slow(value: tuple[Any, ...]) -> None:
                assert cell.key is not None
                t.append(cell.key, value)

            got = self.list_cursors[d.name] = (t, cell, t.cursor_ops(cell, append_slow))
        return got[1], got[2]

    def op_list_append(self) -> None:
        d = self.rng.choice(self.by_kind[LIST])
        k, v = self.key(d), self.value()
        if self.rng.random() < 0.5:
            self.log(f"{d.name}.append({k}, {v}) by key cursor")
            cell, append_value = self.list_cursor_append(d)
            cell.key = k
            append_value(v)
            cell.key = None
        else:
            self.log(f"{d.name}.append({k}, {v})")
            self.lt(d).append(k, v)
        self.model.list_extend(d.name, k, [v])

    def op_list_extend(self) -> None:
        d = self.rng.choice(self.by_kind[LIST])
        k, vals = self.key(d), self.values()
        self.log(f"{d.name}.extend({k}, {vals})")
        self.lt(d).extend(k, vals)
        self.model.list_extend(d.name, k, vals)

    def op_list_clear(self) -> None:
        d = self.rng.choice(self.by_kind[LIST])
        k = self.key(d)
        self.log(f"{d.name}.clear({k})")
        self.lt(d).clear(k)
        self.model.clear(d.name, k)

    def op_list_get(self) -> None:
        d = self.rng.choice(self.by_kind[LIST])
        k = self.key(d)
        self.log(f"{d.name}.get({k})")
        self.check(self.lt(d).get(k), self.model.list_get(d.name, k), f"{d.name}.get({k})")

    def op_list_append_many(self) -> None:
        d = self.rng.choice(self.by_kind[LIST])
        keys = [self.key(d) for _ in range(self.rng.randint(0, 8))]
        vals = [self.value() for _ in keys]
        self.log(f"{d.name}.append_many({keys}, {vals})")
        self.lt(d).append_many(_key_table(d, keys), _value_table(vals))
        for k, v in zip(keys, vals, strict=True):
            self.model.list_extend(d.name, k, [v])

    # -- map operations --------------------------------------------------------------------------
    def map_cursor_ops(self, d: TableDef) -> tuple[KeyCursorCell, Any, Any, Any]:
        """Key-cursor accessors of ``d``'s current map table object."""
        t = self.mt(d)
        got = self.map_cursors.get(d.name)
        if got is None or got[0] is not t:
            cell = KeyCursorCell()

            def key() -> tuple[Any, ...]:
                assert cell.key is not None
                return cell.key

            ops = t.cursor_ops(
                cell,
                lambda u: t.get(key(), u),
                lambda u: t.contains(key(), u),
                lambda u, v: t.update(key(), u, v),
            )
            got = self.map_cursors[d.name] = (t, cell, *ops)
        return got[1], got[2], got[3], got[4]

    def op_map_update(self) -> None:
        d = self.rng.choice(self.by_kind[MAP])
        k, u, v = self.key(d), self.ukey(d), self.value()
        if self.rng.random() < 0.5:
            self.log(f"{d.name}.update({k}, {u}, {v}) by key cursor")
            cell, _, _, update_value = self.map_cursor_ops(d)
            cell.key = k
            update_value(u, v)
            cell.key = None
        else:
            self.log(f"{d.name}.update({k}, {u}, {v})")
            self.mt(d).update(k, u, v)
        self.model.map_update(d.name, k, u, v)

    def op_map_remove(self) -> None:
        d = self.rng.choice(self.by_kind[MAP])
        k, u = self.key(d), self.ukey(d)
        self.log(f"{d.name}.remove({k}, {u})")
        self.mt(d).remove(k, u)
        self.model.map_remove(d.name, k, u)

    def op_map_clear(self) -> None:
        d = self.rng.choice(self.by_kind[MAP])
        k = self.key(d)
        self.log(f"{d.name}.clear({k})")
        self.mt(d).clear(k)
        self.model.clear(d.name, k)

    def op_map_get(self) -> None:
        d = self.rng.choice(self.by_kind[MAP])
        k, u = self.key(d), self.ukey(d)
        self.log(f"{d.name}.get({k}, {u}) / contains")
        exp = self.model.map_get(d.name, k, u)
        cell, get_value, contains_key, _ = self.map_cursor_ops(d)
        cell.key = k
        r = self.rng.random()
        if r < 0.25:
            self.check(self.mt(d).get(k, u), exp, f"{d.name}.get({k}, {u})")
        elif r < 0.5:
            self.check(self.mt(d).contains(k, u), exp is not None, f"{d.name}.contains({k}, {u})")
        elif r < 0.75:
            self.check(get_value(u), exp, f"{d.name}.get({k}, {u}) by key cursor")
        else:
            self.check(contains_key(u), exp is not None, f"{d.name}.contains({k}, {u}) by cursor")
        cell.key = None

    def op_map_iterate(self) -> None:
        d = self.rng.choice(self.by_kind[MAP])
        k = self.key(d)
        items = self.model.map_items(d.name, k)
        which = self.rng.choice(["items", "user_keys", "values"])
        self.log(f"{d.name}.{which}({k})")
        t = self.mt(d)
        if which == "items":
            self.check(list(t.items(k)), items, f"{d.name}.items({k})")
        elif which == "user_keys":
            self.check(list(t.user_keys(k)), [u for u, _ in items], f"{d.name}.user_keys({k})")
        else:
            self.check(list(t.values(k)), [v for _, v in items], f"{d.name}.values({k})")

    def op_map_put_many(self) -> None:
        d = self.rng.choice(self.by_kind[MAP])
        n = self.rng.randint(0, 8)
        keys = [self.key(d) for _ in range(n)]
        ukeys = [self.ukey(d) for _ in range(n)]
        vals = [self.value() for _ in range(n)]
        self.log(f"{d.name}.put_many({keys}, {ukeys}, {vals})")
        self.mt(d).put_many(_key_table(d, keys), _ukey_table(d, ukeys), _value_table(vals))
        for k, u, v in zip(keys, ukeys, vals, strict=True):
            self.model.map_update(d.name, k, u, v)

    def op_map_get_many(self) -> None:
        d = self.rng.choice(self.by_kind[MAP])
        n = self.rng.randint(0, 8)
        keys = [self.key(d) for _ in range(n)]
        ukeys = [self.ukey(d) for _ in range(n)]
        self.log(f"{d.name}.get_many({keys}, {ukeys})")
        got = _found_values(self.mt(d).get_many(_key_table(d, keys), _ukey_table(d, ukeys)))
        exp = [self.model.map_get(d.name, k, u) for k, u in zip(keys, ukeys, strict=True)]
        self.check(got, exp, f"{d.name}.get_many")

    # -- any table -------------------------------------------------------------------------------
    def op_exists(self) -> None:
        d = self.rng.choice(self.defs)
        k = self.key(d)
        self.log(f"{d.name}.exists({k})")
        self.check(
            self.tables[d.name].exists(k), self.model.exists(d.name, k), f"{d.name}.exists({k})"
        )

    def op_keys(self) -> None:
        d = self.rng.choice(self.defs)
        self.log(f"{d.name}.keys()")
        self.compare_keys(d)

    def op_compare_key(self) -> None:
        d = self.rng.choice(self.defs)
        k = self.key(d)
        self.log(f"compare {d.name} key {k}")
        self.compare_key(d, k)

    def op_delete_range(self) -> None:
        d = self.rng.choice(self.defs)
        a: tuple[Any, ...]
        b: tuple[Any, ...]
        if d.key_kind == "comp":
            a = (self.rng.choice("abcde"), self.rng.randint(-1, 5))
            b = (self.rng.choice("abcde"), self.rng.randint(-1, 5))
        elif d.key_kind == "window":
            a = (WINDOW_T0 + self.rng.randint(-1, 4) * WINDOW_STEP, self.rng.randint(-1, 5))
            b = (WINDOW_T0 + self.rng.randint(-1, 4) * WINDOW_STEP, self.rng.randint(-1, 5))
        elif d.key_kind == "float":  # bounds compare (no NaN, no null); keys holding them sort last
            a = (self.rng.choice([-2.0, -1.5, 0.0, 1.0, 2.5, 9.0]), self.rng.randint(-1, 4))
            b = (self.rng.choice([-2.0, -1.5, 0.0, 1.0, 2.5, 9.0]), self.rng.randint(-1, 4))
        else:
            a = (self.rng.randint(-2, 21),)
            b = (a[0] + self.rng.randint(0, 6),)
        lo, hi = (a, b) if self.rng.random() < 0.1 else (min(a, b), max(a, b))
        self.log(f"{d.name}.delete_range({lo}, {hi})")
        self.tables[d.name].delete_range(lo, hi)
        self.model.delete_range(d.name, lo, hi)

    # -- time and TTL ----------------------------------------------------------------------------
    def _set_time(self, now: int) -> None:
        self.store.set_time(now)
        self.model.set_time(now)

    def op_advance(self) -> None:
        now = self.model.now + self.rng.choice([0, 1, 5, 20, 40, 60, 100, 250])
        self.log(f"set_time({now}) (forward)")
        self._set_time(now)

    def op_time_to_expiry(self) -> None:
        """Move time onto (or next to) the expiry of a live row and read that key."""
        alive = [e for e in self.model.expiries() if e[2] > self.model.now]
        if not alive:
            return
        name, k, exp = self.rng.choice(alive)
        now = exp + self.rng.choice([-1, 0, 0, 0, 1])
        self.log(f"set_time({now}) (onto an expiry of {name} {k})")
        self._set_time(now)
        self.compare_key(next(d for d in self.defs if d.name == name), k)

    def op_time_back(self) -> None:
        now = max(START_MS, self.model.now - self.rng.randint(1, 60))
        self.log(f"set_time({now}) (backward)")
        self._set_time(now)

    def op_expire(self) -> None:
        now = self.model.now
        before: dict[str, tuple[int, int]] = {}
        for d in self.defs:
            idx = self.tables[d.name].ttl_index()
            self.check(
                set(idx.entries()),
                self.model.expected_ttl_index(d.name),
                f"{d.name} TTL index before expire",
            )
            due = sum(1 for exp, _ in idx.entries() if exp <= now)
            before[d.name] = (idx.lookups, due)
        self.log(f"store.expire() at {now}")
        removed = self.store.expire()
        self.check(removed, self.model.expire(), "rows removed by store.expire()")
        for d in self.defs:
            idx = self.tables[d.name].ttl_index()
            lookups, due = before[d.name]
            self.check(idx.lookups - lookups, due, f"{d.name}: cleanup lookups == expired entries")
            self.check_ttl_index(d, exact=True, load=True)
        self.stats["expired_rows"] = self.stats.get("expired_rows", 0) + removed

    # -- tiers -----------------------------------------------------------------------------------
    def op_tiers(self) -> None:
        """Move data between tiers; nothing observable may change."""
        d = self.rng.choice(self.defs)
        t = self.tables[d.name]
        what = self.rng.choice(
            [
                "seal",
                "evict",
                "seal+evict",
                "release",
                "table.spill",
                "store.spill",
                "store.compact",
                "store.compact(force)",
            ]
        )
        self.log(f"{d.name}: {what}" if not what.startswith("store") else what)
        if what in ("seal", "seal+evict"):
            t.seal()
        if what in ("evict", "seal+evict"):
            t.evict_clean()
        if what == "release":
            t.release_segments()
        if what == "table.spill":
            t.spill()
            self.stats["spill_ops"] = self.stats.get("spill_ops", 0) + 1
        if what == "store.spill":
            self.store.spill()
            self.stats["spill_ops"] = self.stats.get("spill_ops", 0) + 1
        if what.startswith("store.compact"):
            self.store.compact(force=what.endswith("(force)"))

    # -- versions --------------------------------------------------------------------------------
    def op_commit(self) -> None:
        cur = self.store.version
        if cur is not None and self.rng.random() < 0.05:
            version = cur  # a re-commit of the same version overwrites it
        else:
            version = 0 if cur is None else cur + 1
        self.log(f"commit({version})")
        # a version is published once: committing one that exists (on the same parent: every
        # commit here builds version v on v - 1) adopts it, dropping this store's changes
        existing = self.manifests.get(version)
        if version == (0 if cur is None else cur + 1):  # an epoch: the store at its parent
            info = EpochRun.of_store(self.store, version, pool=self.pool).commit()
        else:  # below the epoch: the store's own re-commit of its version
            info = self.store.commit(version)
        self.check(info.adopted, existing is not None, f"commit({version}) adopted")
        if info.adopted:
            assert existing is not None
            self.model.open(version)
            self.heads[id(self.store)] = (version, existing[0])
            self.stats["adopted"] = self.stats.get("adopted", 0) + 1
        else:
            self.model.commit(version)
            self._record_commit(version)
            if self.inspect_rng.random() < 0.25:
                self.check_read_version(version)
        if not self.controller.config.background_compaction:
            if self.rng.random() < 0.5:  # a streamed merge (what a state beyond the budget gets)
                t = self.rng.choice(list(self.tables.values()))
                width = self.rng.randint(2, 4)
                self.log(f"compact_table({t.name}, streamed, width {width})")
                compact_table(t, 1, 2, stream_width=width)
            self.store.compact()  # the maintenance a background thread would do
        self.stats["commits"] = self.stats.get("commits", 0) + 1
        self.check(self.store.version, version, "store.version after commit")
        self.check(self.store.dirty, False, "store.dirty after commit")
        self.check(self.store.retained_versions(), self.model.retained(), "retained versions")
        self.check(
            PartitionStore.committed_versions(self.root, OPERATOR, PARTITION),
            self.model.retained(),
            "committed versions on storage",
        )

    def _record_commit(self, version: int) -> None:
        """Track the manifest a commit publishes: its parent is the version the store was at
        (a re-commit keeps the replaced manifest's parent); retention drops old ones."""
        head = self.heads[id(self.store)]
        parent: tuple[int | None, int | None] = (None, None)
        if head is not None and head[0] < version:
            parent = head
        elif head is not None and head[0] == version:
            parent = self.manifests[version][1:]
        self.commit_ids += 1
        self.manifests[version] = (self.commit_ids, *parent)
        self.heads[id(self.store)] = (version, self.commit_ids)
        retained = set(self.model.retained())
        self.manifests = {v: m for v, m in self.manifests.items() if v in retained}

    def refresh_must_succeed(self, copy: tuple[int, int] | None, latest: int) -> bool:
        """Whether a clean, open copy at ``copy`` must catch up to ``latest``: it is that very
        manifest, or walking parent links from ``latest`` (reading at most LINEAGE_STEPS_MAX
        retained intermediate manifests) reaches it with the same commit."""
        if copy is None or latest not in self.manifests:
            return False
        if copy == (latest, self.manifests[latest][0]):
            return True
        base_v, base_cid = copy
        if latest <= base_v:
            return False
        m = self.manifests[latest]
        for _ in range(LINEAGE_STEPS_MAX):
            _cid, pv, pcid = m
            if pv is None or pv < base_v:
                return False
            if pv == base_v:
                return pcid == base_cid
            parent = self.manifests.get(pv)
            if parent is None or parent[0] != pcid:
                return False  # the intermediate manifest is gone or was re-committed
            m = parent
        return False

    def reopen(self, version: int, why: str) -> None:
        """Open a fresh store at ``version`` (sometimes changing a table's TTL)."""
        change = ""
        if self.rng.random() < 0.15:
            d = self.rng.choice(self.defs)
            self.ttl[d.name] = self.rng.choice(TTL_CHOICES)
            change = f", {d.name} ttl -> {self.ttl[d.name]}"
        self.log(f"reopen at {version} ({why}{change})")
        if self.rng.random() < 0.5:
            self.store.close()
        self.model.open(version)
        self.store = self._open(version)
        self.heads[id(self.store)] = (version, self.manifests[version][0])
        self._declare_all()
        self.check(self.store.version, version, "store.version after open")
        self.check(self.store.dirty, False, "store.dirty after open")
        self.stats["reopens"] = self.stats.get("reopens", 0) + 1
        if self.rng.random() < 0.3:
            self.full_compare()

    def op_reopen_latest(self) -> None:
        if self.store.version is not None:
            self.reopen(self.store.version, "latest")

    def op_reopen_old(self) -> None:
        retained = self.store.retained_versions()
        self.check(retained, self.model.retained(), "retained versions before reopen")
        if not retained:
            return
        if retained[0] > 0 and self.rng.random() < 0.2:
            gone = self.rng.randrange(retained[0])
            self.log(f"open at {gone} (no longer retained, must raise)")
            with pytest.raises(VersionNotFoundError):
                PartitionStore.open(self.root, OPERATOR, PARTITION, gone, self.config)
            return
        self.reopen(self.rng.choice(retained), f"retained {retained}")

    def op_switch_worker(self) -> None:
        """Commit, leave this store to its worker, continue in another worker's copy.

        Under Spark a partition moves between Python workers that each keep their last clean
        copy; :meth:`PartitionStore.refresh` catches a copy up when the latest version descends
        from it and refuses otherwise (re-committed versions, reopened older versions, a closed
        copy).
        """
        self.op_commit()
        latest = self.store.version
        assert latest is not None
        self.workers[self.worker] = self.store
        if self.rng.random() < 0.5:  # back to the previous worker: its copy is a few commits old
            w = self.prev_worker
        else:
            w = self.rng.randrange(len(self.workers))
        self.prev_worker, self.worker = self.worker, w
        store = self.workers[w]
        if store is None:
            self.reopen(latest, f"worker {w} starts")
            self.workers[w] = self.store
            return
        before = None if store.closed else store.version
        head = self.heads[id(store)]
        # a copy that was left dirty (abandoned by a reopen mid-batch) is refused too
        must = not store.closed and not store.dirty and self.refresh_must_succeed(head, latest)
        ok = store.refresh(latest)
        self.log(f"switch to worker {w}: copy at {before} refresh({latest}) -> {ok}")
        self.check(ok, must, f"refresh({latest}) of a copy at (version, commit) {head}")
        if ok:
            self.heads[id(store)] = (latest, self.manifests[latest][0])
            key = "refreshed" if before != latest else "same_version"
            self.stats[key] = self.stats.get(key, 0) + 1
            self.store = store
            store.set_time(self.model.now)
            self.model.open(latest)
            self._declare_all()
            self.check(self.store.version, latest, "store.version after refresh")
            self.check(self.store.dirty, False, "store.dirty after refresh")
            if self.rng.random() < 0.3:
                self.full_compare()
        else:
            self.stats["refresh_refused"] = self.stats.get("refresh_refused", 0) + 1
            store.close()
            self.reopen(latest, "refresh refused")
        self.workers[w] = self.store

    def op_drop_table(self) -> None:
        """Drop a table and declare it again: it starts empty (older versions keep it)."""
        d = self.rng.choice(self.defs)
        self.log(f"drop_table({d.name}) and declare it again")
        self.check(self.store.drop_table(d.name), True, f"drop_table({d.name})")
        self.model.drop(d.name)
        self._declare(d)

    # -- bad input -------------------------------------------------------------------------------
    def op_bad_input(self) -> None:
        """A call with bad input raises FsStateError and changes nothing."""
        d = self.rng.choice(self.defs)
        k = self.key(d)
        good = self.value()
        bad: Any = self.rng.choice([("not-an-int", "s"), (1,), (1, "s", 2), [1, 2], 5])
        seq, dirty = self.store.next_seq, self.store.dirty
        t: Any = self.tables[d.name]
        calls: list[tuple[str, Callable[[], Any]]] = []
        if d.kind == VALUE:
            vt = self.vt(d)
            calls.append((f"update({k}, {bad!r})", lambda: vt.update(k, bad)))
            cell, _, cursor_update = self.cursor_ops(d)
            cell.key = k
            calls.append((f"update({bad!r}) by key cursor at {k}", lambda: cursor_update(bad)))
            calls.append(
                (
                    "put_many(3 keys, 2 values)",
                    lambda: vt.put_many(_key_table(d, [k, k, k]), _value_table([good, good])),
                )
            )
        elif d.kind == LIST:
            lt = self.lt(d)
            calls.append((f"put({k}, [{good}, {bad!r}])", lambda: lt.put(k, [good, bad])))
            calls.append((f"extend({k}, [{good}, {bad!r}])", lambda: lt.extend(k, [good, bad])))
            calls.append((f"append({k}, {bad!r})", lambda: lt.append(k, bad)))
            lcell, cursor_append = self.list_cursor_append(d)
            lcell.key = k
            calls.append((f"append({bad!r}) by key cursor at {k}", lambda: cursor_append(bad)))
        else:
            mt = self.mt(d)
            wrong_ukey: Any = (7,) if d.ukeys is STR_UKEYS else ("str",)
            calls.append(
                (f"update({k}, {wrong_ukey}, {good})", lambda: mt.update(k, wrong_ukey, good))
            )
            calls.append(
                (f"update({k}, {d.ukeys[0]}, {bad!r})", lambda: mt.update(k, d.ukeys[0], bad))
            )
            calls.append((f"remove({k}, {wrong_ukey})", lambda: mt.remove(k, wrong_ukey)))
            mcell, _, _, cursor_update_value = self.map_cursor_ops(d)
            mcell.key = k
            calls.append(
                (
                    f"update({d.ukeys[0]}, {bad!r}) by key cursor at {k}",
                    lambda: cursor_update_value(d.ukeys[0], bad),
                )
            )
        if d.declare_key_schema:
            wrong_key = ("x",) if d.key_kind == "int" else (1, "x")
            calls.append((f"clear({wrong_key})", lambda: t.clear(wrong_key)))
            if d.kind == VALUE:
                calls.append(
                    (f"update({wrong_key}, {good})", lambda: self.vt(d).update(wrong_key, good))
                )
        label, call = self.rng.choice(calls)
        self.log(f"{d.name}.{label} (bad input)")
        with pytest.raises(FsStateError):
            call()
        self.check(self.store.next_seq, seq, "next_seq after rejected bad input")
        self.check(self.store.dirty, dirty, "store.dirty after rejected bad input")
        self.compare_key(d, k)

    # -- driver ----------------------------------------------------------------------------------
    def ops(self) -> list[tuple[Callable[[], None], float]]:
        """The weighted operation mix."""
        return [
            (self.op_value_update, 8),
            (self.op_value_clear, 2),
            (self.op_value_get, 6),
            (self.op_value_put_many, 1.2),
            (self.op_value_get_many, 1.2),
            (self.op_list_put, 2.5),
            (self.op_list_append, 6),
            (self.op_list_extend, 2.5),
            (self.op_list_clear, 1.5),
            (self.op_list_get, 6),
            (self.op_list_append_many, 1.2),
            (self.op_map_update, 9),
            (self.op_map_remove, 3),
            (self.op_map_clear, 1.2),
            (self.op_map_get, 6),
            (self.op_map_iterate, 4),
            (self.op_map_put_many, 1.2),
            (self.op_map_get_many, 1.2),
            (self.op_exists, 3),
            (self.op_keys, 0.6),
            (self.op_compare_key, 2),
            (self.op_delete_range, 1.2),
            (self.op_advance, 3.5),
            (self.op_time_to_expiry, 1.5),
            (self.op_time_back, 0.3),
            (self.op_expire, 1.5),
            (self.op_tiers, 1.5),
            (self.op_commit, 1.0),
            (self.op_reopen_latest, 0.3),
            (self.op_reopen_old, 0.3),
            (self.op_bad_input, 0.6),
            (self.op_drop_table, 0.1),
            (self.op_switch_worker, 0.8),
        ]

    def run(self, n_ops: int) -> None:
        """Run ``n_ops`` random operations, checking the TTL index after each one."""
        ops = self.ops()
        funcs = [f for f, _ in ops]
        weights = [w for _, w in ops]
        for self.step in range(n_ops):
            op = self.rng.choices(funcs, weights)[0]
            op()
            for d in self.defs:
                self.check_ttl_index(d, exact=self.step % 10 == 0, load=False)
            if self.step % FULL_EVERY == FULL_EVERY - 1:
                self.full_compare()
        self.step = n_ops
        self.full_compare()
        self.op_commit()
        self.reopen(self.store.version or 0, "final")
        self.full_compare()


@pytest.mark.parametrize("seed", _seeds())
def test_engine_matches_model(seed: int, tmp_path: Path) -> None:
    """Thousands of random operations per seed; the engine always agrees with the model."""
    runner = Runner(seed, tmp_path / "state", TABLES)
    try:
        runner.run(_ops_per_seed())
    finally:
        runner.close_all()
    ctl = runner.controller.stats()
    got = {
        **runner.stats,
        "spills": ctl.spills + runner.stats.get("spill_ops", 0),
        "compactions": ctl.compactions,
    }
    # every seed must exercise each path it exists to test (else it proves nothing about it)
    minimums = {
        "commits": 15,
        "reopens": 5,
        "refreshed": 2,  # catch-ups across versions committed by another "worker"
        "refresh_refused": 1,
        "expired_rows": 50,
        "spills": 3,
        "compactions": 20,
        "full_compares": 10,
    }
    short = {k: (got.get(k, 0), n) for k, n in minimums.items() if got.get(k, 0) < n}
    assert not short, f"seed={seed} profile={runner.profile} exercised too little: {short} ({got})"


@pytest.mark.parametrize("seed", [31, 32])
def test_engine_matches_model_on_s3(seed: int, s3_uri: str, s3_server: S3Info) -> None:
    """The same mix with the store on the S3 server (both memory profiles)."""
    runner = Runner(seed, Location.parse(s3_uri, s3_options(s3_server)), TABLES)
    try:
        runner.run(_ops_per_seed())
    finally:
        runner.close_all()
    assert runner.stats.get("commits", 0) >= 15 and runner.stats.get("refreshed", 0) >= 1


@pytest.mark.parametrize("seed", [7, 8])
def test_window_keys_match_model(seed: int, tmp_path: Path) -> None:
    """The random mix over (timestamp window start, id) grouping keys."""
    runner = Runner(seed, tmp_path / "state", WINDOW_TABLES)
    try:
        runner.run(min(_ops_per_seed(), 800))
    finally:
        runner.close_all()


@pytest.mark.parametrize("seed", [9, 10])
def test_float_keys_with_nan_and_null_match_model(seed: int, tmp_path: Path) -> None:
    """The random mix over (float, int) grouping keys and float user keys holding NaN and
    null: every NaN is one key, as Spark groups them (found keys holding NaN never found
    again and deleted rows of them coming back in scans)."""
    runner = Runner(seed, tmp_path / "state", FLOAT_TABLES)
    try:
        runner.run(min(_ops_per_seed(), 800))
    finally:
        runner.close_all()


KEY_TYPE_CASES = [
    pytest.param(pa.int64(), 7, id="int64"),
    pytest.param(pa.int32(), -3, id="int32"),
    pytest.param(pa.float64(), 1.5, id="float64"),
    pytest.param(pa.bool_(), True, id="bool"),
    pytest.param(pa.string(), "käse", id="string"),
    pytest.param(pa.binary(), b"\x00k", id="binary"),
    pytest.param(pa.date32(), dt.date(2024, 5, 1), id="date32"),
    pytest.param(pa.timestamp("us"), dt.datetime(2024, 5, 1, 12, 0, 1), id="timestamp-naive"),
    pytest.param(
        pa.timestamp("us", tz="UTC"),
        dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC),
        id="timestamp-utc",
    ),
    pytest.param(
        pa.decimal128(10, 2),
        decimal.Decimal("1.5"),
        id="decimal",
    ),
]


@pytest.mark.parametrize(("key_type", "key_field"), KEY_TYPE_CASES)
def test_grouping_key_types_survive_spill_and_reopen(
    key_type: pa.DataType, key_field: Any, tmp_path: Path
) -> None:
    """A key of every supported type is found again in a spilled run and after a reopen."""
    key_schema = pa.schema([pa.field("k", key_type), pa.field("i", pa.int64())])
    key = (key_field, 1)
    store = PartitionStore.open(str(tmp_path), OPERATOR, PARTITION)
    store.set_time(START_MS)
    t = store.value_table("v", VALUE_SCHEMA, key_schema)
    t.update(key, (1, "a"))
    t.spill()  # sealed, written to Parquet, segment released, views evicted
    assert t.get(key) == (1, "a")
    store.commit(0)
    reopened = PartitionStore.open(str(tmp_path), OPERATOR, PARTITION, 0)
    reopened.set_time(START_MS)
    r = reopened.value_table("v", VALUE_SCHEMA, key_schema)
    assert r.get(key) == (1, "a")
    assert r.exists(key)
    assert list(r.keys()) == [key]


def test_background_compactor_idles_when_nothing_is_compactable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose runs cannot be merged yet costs the compaction thread nothing."""
    ctl = MemoryController(EngineConfig(compaction_max_runs=2, background_compaction=True))
    store = PartitionStore.open(str(tmp_path), OPERATOR, PARTITION)
    store.controller.unregister(store)
    store.controller = ctl
    store.ctx.cache = ctl.cache
    ctl.register(store)
    t = store.value_table("v", pa.schema([("n", pa.int64())]), pa.schema([("k", pa.int64())]))
    for v in range(3):  # three committed runs: compaction is requested and merges them
        t.update((v,), (v,))
        store.commit(v)
    ctl.compactor().wait_idle(10)
    for v in range(3):  # three sealed runs, not yet written to storage
        t.update((v,), (v,))
        t.seal()
    rounds = [0]
    run_once = Compactor.run_once

    def counting(self: Compactor, table: TableBase, force: bool = False) -> int:
        rounds[0] += 1
        return run_once(self, table, force)

    monkeypatch.setattr(Compactor, "run_once", counting)
    try:
        ctl.compactor().request(t)
        time.sleep(0.5)
    finally:
        store.close()  # a closed store's tables are skipped: the loop ends
    assert rounds[0] <= 5, f"{rounds[0]} compaction rounds in 0.5 s with nothing to merge"
