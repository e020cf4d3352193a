"""Spilling under a memory budget, pruned reads of spilled runs, and compaction."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from fsstate import PartitionStore, StoreConfig
from fsstate.config import EngineConfig
from fsstate.controller import MemoryController
from fsstate.storage.manifest import LINEAGE_STEPS_MAX, list_versions, read_manifest
from fsstate.tables import ListTable, ValueTable
from tests.support.engine import KEY, UKEY, VAL

Factory = Callable[..., PartitionStore]


@pytest.fixture
def small_controller() -> Iterator[MemoryController]:
    """A private controller with a 4 MiB budget and no background thread."""
    yield MemoryController(
        EngineConfig(
            memory_limit_bytes=4 * 1024 * 1024,
            check_every_growth=64,
            compaction_max_runs=4,
            background_compaction=False,
        )
    )


def _open(
    tmp_path: Path, ctl: MemoryController, version: int | None = None, part: int = 0
) -> PartitionStore:
    store = PartitionStore.open(
        str(tmp_path / "state"), "op", part, version, StoreConfig(row_group_bytes=64 * 1024)
    )
    # rebind to the private controller
    store.controller.unregister(store)
    store.controller = ctl
    store.ctx.cache = ctl.cache
    ctl.register(store)
    store.set_time(1_000)
    return store


def test_spill_keeps_memory_bounded_and_data_correct(
    tmp_path: Path, small_controller: MemoryController
) -> None:
    ctl = small_controller
    s = _open(tmp_path, ctl)
    v = s.value_table("v", VAL, KEY)
    m = s.map_table("m", UKEY, VAL, KEY)
    lst = s.list_table("l", VAL, KEY)
    n = 20_000
    payload = "p" * 200
    for i in range(n):
        v.update((f"k{i}",), (i, payload))
        if i % 4 == 0:
            m.update((f"k{i % 500}",), (f"u{i}",), (i, "m"))
            lst.append((f"k{i % 300}",), (i, "l"))
        if i % 500 == 0:
            assert ctl.usage_bytes() < 2 * ctl.config.memory_limit_bytes
    assert ctl.spills > 0 and s.spills > 0
    assert max(len(t.runs) for t in (v, m, lst)) > 1
    for i in random.Random(1).sample(range(n), 500):
        assert v.get((f"k{i}",)) == (i, payload)
    s.commit(0)
    s.compact(force=True)
    s.commit(1)
    s.close()
    r = _open(tmp_path, ctl, 1)
    v2 = r.value_table("v", VAL, KEY)
    m2 = r.map_table("m", UKEY, VAL, KEY)
    l2 = r.list_table("l", VAL, KEY)
    for i in range(0, n, 7):
        assert v2.get((f"k{i}",)) == (i, payload)
    assert m2.get(("k0",), ("u0",)) == (0, "m")
    assert len(list(m2.items(("k4",)))) == len([i for i in range(0, n, 4) if i % 500 == 4])
    assert l2.get(("k8",)) == [(i, "l") for i in range(0, n, 4) if i % 300 == 8]


def test_point_lookup_touches_few_row_groups(
    tmp_path: Path, small_controller: MemoryController
) -> None:
    ctl = small_controller
    s = _open(tmp_path, ctl)
    v = s.value_table("v", VAL, KEY)
    keys = pa.table({"user": [f"k{i:06d}" for i in range(100_000)]})
    vals = pa.table({"count": list(range(100_000)), "label": ["x" * 50] * 100_000})
    v.put_many(keys, vals)
    s.commit(0)
    s.close()
    r = _open(tmp_path, ctl, 0)
    v2 = r.value_table("v", VAL, KEY)
    before = ctl.cache.stats()
    assert v2.get(("k050000",)) == (50_000, "x" * 50)
    assert v2.get(("nope",)) is None  # pruned by the Bloom filter: no row group read
    after = ctl.cache.stats()
    assert after.misses - before.misses == 1  # exactly one row group decoded


def test_compaction_drops_shadowed_and_tombstoned_rows(
    tmp_path: Path, small_controller: MemoryController
) -> None:
    s = _open(tmp_path, small_controller)
    v = s.value_table("v", VAL, KEY)
    m = s.map_table("m", UKEY, VAL, KEY)
    for version in range(6):
        for i in range(50):
            v.update((f"k{i}",), (version, "x"))
            m.update((f"k{i}",), (f"u{version % 2}",), (version, "y"))
        v.clear(("k0",))
        m.remove(("k1",), ("u0",))
        s.commit(version)
    rows_before = sum(r.rows for r in v.runs)
    s.compact(force=True)
    assert len(v.runs) == 1 and len(m.runs) == 1
    # k0's tombstone is newer than versions a copy may catch up from: kept at the bottom
    assert v.runs[0].rows == 50 < rows_before
    s.commit(6)
    for version in range(7, 7 + LINEAGE_STEPS_MAX):  # the lineage moves past the tombstone
        s.commit(version)
    v.update(("k7",), (5, "x"))  # a second run, so that there is something to merge
    s.commit(7 + LINEAGE_STEPS_MAX)
    s.compact(force=True)
    assert len(v.runs) == 1 and v.runs[0].rows == 49  # k0 cleared at the bottom: gone
    s.commit(8 + LINEAGE_STEPS_MAX)
    r = _open(tmp_path, small_controller, 8 + LINEAGE_STEPS_MAX)
    v2, m2 = r.value_table("v", VAL, KEY), r.map_table("m", UKEY, VAL, KEY)
    assert v2.get(("k0",)) is None and v2.get(("k7",)) == (5, "x")
    assert list(m2.items(("k1",))) == [(("u1",), (5, "y"))]
    assert sorted(m2.items(("k2",))) == [(("u0",), (4, "y")), (("u1",), (5, "y"))]


def _write_epoch(
    rng: random.Random,
    v: ValueTable,
    lst: ListTable,
    model: dict[str, int],
    lists: dict[str, list[int]],
    version: int,
) -> None:
    """60 random updates, clears and appends of epoch ``version``, on the tables and the models."""
    for _ in range(60):
        k = f"k{rng.randrange(80)}"
        op = rng.random()
        if op < 0.6:
            model[k] = rng.randrange(1000)
            v.update((k,), (model[k], "x"))
        elif op < 0.7:
            model.pop(k, None)
            v.clear((k,))
        else:
            lists.setdefault(k, []).append(version)
            lst.append((k,), (version, "l"))


def _check_reopened(
    tmp_path: Path,
    ctl: MemoryController,
    s: PartitionStore,
    model: dict[str, int],
    lists: dict[str, list[int]],
) -> None:
    """Version 40 reopened holds the models' rows, and every retained manifest's files exist."""
    r = _open(tmp_path, ctl, 40)
    v2, l2 = r.value_table("v", VAL, KEY), r.list_table("l", VAL, KEY)
    assert {k for (k,) in v2.keys()} == set(model)
    for k, val in model.items():
        assert v2.get((k,)) == (val, "x")
    for k, items in lists.items():
        assert [x for x, _ in l2.get((k,))] == items
    # no retained manifest references a file that is gone (compaction deletes nothing)
    root = tmp_path / "state"
    present = {p.relative_to(root / s.store_dir).as_posix() for p in root.rglob("*.parquet")}
    for version in list_versions(s.fileio, s.store_dir):
        assert read_manifest(s.fileio, s.store_dir, version).files() <= present


def test_compaction_racing_commits_and_reads(tmp_path: Path) -> None:
    """A background compactor merges while the owner writes, reads and commits."""
    ctl = MemoryController(
        EngineConfig(
            memory_limit_bytes=64 * 1024 * 1024, compaction_max_runs=3, background_compaction=True
        )
    )
    s = _open(tmp_path, ctl)
    s.config = StoreConfig(retain_versions=4)
    v = s.value_table("v", VAL, KEY)
    lst = s.list_table("l", VAL, KEY)
    model: dict[str, int] = {}
    lists: dict[str, list[int]] = {}
    rng = random.Random(7)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        # concurrent cold reads through a second store object on the same files
        while not stop.is_set():
            try:
                versions = list_versions(s.fileio, s.store_dir)
                if versions:
                    read_manifest(s.fileio, s.store_dir, versions[-1])
            except Exception as exc:
                if "does not exist" not in str(exc):
                    errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for version in range(40):
            _write_epoch(rng, v, lst, model, lists, version)
            s.commit(version)
            for t_ in (v, lst):
                t_.evict_clean()  # force cold reads against runs being compacted
            for k in rng.sample(sorted(model), min(10, len(model))):
                assert v.get((k,)) == (model[k], "x"), (version, k)
        ctl.compactor().wait_idle()
    finally:
        stop.set()
        t.join()
    assert not errors
    assert ctl.compactor().rounds > 0 and ctl.compactor().errors == 0
    s.commit(40)
    _check_reopened(tmp_path, ctl, s, model, lists)


def test_append_to_cold_list_does_not_load_it(
    tmp_path: Path, small_controller: MemoryController
) -> None:
    """Appending needs no existing element: a cold list is not read until someone reads it."""
    s = _open(tmp_path, small_controller)
    lst = s.list_table("l", VAL, KEY)
    for i in range(300):
        lst.append(("big",), (i, "old"))
    s.commit(0)
    lst.evict_clean()
    before = small_controller.cache.stats()
    lst.append(("big",), (300, "new"))
    lst.extend(("big",), [(301, "new")])
    after = small_controller.cache.stats()
    assert (after.hits, after.misses) == (before.hits, before.misses)  # nothing read
    s.commit(1)
    lst.evict_clean()
    lst.append(("big",), (302, "newer"))
    got = lst.get(("big",))
    assert [v for v, _ in got] == list(range(303))
    r = _open(tmp_path, small_controller, 1)
    assert len(r.list_table("l", VAL, KEY).get(("big",))) == 302


def test_compaction_of_a_copy_whose_files_were_retired_is_skipped_not_an_error(
    tmp_path: Path,
) -> None:
    """An idle copy older than the retained versions cannot compact (its files are gone): the
    background round says so at INFO and counts a stale skip, not an error."""
    ctl = MemoryController(
        EngineConfig(
            memory_limit_bytes=64 * 1024 * 1024, compaction_max_runs=2, background_compaction=True
        )
    )
    old = _open(tmp_path, ctl)
    old.config = StoreConfig(retain_versions=2, row_group_bytes=64 * 1024)
    v = old.value_table("v", VAL, KEY)
    for version in range(2):
        v.update((f"k{version}",), (version, "x"))
        v.update(("z",), (version, "x"))  # runs whose key spans overlap: compaction has work
        old.commit(version)
    old.release_segments()  # the copy's runs are on disk only
    new = _open(tmp_path, ctl, 1)
    new.config = StoreConfig(retain_versions=2, row_group_bytes=64 * 1024)
    nv = new.value_table("v", VAL, KEY)
    for version in range(2, 6):  # retention deletes the files only version 0/1 referenced
        nv.update(("k0",), (version, "y"))
        new.compact(force=True)
        new.commit(version)
    assert any(
        r.ref is not None and not new.fileio.exists(f"{new.store_dir}/{r.ref.path}") for r in v.runs
    )
    v.update(("k9",), (9, "z"))
    v.update(("a",), (9, "z"))
    v.seal()  # a third run: the idle copy now has something to merge
    ctl.cache.shrink_to(0)  # what this process read of the retired files is gone too
    comp = ctl.compactor()
    errors_before = comp.errors
    assert comp.request(v)
    comp.wait_idle()
    assert comp.errors == errors_before
    assert comp.stale_skips == 1


def test_a_round_whose_store_closes_and_vanishes_is_abandoned_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A background round of a store closed (and its directory deleted) while it merges fails
    on real files; it is counted as abandoned and logged at INFO, not as an error."""
    import logging
    import shutil

    from fsstate.storage import local as local_mod

    ctl = MemoryController(
        EngineConfig(
            memory_limit_bytes=64 * 1024 * 1024, compaction_max_runs=2, background_compaction=True
        )
    )
    s = _open(tmp_path, ctl)
    v = s.value_table("v", VAL, KEY)
    real_publish = local_mod.LocalBackend._publish

    def close_then_publish(self: local_mod.LocalBackend, tmp: str, target: str) -> None:
        if threading.current_thread().name == "fsstate-compaction":
            s.close()  # the store goes away while the merged run is being published
            shutil.rmtree(tmp_path / "state")
        real_publish(self, tmp, target)

    monkeypatch.setattr(local_mod.LocalBackend, "_publish", close_then_publish)
    comp = ctl.compactor()
    errors_before, abandoned_before = comp.errors, comp.abandoned
    with caplog.at_level(logging.INFO, logger="fsstate"):
        for version in range(3):  # the third run passes compaction_max_runs: a round starts
            v.update((f"k{version}",), (version, "x"))
            v.update(("z",), (version, "x"))  # overlapping key spans: one key in every run
            s.commit(version)
        comp.wait_idle()
    assert s.closed
    assert comp.errors == errors_before
    assert comp.abandoned == abandoned_before + 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("abandoned" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streamed_merge_equals_the_in_memory_merge(
    tmp_path: Path, small_controller: MemoryController, seed: int
) -> None:
    """merge_stream, a few row groups at a time, yields exactly merge_segments' rows, in key
    order and with every key whole in one part; a streamed compaction reads back the same."""
    from fsstate.compaction import merge_segments, merge_stream
    from fsstate.format.segment import Segment

    rng = random.Random(seed)
    s = _open(tmp_path, small_controller)
    v = s.value_table("v", VAL, KEY)
    m = s.map_table("m", UKEY, VAL, KEY)

    def noise() -> str:  # incompressible: the files are read by row group
        return rng.randbytes(rng.randint(100, 400)).hex()

    for version in range(5):  # overlapping keys, clears, deletes, several row groups per run
        for _ in range(rng.randint(300, 900)):
            k = (f"k{rng.randrange(700):04d}",)
            r = rng.random()
            if r < 0.05:
                v.clear(k)
                m.clear(k)
            elif r < 0.15:
                m.remove(k, (f"u{rng.randrange(4)}",))
            else:
                v.update(k, (version, noise()))
                m.update(k, (f"u{rng.randrange(4)}",), (version, noise()))
        s.commit(version)
    for t in (v, m):
        t.release_segments()
        assert all(r.ref is not None and not r.in_memory for r in t.runs)
        for bottom, horizon in ((False, None), (True, None), (True, t.runs[2].min_seq)):
            runs = t.runs[1:] if not bottom else t.runs
            segments = [seg for run in runs for seg in run.segments(t.spec, t.ctx)]
            assert len(segments) > len(runs)  # the runs are read by row group
            want = merge_segments(t.spec, segments, t.ranges, bottom, horizon)
            parts = list(merge_stream(t.spec, t.ctx, runs, t.ranges, bottom, horizon))
            got = pa.Table.from_batches(parts, schema=want.schema)
            assert got.equals(pa.Table.from_batches([want])), (t.name, bottom, horizon)
            seen: set[tuple[str, ...]] = set()
            for part in parts:  # every key whole in one part
                keys = set(Segment(t.spec, part).distinct_keys())
                assert not keys & seen
                seen |= keys
    before = {u: (v.get((u,)), sorted(m.items((u,)))) for u in (f"k{i:04d}" for i in range(700))}
    for t in (v, m):
        n = len(t.runs)
        # a one-byte round bound: no in-memory window fits, so every merge streams
        assert small_controller.compactor() is not None
        from fsstate.compaction import compact_table

        while compact_table(t, 1, 2, stream_width=2):
            pass
        assert len(t.runs) == 2 < n
    after = {u: (v.get((u,)), sorted(m.items((u,)))) for u in before}
    assert after == before
    s.commit(5)
    r = _open(tmp_path, small_controller, 5)
    v2, m2 = r.value_table("v", VAL, KEY), r.map_table("m", UKEY, VAL, KEY)
    assert {u: (v2.get((u,)), sorted(m2.items((u,)))) for u in before} == before


def test_a_compaction_round_counts_its_working_memory_in_the_budget(
    tmp_path: Path, small_controller: MemoryController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round reserves the working memory of the runs it chose (three times their decoded
    size in memory), during the round only: not the round's byte bound (3 x 1/16 of the budget),
    which for small runs made the epoch beside it spill for nothing."""
    import fsstate.compaction as compaction

    ctl = small_controller
    s = _open(tmp_path, ctl)
    v = s.value_table("v", VAL, KEY)
    for version in range(6):
        v.update((f"k{version}",), (version, "x"))
        s.commit(version)
    base = ctl.usage_bytes()
    seen: list[int] = []
    plans: list[compaction.RoundPlan] = []
    real = compaction.compact_table

    def spy(*args: object, **kwargs: object) -> int:
        seen.append(ctl.usage_bytes() - base)
        plans.append(args[6])  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compaction, "compact_table", spy)
    runs = list(v.runs)
    assert ctl.compactor().run_once(v, force=True) > 0
    (plan,) = plans
    assert not plan.streamed and plan.j - plan.i == 6
    decoded = sum(r.ref.decoded_bytes for r in runs[plan.i : plan.j] if r.ref is not None)
    assert 0 < decoded < 4 * 1024 * 1024 // 16  # six one-row runs: far below the bound
    assert seen == [plan.working_bytes] == [3 * decoded]
    assert ctl.reserved_bytes == 0


def test_a_streamed_round_reserves_two_row_groups_per_run_at_most() -> None:
    """A streamed merge holds about two segments per run, each at most a row group."""
    from fsstate.compaction import plan_round
    from fsstate.format.refs import FileRef
    from fsstate.storage.runs import Run

    mib = 1024 * 1024
    runs = [
        Run(None, FileRef(f"r{i}.parquet", 10, 100, arrow_bytes=size))
        for i, size in enumerate([40 * mib, 30 * mib, mib // 2, 50 * mib, 60 * mib])
    ]
    # no window of two fits 1 KiB: the two adjacent runs of smallest total stream
    plan = plan_round(runs, 1024, 4, stream_width=2, row_group_bytes=mib)
    assert plan is not None and plan.streamed and (plan.i, plan.j) == (1, 3)
    assert plan.working_bytes == 3 * (2 * mib + mib // 2)
    # a window that fits is merged in memory (the longest, newest on ties: 30 + 0.5 + 50 MiB):
    # three times its decoded size
    plan = plan_round(runs, 100 * mib, 4, row_group_bytes=mib)
    assert plan is not None and not plan.streamed and (plan.i, plan.j) == (1, 4)
    assert plan.working_bytes == 3 * (80 * mib + mib // 2)
