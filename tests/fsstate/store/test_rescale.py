"""Rescaling a store set to another partition count (:mod:`fsstate.store.rescale`), on local disk
and the S3 test server: every live row lands, with its expiry, in the partition the caller's
function gives; the old generation stays readable and in force until the new one is published;
a rescale killed at any write (seeded faults in the FileIO's backend; the seed is printed on
failure) leaves the old generation in force and can be re-run; and a chain of operators rescaled
4 -> 7 -> 2 between batches gives what the same chain gives unrescaled."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fsstate.config import StoreConfig
from fsstate.errors import (
    CommitConflictError,
    CommitError,
    ConfigError,
    FsStateError,
    PartitionCountError,
    StorageError,
    VersionNotFoundError,
)
from fsstate.inspect import Snapshot, find_stores
from fsstate.operators import (
    Agg,
    Deduplicate,
    IntervalJoin,
    LocalQuery,
    RetractAggregate,
    Stage,
    WatermarkSpec,
    Window,
    WindowAggregate,
    join_input_schema,
)
from fsstate.operators.local import partition_ids
from fsstate.storage.fileio import FileIO
from fsstate.storage.leases import lease_book
from fsstate.storage.location import Location
from fsstate.store import PartitionStore
from fsstate.store.gc import collect
from fsstate.store.layout import Layout, in_force, publish_layout, read_layouts
from fsstate.store.pool import store_pool
from fsstate.store.rescale import rescale
from tests.support.faulty_backend import FaultyBackend
from tests.support.plugin import s3_options
from tests.support.rescale_state import OP, by_k, rows_of, write_state

US = 1_000_000
TS = pa.timestamp("us", tz="UTC")


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "local":
        return Location.parse(str(tmp_path / "state"))
    info = request.getfixturevalue("s3_server")
    return Location.parse(request.getfixturevalue("s3_uri"), s3_options(info))


def test_rescale_moves_every_live_row_with_its_expiry(root: Location) -> None:
    fileio = FileIO(root)
    v = write_state(fileio, 3, seed=1)
    before = rows_of(fileio, 3, v, "")
    result = rescale(fileio, OP, partitions=5, keys=["k"], partition_of=by_k(5), version=v)
    new = result.layout
    assert (new.generation, new.partitions, new.since) == (1, 5, v)
    assert in_force(read_layouts(fileio, OP)) == new
    # the rows: the same, at the newest old clock (every old partition committed v at it)
    assert rows_of(fileio, 5, v, new.dir) == before
    assert sum(len(r) for r in before.values()) > 50
    # each key in the partition the function gives, and only there
    for p in range(5):
        with Snapshot(fileio, OP, p, v, new.dir) as snap:
            keys = snap.read("plain").select(["k"])
            assert set(partition_ids(keys, ["k"], 5)) <= {p}
            meta = snap.manifest.meta
            assert meta["watermark_ms"] == 22 and meta["event_time_max_ms"] == {"input": 202}
            # the purge point is kept (deadline indexes and window panes scan from it)
            store = PartitionStore.open(fileio, OP, p, v, layout=new.dir)
            tomb = store.table("due").ranges.items
            store.close()
            assert [(lo, hi) for lo, hi, _ in tomb] == [(None, (23,))]
    # the old generation is untouched and still readable; readers pick the generation
    assert rows_of(fileio, 3, v, "") == before
    assert {s.layout for s in find_stores(fileio)} == {new.dir}
    assert len(find_stores(fileio)) == 5
    assert {s.layout for s in find_stores(fileio, version=v - 1)} == {""}
    # the new stores continue: version v + 1 on version v, TTL rows expire on time
    store = PartitionStore.open(fileio, OP, 0, v, layout=new.dir)
    store.set_time(1_000_000 + 1000 * v + 10_000)
    assert store.expire() > 0
    store.commit(v + 1)
    store.close()


def test_rescale_to_one_and_back_keeps_rows(tmp_path: Path) -> None:
    fileio = FileIO(str(tmp_path / "s"))
    v = write_state(fileio, 4, seed=2)
    before = rows_of(fileio, 4, v, "")
    one = rescale(fileio, OP, partitions=1, keys=["k"], partition_of=by_k(1), version=v).layout
    assert rows_of(fileio, 1, v, one.dir) == before
    six = rescale(fileio, OP, partitions=6, keys=["k"], partition_of=by_k(6), version=v).layout
    assert six.generation == 2 and rows_of(fileio, 6, v, six.dir) == before


def test_rescale_killed_at_any_write_leaves_the_old_generation_and_reruns(
    root: Location,
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    fileio = FileIO(root)
    v = write_state(fileio, 3, seed=3)
    before = rows_of(fileio, 3, v, "")
    counting = FaultyBackend(fileio.backend, fail_at=-1)
    fileio.backend = counting  # type: ignore[assignment]
    rescale(fileio, OP, partitions=4, keys=["k"], partition_of=by_k(4), version=v)
    total = counting.writes  # the writes of a whole rescale (the last publishes the record)
    fileio.backend = counting.inner
    # reset: a fresh root copy is not needed, every rescale makes a new generation
    failed = 0
    for fail_at in sorted(rng.sample(range(1, total + 1), min(6, total))):
        gen_before = in_force(read_layouts(fileio, OP))
        faulty = FaultyBackend(fileio.backend, fail_at)
        fileio.backend = faulty  # type: ignore[assignment]
        try:
            done = rescale(fileio, OP, partitions=4, keys=["k"], partition_of=by_k(4), version=v)
        except FsStateError as exc:
            assert isinstance(exc, (StorageError, CommitError)), f"seed {seed}: {exc!r}"
            assert "injected fault" in str(exc), f"seed {seed}: {exc!r}"
            done = None
        finally:
            fileio.backend = faulty.inner
        if done is None:  # killed: the generation in force and its rows did not change
            failed += 1
            assert in_force(read_layouts(fileio, OP)) == gen_before, f"seed {seed}, {fail_at}"
        else:  # a write whose failure the rescale tolerates (a cleanup): it went through
            assert rows_of(fileio, 4, v, done.layout.dir) == before, f"seed {seed}, {fail_at}"
        assert rows_of(fileio, 3, v, "") == before, f"seed {seed}, at {fail_at}"
    assert failed, f"seed {seed}: no injected fault stopped a rescale"
    again = rescale(fileio, OP, partitions=4, keys=["k"], partition_of=by_k(4), version=v)
    assert rows_of(fileio, 4, v, again.layout.dir) == before, f"seed {seed}"
    assert len(find_stores(fileio)) == 4


def test_two_rescales_racing_publish_one_generation(tmp_path: Path) -> None:
    fileio = FileIO(str(tmp_path / "s"))
    v = write_state(fileio, 2, seed=4)
    first = rescale(fileio, OP, partitions=3, keys=["k"], partition_of=by_k(3), version=v)
    # a rescale that read generation 0 as in force and publishes generation 1 second
    publish_layout(fileio, OP, Layout(0, 2))
    stale = Layout(1, 5, "@g1-00000000", v)
    assert not publish_layout(fileio, OP, stale)
    assert in_force(read_layouts(fileio, OP)) == first.layout
    with pytest.raises(CommitConflictError):
        import fsstate.store.rescale as mod

        real = mod.read_layouts
        mod.read_layouts = lambda f, o: real(f, o)[:1]  # type: ignore[assignment]
        try:
            rescale(fileio, OP, partitions=5, keys=["k"], partition_of=by_k(5), version=v)
        finally:
            mod.read_layouts = real  # type: ignore[assignment]


# -- operator chains through the local driver ------------------------------------------------


def _batches(seed: int, n: int = 8) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    out, base = [], 100
    for _ in range(n):
        rows = [
            {
                "k": rng.choice(["a", "b", "c", "d", "e", "f", None]),
                "t": base + rng.randrange(-15, 12),
                "v": rng.randrange(-5, 50),
            }
            for _ in range(rng.randrange(3, 14))
        ]
        base += rng.randrange(0, 12)
        out.append(rows)
    return out


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r["k"] for r in rows], pa.string()),
            "t": pa.array([r["t"] * US for r in rows], pa.int64()).cast(TS),
            "v": pa.array([r["v"] for r in rows], pa.int64()),
        }
    )


def _self_join(t: pa.Table) -> pa.Table:
    """Each row joined with the rows of its key: left = the row, right = the row 2 s later."""
    side = pa.struct([("k", pa.string()), ("t", TS), ("v", pa.int64())])
    schema = join_input_schema(pa.schema(list(side)), pa.schema(list(side)), [pa.string()])
    n = t.num_rows
    k = t.column("k").combine_chunks()
    ts = t.column("t").combine_chunks()
    v = t.column("v").combine_chunks()
    later = pa.array([x + 2 * US for x in ts.cast(pa.int64()).to_pylist()], pa.int64()).cast(TS)
    left = pa.StructArray.from_arrays([k, ts, v], fields=list(side))
    right = pa.StructArray.from_arrays([k, later, v], fields=list(side))
    return pa.Table.from_arrays(
        [
            pa.array([0] * n + [1] * n, pa.int8()),
            pa.concat_arrays([k, k]),
            pa.concat_arrays([left, pa.nulls(n, side)]),
            pa.concat_arrays([pa.nulls(n, side), right]),
        ],
        schema=schema,
    )


CHAINS: dict[str, Callable[[], list[Stage]]] = {
    "dedup_then_windows": lambda: [
        Stage(Deduplicate("dedup", keys=["k", "v"], time="t", delay_ms=5000), ["k", "v"]),
        Stage(
            WindowAggregate(
                "windows",
                keys=["k"],
                time="t",
                aggs=[Agg("count"), Agg("sum", "v"), Agg("max", "v")],
                mode="append",
                window=Window(10_000, 5_000),
            ),
            ["k"],
        ),
    ],
    "retractions": lambda: [
        Stage(
            RetractAggregate(
                "retract", keys=["k"], aggs=[Agg("count"), Agg("min", "v"), Agg("sum", "v")]
            ),
            ["k"],
            before=lambda t: t.append_column("op", pa.array([1] * t.num_rows, pa.int8())),
        ),
        # the keyed stage's changelog (an update retracts the old row) into a global one
        Stage(
            RetractAggregate(
                "global", keys=[], aggs=[Agg("count"), Agg("sum", "count"), Agg("max", "sum(v)")]
            ),
            [],
        ),
    ],
    "join": lambda: [
        Stage(
            IntervalJoin(
                "join",
                left_time="t",
                right_time="t",
                lower_ms=3000,
                upper_ms=3000,
                how="left_outer",
            ),
            ["_k0"],
            before=_self_join,
        ),
    ],
}
WATERMARKS = {"join": {"left": 5000, "right": 5000}, "retractions": {}}


def _norm(t: pa.Table) -> list[str]:
    return sorted(repr(r) for r in t.to_pylist())


def _run_chain(
    state: str, chain: str, batches: list[list[dict[str, Any]]], plan: dict[int, int]
) -> list[list[str]]:
    """Run ``chain`` over ``batches``; ``plan`` maps a batch to the partition count it (and
    the batches after it) run with, rescaling the state before it when the count changes."""
    fileio = FileIO(state)
    wm = WatermarkSpec(WATERMARKS.get(chain, {"input": 5000}))
    out = []
    partitions = plan[0]
    for b, rows in enumerate(batches):
        want = plan.get(b, partitions)
        stages = CHAINS[chain]()
        if want != partitions:
            with pytest.raises(PartitionCountError):
                LocalQuery(fileio, stages, partitions=want, watermark=wm)
            for s in stages:
                rescale(
                    fileio,
                    s.op.name,
                    partitions=want,
                    keys=list(s.keys),
                    partition_of=lambda t, n=want, keys=list(s.keys): partition_ids(t, keys, n),
                    version=b - 1,
                )
            partitions = want
        store_pool().clear()  # a fresh worker: state from storage
        q = LocalQuery(fileio, stages, partitions=partitions, watermark=wm)
        out.append(_norm(q.run(b, _table(rows))))
    return out


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("seed", range(3))
def test_operator_chains_rescaled_4_7_2_equal_unrescaled(
    tmp_path: Path, chain: str, seed: int
) -> None:
    batches = _batches(seed)
    want = _run_chain(str(tmp_path / "plain"), chain, batches, {0: 4})
    got = _run_chain(str(tmp_path / "rescaled"), chain, batches, {0: 4, 3: 7, 5: 2})
    assert any(want), f"seed {seed}: no output proves nothing"
    for b, (w, g) in enumerate(zip(want, got)):
        assert g == w, f"{chain}, seed {seed}, batch {b}"


def test_rescale_requests_are_bounded_by_files_not_keys(root: Location) -> None:
    """One LIST (the layout records), one GET per old manifest and run file at most, and
    PUTs for the new files only: no request per key, no listing of data."""
    fileio = FileIO(root)
    v = write_state(fileio, 3, seed=6)
    files = 0
    for q in range(3):
        with Snapshot(fileio, OP, q, v) as snap:
            files += sum(len(e.runs) + len(e.ttl_runs) for e in snap.manifest.tables.values())
    fresh = FileIO(root)  # its own counters, no cached reads
    before = fresh.stats.snapshot()
    done = rescale(fresh, OP, partitions=4, keys=["k"], partition_of=by_k(4), version=v)
    got = {k: fresh.stats.snapshot()[k] - before[k] for k in before}
    assert got["list"] == 1, got
    assert got["get"] <= 1 + 3 + files + 2, (got, files)  # operator.json, manifests, runs
    # per new store and table at most a data run, a sealed run and a TTL index run, then its
    # manifest; the record, the conditional-write probe: far fewer than the rows moved
    assert got["put"] <= 4 * (3 * 5 + 1) + 1 + 2, got
    assert got["put"] < done.rows / 2, (got, done.rows)


def test_rescale_as_a_later_version_continues_from_it(tmp_path: Path) -> None:
    """Spark's offline repartition commits a batch of its own (measured on PySpark 4.3: a
    checkpoint with batches 0..v gets offsets and commits v + 1): the rescaled stores then
    hold the rows as version v + 1, the next batch v + 2 opens them there."""
    fileio = FileIO(str(tmp_path / "s"))
    v = write_state(fileio, 3, seed=7)
    before = rows_of(fileio, 3, v, "")
    new = rescale(
        fileio, OP, partitions=2, keys=["k"], partition_of=by_k(2), version=v, as_version=v + 1
    ).layout
    assert new.since == v + 1
    assert in_force(read_layouts(fileio, OP), v).generation == 0
    assert in_force(read_layouts(fileio, OP), v + 1) == new
    assert rows_of(fileio, 2, v + 1, new.dir) == before
    store = PartitionStore.open(fileio, OP, 1, v + 1, layout=new.dir)
    store.commit(v + 2)
    store.close()
    with pytest.raises(ConfigError):
        rescale(fileio, OP, partitions=3, keys=["k"], partition_of=by_k(3), version=v, as_version=0)


def test_merged_operator_meta_unions_lists_of_numbers() -> None:
    """Per-partition summaries (the window operator's open panes) merge to their union, so
    every new partition's summary covers the panes it may hold; a partition without one makes
    the merged one unknown."""
    from fsstate.store.record import merge_operator_meta as merge_meta

    merged = merge_meta([{"open_panes_us": [10, 30], "w": 1}, {"open_panes_us": [20, 10], "w": 5}])
    assert merged == {"open_panes_us": [10, 20, 30], "w": 5}
    assert merge_meta([{"open_panes_us": [10]}, {"open_panes_us": None}]) == {"open_panes_us": None}
    assert merge_meta([{"open_panes_us": None}, {"open_panes_us": [10]}]) == {"open_panes_us": None}


def test_superseded_generations_and_dead_rescale_directories_are_collected(
    tmp_path: Path,
) -> None:
    """The collection (``fsstate gc``) deletes a dead rescale's directory at once (grace 0),
    keeps of the old generation what the new one's retained history reaches below its first
    version, and the rest once the new one's history no longer reaches it; never what the
    generation in force holds."""
    fileio = FileIO(str(tmp_path / "s"))
    v = write_state(fileio, 3, seed=5)
    before = rows_of(fileio, 3, v - 1, "")
    faulty = FaultyBackend(fileio.backend, fail_at=4)
    fileio.backend = faulty  # type: ignore[assignment]
    with pytest.raises((StorageError, CommitError)):
        rescale(fileio, OP, partitions=4, keys=["k"], partition_of=by_k(4), version=v)
    fileio.backend = faulty.inner
    new = rescale(fileio, OP, partitions=4, keys=["k"], partition_of=by_k(4), version=v).layout
    lease_book().rotate()  # what was written is no writer's pending output any more
    lease_book().keep()
    got = collect(fileio, OP, retain=2, grace_ms=0, abandoned_ms=0)
    assert len({d.split("/")[1] for d in got.dead_dirs}) == 1  # the dead rescale's
    assert rows_of(fileio, 3, v - 1, "") == before  # in the new generation's history: kept
    assert collect(fileio, OP, retain=2, grace_ms=0, abandoned_ms=0).files == 0
    config = StoreConfig(retain_versions=2)
    for p in range(4):
        for w in (v + 1, v + 2):
            store = PartitionStore.open(fileio, OP, p, w - 1, config, layout=new.dir)
            store.set_time(1_000_000 + 1000 * w)
            store.commit(w)
            store.close()
    live = rows_of(fileio, 4, v + 2, new.dir)
    lease_book().rotate()
    lease_book().keep()
    got = collect(fileio, OP, retain=2, grace_ms=0, abandoned_ms=0)
    assert got.files > 0 and got.dead_dirs == ()
    assert not [f for f in (tmp_path / "s" / OP).glob("[0-9]/**/*") if f.is_file()]
    assert rows_of(fileio, 4, v + 2, new.dir) == live
    assert [x.generation for x in read_layouts(fileio, OP)] == [0, 1]  # records stay
    with pytest.raises(VersionNotFoundError):
        rows_of(fileio, 3, v - 1, "")
