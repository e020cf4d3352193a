"""``spark_scale``'s planning and bookkeeping without Spark: the cells and what they load, the
input and the checksums its outputs must have, the bytes of a query's files and the rows from
known records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from bench.harness.datagen import key_of
from bench.harness.operator_queries import load_values
from bench.harness.processor_queries import ChecksumSink
from bench.suites.spark_scale import SideRun
from bench.suites.spark_scale_data import (
    cell_batch,
    check_batch,
    expected_checksum,
    load_ranges,
    zipf_ids,
)
from bench.suites.spark_scale_plan import CORE, PANDAS, SIDES, Cell, plan
from bench.suites.spark_scale_rows import CellRecord, cell_rows, growth_rows
from bench.suites.spark_scale_state import (
    WorkerPeaks,
    bytes_on_disk,
    bytes_written,
    link_tree,
    listing,
    new_query_id,
)


def test_the_full_plan_loads_each_key_count_once_per_origin() -> None:
    p = plan("full")
    wanted = p.bases(list(p.cells), breakdown=True)
    assert sorted(wanted[4]) == [1_000_000, 10_000_000, 30_000_000]
    assert sorted(wanted[200]) == [10_000_000]
    assert wanted[4][30_000_000] == {"tiered_row", "tiered_pandas", "driver", "java"}
    for partitions, counts in wanted.items():
        ranges = load_ranges(list(counts), p.load_rows[partitions])
        stops = [stop for _, stop in ranges]
        assert all(count in stops for count in counts)  # a base at every count
        assert [s for s, _ in ranges] == [0, *stops[:-1]]  # each id loaded once, in order
    labels = [c.label for c in p.cells]
    assert len(labels) == len(set(labels))
    assert "30M keys, 64 MiB, Zipf 1.1, 4 partitions" in labels


@pytest.mark.parametrize("mode", ["quick", "full"])
def test_no_two_sides_of_a_cell_restart_one_query_id(mode: str) -> None:
    """Spark runs one run of a query id at a time: two sides restarting from copies of one
    origin need an id of their own."""
    for cell in plan(mode).cells:
        origins = [SIDES[s].origin for s in cell.sides if not SIDES[s].own_id]
        restarted = [o for o in origins if o is not None]
        assert len(restarted) == len(set(restarted)), cell.label


def test_the_quick_plan_is_one_small_cell_with_every_side() -> None:
    p = plan("quick")
    (cell,) = p.cells
    assert (cell.keys, cell.rows, cell.steady) == (200_000, 20_000, 2)
    assert set(cell.sides) == {*CORE, *PANDAS, "row_tiered_s3"}
    assert p.breakdown is not None and p.breakdown.base == cell.base


def test_batches_pair_across_cells_and_stay_in_range() -> None:
    a_ids, a_v = cell_batch("uniform", 3, 1000, 1_000_000)
    b_ids, b_v = cell_batch("uniform", 3, 1000, 1_000_000)
    assert np.array_equal(a_ids, b_ids) and np.array_equal(a_v, b_v)
    z = zipf_ids(np.random.default_rng(1), 20_000, 200_000)
    assert z.min() >= 0 and z.max() < 200_000
    # skewed: the most frequent key takes far more than a uniform draw's share
    assert np.bincount(z).max() > 100 * 20_000 / 200_000
    with pytest.raises(ValueError, match="share a factor"):
        zipf_ids(np.random.default_rng(1), 10, 1_000_003 * 2)


def test_the_expected_checksum_is_the_running_aggregate_of_every_row() -> None:
    keys = 50
    history = [cell_batch("zipf", i, 40, keys) for i in range(3)]
    checked = check_batch("zipf", keys, history)
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for i in range(keys):  # the load: each key once
        totals[i] = [1, int(load_values(np.array([i]))[0])]
    for ids, v in (*history, checked):
        for k, x in zip(ids.tolist(), v.tolist(), strict=True):
            totals[k][0] += 1
            totals[k][1] += x
    out = set(checked[0].tolist())
    want = (
        len(out),
        sum(totals[k][0] for k in out),
        sum(totals[k][1] for k in out),
        sum(zlib.crc32(key_of(k)[0].encode()) for k in out),
    )
    assert expected_checksum(history, checked) == want


def test_a_side_that_skips_batches_numbers_only_those_it_takes() -> None:
    cell = Cell(1_000_000, 64, "uniform", 4, 100_000, 4, 2, (*CORE, *PANDAS))
    pandas = SideRun(SIDES["pandas_tiered"], Path("/x"), 31, [0, *cell.batches("pandas_tiered"),
                     cell.check_index], ChecksumSink(set()))  # fmt: skip
    assert pandas.indices == [0, 1, 2, 5]
    assert [pandas.batch_id(i) for i in pandas.indices] == [31, 32, 33, 34]
    row = SideRun(SIDES["row_tiered"], Path("/x"), 31, [0, 1, 2, 3, 4, 5], ChecksumSink(set()))
    assert row.batch_id(cell.check_index) == 36


def test_bytes_written_counts_new_grown_and_replaced_files(tmp_path: Path) -> None:
    root = tmp_path / "q"
    (root / "input").mkdir(parents=True)
    (root / "input" / "batch.parquet").write_bytes(b"x" * 999)  # never counted
    (root / "a").write_bytes(b"1" * 10)
    (root / "b").write_bytes(b"2" * 10)
    copy = tmp_path / "copy"
    link_tree(root, copy)  # hard links: the copy's files are the base's
    assert not (copy / "input").exists()
    before = listing(copy)
    assert bytes_on_disk(before) == 20
    (copy / "c").write_bytes(b"3" * 7)  # new
    with open(copy / "a", "ab") as f:  # grown in place
        f.write(b"4" * 5)
    (copy / "b.tmp").write_bytes(b"5" * 3)
    os.replace(copy / "b.tmp", copy / "b")  # replaced under its name
    after = listing(copy)
    assert bytes_written(before, after) == 7 + 5 + 3
    assert bytes_on_disk(after) == 7 + 15 + 3


def test_worker_peaks_count_python_workers_not_the_jvm() -> None:
    """A process whose arguments name the worker module counts; one naming it inside a setting
    (as the JVM's command line does) does not."""
    code = "import time; time.sleep(30)"
    worker = subprocess.Popen([sys.executable, "-c", code, "pyspark.daemon"])
    decoy = subprocess.Popen(
        [sys.executable, "-c", code, "--conf", "spark.python.worker.module=pyspark_fsstate.worker"]
    )
    try:
        deadline = time.monotonic() + 20
        peaks = WorkerPeaks()
        while worker.pid not in peaks.peaks and time.monotonic() < deadline:
            time.sleep(0.1)
            peaks.sample()
        assert peaks.peaks.get(worker.pid, 0.0) > 1.0  # MiB: a Python interpreter's peak
        assert decoy.pid not in peaks.peaks
    finally:
        for proc in (worker, decoy):
            proc.kill()
            proc.wait()


def test_a_copy_gets_a_query_id_of_its_own(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "checkpoint").mkdir(parents=True)
    (base / "checkpoint" / "metadata").write_text('{"id":"q-1"}')
    (base / "checkpoint" / ".metadata.crc").write_bytes(b"crc")
    (base / "state" / "q-1" / "running_agg").mkdir(parents=True)
    (base / "state" / "q-1" / "running_agg" / "operator.json").write_text("{}")
    copy = tmp_path / "copy"
    link_tree(base, copy)
    query_id = new_query_id(copy)
    assert json.loads((copy / "checkpoint" / "metadata").read_text()) == {"id": query_id}
    assert not (copy / "checkpoint" / ".metadata.crc").exists()
    assert (copy / "state" / query_id / "running_agg" / "operator.json").exists()
    # the base keeps its own
    assert json.loads((base / "checkpoint" / "metadata").read_text()) == {"id": "q-1"}
    assert (base / "state" / "q-1" / "running_agg" / "operator.json").exists()


def _record(cell: Cell, scale: float) -> CellRecord:
    """Java 1000 / 1200 / ... ms per batch; each other side a multiple of it; the pandas
    reference 80 % of pandas tiered()."""
    factor = {"row_tiered": 0.9, "row_driver": 0.7, "java": 1.0, "java_changelog": 1.1,
              "pandas_tiered": 10.0, "pandas_driver": 11.0, "pandas_dict": 8.0,
              "row_tiered_s3": 1.08}  # fmt: skip
    rec = CellRecord(cell)
    for side in cell.sides:
        rec.ms[side] = {i: scale * factor[side] * (1000 + 200 * i) for i in range(cell.steady + 2)}
        rec.ms[side][0] *= 3  # the restart batch
        rec.written[side] = {i: 1 << 20 for i in range(cell.steady + 2)}
        rec.on_disk[side] = 100 << 20
    rec.written["java_changelog"] = {i: 4 << 20 for i in range(cell.steady + 2)}
    rec.on_disk["java_changelog"] = 250 << 20
    rec.peaks_mib = [250.0, 240.0, 30.0]
    return rec


def test_rows_of_a_cell_carry_their_goals() -> None:
    sides = (*CORE, *PANDAS)
    cell = Cell(30_000_000, 64, "zipf", 4, 100_000, 4, 2, sides)
    rows = {r.name: r for r in cell_rows(_record(cell, 1.0))}
    label = cell.label
    tiered = rows[f"{label}: Row tiered() / Java"]
    assert tiered.value == pytest.approx(0.9) and (tiered.goal, tiered.status) == (1.0, "pass")
    driver = rows[f"{label}: Row flow driver / Java"]
    assert (driver.goal, driver.status) == (0.8, "pass")
    restart = rows[f"{label}: Row tiered() first batch after restart / its steady batch"]
    assert restart.goal == 1.5 and restart.status == "miss"  # 3x the first steady batch
    vs_java = rows[f"{label}: Row tiered() first batch after restart / Java's"]
    assert vs_java.value == pytest.approx(0.9) and vs_java.status == "miss"
    written = rows[f"{label}: Row tiered() / Java changelog, bytes written per batch"]
    assert written.value == pytest.approx(0.25) and written.status == "pass"
    disk = rows[f"{label}: Row tiered() / Java changelog, bytes on disk"]
    assert disk.value == pytest.approx(0.4) and disk.status == "pass"
    rss = rows[f"{label}: peak worker RSS"]
    assert (rss.value, rss.goal, rss.status) == (250.0, 264.0, "pass")
    share = rows[f"{label}: pandas tiered() fsstate's share of the batch"]
    assert share.value == pytest.approx(0.2) and share.status == "pass"
    assert len(share.samples) == 2  # the pandas sides' two steady batches


def test_a_dropped_side_is_skipped_without_a_goal_and_a_missing_one_keeps_it() -> None:
    cell = Cell(10_000_000, 64, "uniform", 200, 100_000, 2, 0, CORE)
    rec = _record(cell, 1.0)
    rec.missing["java_changelog"] = "no Java query: no javac"
    rows = {r.name: r for r in cell_rows(rec)}
    pandas = rows[f"{cell.label}: pandas tiered() / Java"]
    assert (pandas.status, pandas.goal) == ("skipped", None)
    share = rows[f"{cell.label}: pandas tiered() fsstate's share of the batch"]
    assert (share.status, share.goal) == ("skipped", None)
    bytes_row = rows[f"{cell.label}: Row tiered() / Java changelog, bytes written per batch"]
    assert (bytes_row.status, bytes_row.goal) == ("skipped", 0.5)
    assert "no javac" in bytes_row.notes
    assert not any(SIDES["row_tiered_s3"].label in name for name in rows)


def test_growth_pairs_each_cell_with_the_smallest_of_its_kind() -> None:
    sides = CORE
    small = Cell(1_000_000, 64, "uniform", 4, 100_000, 3, 0, sides)
    large = Cell(30_000_000, 64, "uniform", 4, 100_000, 3, 0, sides)
    other = Cell(10_000_000, 64, "uniform", 200, 100_000, 3, 0, sides)
    recs = [_record(small, 1.0), _record(large, 1.5), _record(other, 9.0)]
    rows = {r.name: r for r in growth_rows(recs)}
    grown = rows[f"{large.label}: Row tiered() batch time / the 1M cell's"]
    assert grown.samples == pytest.approx([1.5, 1.5, 1.5])
    assert (grown.goal, grown.status) == (1.2, "miss")
    java = rows[f"{large.label}: Java batch time / the 1M cell's"]
    assert java.goal is None
    assert not any(name.startswith(small.label) or name.startswith(other.label) for name in rows)
