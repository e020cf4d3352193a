"""``spark.read.format("fsstate")`` / ``"fsstate-metadata"`` against what a tiered processor saw.

The processor (:class:`Ledger`) outputs, for every key of every batch, its whole state after
the batch (every key is in every batch), so the state at batch ``b`` is known exactly. The
reader at every batch id must return it (value, list flattened and nested, map flattened and
nested); the change feed between two batch ids must replay one snapshot into the other; the
Arrow reader of the engine, queried with DuckDB, must give the same rows.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from devkit.spark_local import session_conf
from fsstate import PartitionStore, read_table
from fsstate.inspect import find_stores
from fsstate_spark import register_sources, tiered
from fsstate_spark.pyspark import FILTERS_PUSHDOWN
from fsstate_spark.settings import default_state_uri, spark_settings
from tests.support.inspect_processors import LEDGER_SCHEMA, NOOP, Ledger
from tests.support.stream import StreamRunner

pytestmark = pytest.mark.compat  # every other minor runs it (devkit/compat_matrix.py)

KEYS = ["a", "b", "c", "d", "e"]
BATCHES = 5


def _batches(seed: int) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(BATCHES):
        rows = [{"k": k, "v": NOOP} for k in KEYS]  # every key reports every batch
        for _ in range(14):
            v = rng.choice([0, 1, 2, 3, 4, 5, 7, -1, -2, -3, -4, -5])
            rows.append({"k": rng.choice(KEYS), "v": v})
        out.append(rows)
    return out


def _seen(rows: list[tuple[Any, ...]]) -> dict[int, dict[str, tuple[Any, ...]]]:
    by_batch: dict[int, dict[str, tuple[Any, ...]]] = defaultdict(dict)
    for batch_id, k, total, events, tags in rows:
        by_batch[batch_id][k] = (total, events, tags)
    return by_batch


def _read(spark: SparkSession, checkpoint: Path, var: str, **options: Any) -> list[Any]:
    reader = spark.read.format("fsstate").option("path", str(checkpoint))
    reader = reader.option("stateVarName", var)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load().collect()


@pytest.fixture(scope="module")
def ledger_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[int, dict[str, tuple[Any, ...]]]]:
    root = tmp_path_factory.mktemp("ledger")
    runner = StreamRunner(spark, root)
    seed = 20261124
    print(f"seed {seed}")
    rows = runner.run(tiered(Ledger()), _batches(seed), LEDGER_SCHEMA, name="ledger")
    register_sources(spark)
    return root / "ledger" / "checkpoint", _seen(rows)


def test_every_batch_reads_what_the_processor_saw(
    spark: SparkSession, ledger_run: tuple[Path, dict[int, dict[str, tuple[Any, ...]]]]
) -> None:
    checkpoint, seen = ledger_run
    assert sorted(seen) == list(range(BATCHES))
    for b in range(BATCHES):
        want = seen[b]
        flat_values = _read(spark, checkpoint, "total", batchId=b)
        totals = {r.key.k: r.value.n for r in flat_values}
        assert totals == {k: t for k, (t, _, _) in want.items() if t is not None}, b
        # value state unflattened: the same rows (as Spark's statestore reader)
        unflat = _read(spark, checkpoint, "total", batchId=b, flattenCollectionTypes="false")
        assert sorted(unflat) == sorted(flat_values), b

        nested = _read(spark, checkpoint, "events", batchId=b, flattenCollectionTypes="false")
        lists = {r.key.k: ",".join(str(e.e) for e in r.list_value) for r in nested}
        assert lists == {k: ev for k, (_, ev, _) in want.items() if ev}, b
        flat = _read(spark, checkpoint, "events", batchId=b, includeSequence="true")
        by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for r in flat:
            by_key[r.key.k].append((r._seq, r.list_element.e))
        assert {k: ",".join(str(e) for _, e in sorted(v)) for k, v in by_key.items()} == lists

        entries = _read(spark, checkpoint, "tags", batchId=b)
        tags: dict[str, list[str]] = defaultdict(list)
        for r in sorted(entries, key=lambda r: (r.key.k, r.user_map_key.u)):
            tags[r.key.k].append(f"{r.user_map_key.u}:{r.user_map_value.c}")
        assert {k: ";".join(v) for k, v in tags.items()} == {
            k: tg for k, (_, _, tg) in want.items() if tg
        }, b
        maps = _read(spark, checkpoint, "tags", batchId=b, flattenCollectionTypes="false")
        nested_tags = {
            r.key.k: ";".join(f"{u.u}:{c.c}" for u, c in sorted(r.map_value.items())) for r in maps
        }
        assert nested_tags == {k: ";".join(v) for k, v in tags.items()}


def _apply(snapshot: dict[Any, Any], feed: list[Any], unit: Any, value: Any) -> dict[Any, Any]:
    out = dict(snapshot)
    for r in sorted(feed, key=lambda r: r.batch_id):
        if r.change_type == "update":
            out[unit(r)] = value(r)
        else:
            assert r.change_type == "delete", r
            out.pop(unit(r))
    return out


def test_change_feed_replays_one_snapshot_into_another(
    spark: SparkSession, ledger_run: tuple[Path, dict[int, dict[str, tuple[Any, ...]]]]
) -> None:
    checkpoint, _ = ledger_run
    _check_value_change_feed(spark, checkpoint, BATCHES - 1)
    _check_map_change_feed(spark, checkpoint)
    _check_list_change_feed(spark, checkpoint)


def _check_value_change_feed(spark: SparkSession, checkpoint: Path, last: int) -> None:
    """Value state: batch 0 plus the feed of batches 1..last gives batch last; a delete's
    value is null."""

    def value_unit(r: Any) -> Any:
        return (r.partition_id, r.key.k)

    base = {value_unit(r): r.value.n for r in _read(spark, checkpoint, "total", batchId=0)}
    feed = _read(
        spark,
        checkpoint,
        "total",
        readChangeFeed="true",
        changeStartBatchId=1,
        changeEndBatchId=last,
    )
    assert {r.batch_id for r in feed} <= set(range(1, last + 1)) and feed
    end = {value_unit(r): r.value.n for r in _read(spark, checkpoint, "total", batchId=last)}
    assert _apply(base, feed, value_unit, lambda r: r.value.n) == end
    # a delete's value is null, not a struct of nulls (as Spark's feed): `value IS NULL` finds it
    deletes = [r for r in feed if r.change_type == "delete"]
    assert deletes and all(r.value is None for r in deletes)
    assert all(r.value is not None for r in feed if r.change_type == "update")
    df = (
        spark.read.format("fsstate")
        .option("path", str(checkpoint))
        .option("stateVarName", "total")
        .option("readChangeFeed", "true")
        .option("changeStartBatchId", "1")
        .load()
    )
    assert df.where("value IS NULL").count() == len(deletes)


def _check_map_change_feed(spark: SparkSession, checkpoint: Path) -> None:
    """Map state: batch 1 plus the feed from batch 2 gives the latest version."""

    def map_unit(r: Any) -> Any:
        return (r.partition_id, r.key.k, r.user_map_key.u)

    base = {map_unit(r): r.user_map_value.c for r in _read(spark, checkpoint, "tags", batchId=1)}
    feed = _read(spark, checkpoint, "tags", readChangeFeed="true", changeStartBatchId=2)
    end = {map_unit(r): r.user_map_value.c for r in _read(spark, checkpoint, "tags")}
    assert _apply(base, feed, map_unit, lambda r: r.user_map_value.c) == end
    map_deletes = [r for r in feed if r.change_type == "delete"]
    assert map_deletes and all(r.user_map_value is None for r in map_deletes)
    assert all(r.user_map_key is not None for r in map_deletes)  # the entry that went


def _check_list_change_feed(spark: SparkSession, checkpoint: Path) -> None:
    """List state (with sequence numbers): batch 0 plus the feed from batch 1 gives the
    latest version."""

    def list_unit(r: Any) -> Any:
        return (r.partition_id, r.key.k, r._seq)

    base = {
        list_unit(r): r.list_element.e
        for r in _read(spark, checkpoint, "events", batchId=0, includeSequence="true")
    }
    feed = _read(
        spark,
        checkpoint,
        "events",
        readChangeFeed="true",
        changeStartBatchId=1,
        includeSequence="true",
    )
    end = {
        list_unit(r): r.list_element.e
        for r in _read(spark, checkpoint, "events", includeSequence="true")
    }
    assert _apply(base, feed, list_unit, lambda r: r.list_element.e) == end


def test_arrow_reader_with_duckdb_gives_the_same_rows(
    spark: SparkSession, ledger_run: tuple[Path, dict[int, dict[str, tuple[Any, ...]]]]
) -> None:
    checkpoint, seen = ledger_run
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    settings = spark_settings()  # where tiered() put the state: the session's state URI
    state_uri = settings.get("state_uri") or default_state_uri(settings.get("_checkpoint_location"))
    root = f"{state_uri}/{query_id}"
    stores = find_stores(root, operator="Ledger")
    assert stores
    for b in (1, BATCHES - 1):
        totals = pa.concat_tables(
            [read_table(root, "Ledger", s.partition, "total", b) for s in stores]
        )
        con = duckdb.connect()
        con.register("totals", totals)
        got = dict(con.sql("select k, n from totals").fetchall())
        spark_rows = {r.key.k: r.value.n for r in _read(spark, checkpoint, "total", batchId=b)}
        assert got == spark_rows
        events = pa.concat_tables(
            [read_table(root, "Ledger", s.partition, "events", b, with_seq=True) for s in stores]
        )
        con.register("events", events)
        lists = dict(
            con.sql(
                "select k, string_agg(cast(e as varchar), ',' order by _seq) from events group by k"
            ).fetchall()
        )
        assert lists == {k: ev for k, (_, ev, _) in seen[b].items() if ev}


def test_metadata_and_partition_pushdown(
    spark: SparkSession, ledger_run: tuple[Path, dict[int, dict[str, tuple[Any, ...]]]]
) -> None:
    checkpoint, _ = ledger_run
    meta = spark.read.format("fsstate-metadata").option("path", str(checkpoint)).load()
    rows = meta.collect()
    partitions = {r.partition_id for r in rows}
    assert {(r.state_var_name, r.state_kind) for r in rows} == {
        ("total", "value"),
        ("events", "list"),
        ("tags", "map"),
    }
    assert len(rows) == 3 * len(partitions)
    assert {r.max_batch_id for r in rows} == {BATCHES - 1}
    assert all(r.operator_name == "Ledger" and r.disk_bytes > 0 for r in rows)

    everything = _read(spark, checkpoint, "total")
    target = min(partitions)
    key = "spark.sql.python.filterPushdown.enabled"
    with session_conf(spark, **{key: "true"}):
        register_sources(spark)
        df = (
            spark.read.format("fsstate")
            .option("path", str(checkpoint))
            .option("stateVarName", "total")
            .load()
            .filter(f"partition_id = {target}")
        )
        # the other stores were pruned (PySpark 4.0 has no pushdown: every store is read)
        assert df.rdd.getNumPartitions() == (1 if FILTERS_PUSHDOWN else len(partitions))
        got = sorted((r.key.k, r.value.n) for r in df.collect())
        assert got == sorted((r.key.k, r.value.n) for r in everything if r.partition_id == target)
    register_sources(spark)


def test_bad_options_raise_typed_errors(
    spark: SparkSession, ledger_run: tuple[Path, dict[int, dict[str, tuple[Any, ...]]]]
) -> None:
    checkpoint, _ = ledger_run
    with pytest.raises(Exception, match="several state variables"):
        spark.read.format("fsstate").option("path", str(checkpoint)).load()
    with pytest.raises(Exception, match="no state variable 'nope'"):
        _read(spark, checkpoint, "nope")
    with pytest.raises(Exception, match="changeStartBatchId"):
        _read(spark, checkpoint, "total", readChangeFeed="true")


def test_typed_state_reads_back_exactly(spark: SparkSession, tmp_path: Path) -> None:
    """Timestamps (with and without time zone), dates, decimals, binary and nulls: the
    declared schema is the batches' schema and values come back unchanged."""
    key_schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("id", pa.int32())])
    value_schema = pa.schema(
        [
            ("at", pa.timestamp("us")),
            ("day", pa.date32()),
            ("amount", pa.decimal128(12, 3)),
            ("blob", pa.binary()),
            ("x", pa.float64()),
        ]
    )
    t0 = dt.datetime(2026, 11, 24, 6, 0, tzinfo=dt.UTC)
    rows = {
        (t0, 1): (
            dt.datetime(2026, 1, 2, 3, 4, 5, 6),
            dt.date(2026, 1, 2),
            Decimal("1.250"),
            b"\x00\xff",
            0.5,
        ),
        (t0 + dt.timedelta(seconds=1), 2): (None, None, None, None, None),
    }
    store = PartitionStore.open(str(tmp_path / "q1"), "Typed", 0)
    table = store.value_table("v", value_schema, key_schema)
    for k, v in rows.items():
        table.update(k, v)
    store.commit(0)
    store.close()
    register_sources(spark)
    df = spark.read.format("fsstate").option("path", str(tmp_path)).load()
    assert [f.name for f in df.schema.fields] == ["key", "value", "partition_id"]
    got = {(r.key.ts.astimezone(dt.UTC), r.key.id): tuple(r.value) for r in df.collect()}
    assert got == rows


def test_a_large_store_is_read_in_key_ranges(spark: SparkSession, tmp_path: Path) -> None:
    """A store above ``partitionBytes`` is read as several input partitions (key ranges cut
    at row-group starts of its files): the rows equal the one-partition read and the engine's
    reader, and every key's map entries come from one range (unflattened: a row per key)."""
    rng = np.random.default_rng(7)
    alphabet = np.frombuffer(
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "S1"
    )
    key_schema, ukey_schema = pa.schema([("k", pa.int64())]), pa.schema([("u", pa.int32())])
    value_schema = pa.schema([("pad", pa.string())])
    n_keys, entries = 12_000, 2

    def pads(n: int) -> pa.Array:
        raw = rng.choice(alphabet, size=(n, 300)).view("S300").ravel()
        return pa.array(raw.astype(str))

    for part, keys in ((0, n_keys), (1, 50)):
        store = PartitionStore.open(str(tmp_path / "q1"), "Big", part)
        m = store.map_table("tags", ukey_schema, value_schema, key_schema)
        ids = np.repeat(np.arange(keys, dtype=np.int64), entries)
        users = np.tile(np.arange(entries, dtype=np.int32), keys)
        m.put_many(pa.table({"k": ids}), pa.table({"u": users}), pa.table({"pad": pads(len(ids))}))
        store.commit(0)
        # a second run over the first: a third of the entries rewritten, a tenth deleted
        pick = rng.random(len(ids))
        upd, dele = pick < 1 / 3, pick > 0.9
        m.put_many(
            pa.table({"k": ids[upd]}),
            pa.table({"u": users[upd]}),
            pa.table({"pad": pads(int(upd.sum()))}),
        )
        m.delete_many(pa.table({"k": ids[dele]}), pa.table({"u": users[dele]}))
        store.commit(1)
        store.close()
    register_sources(spark)

    def load(**options: Any) -> Any:
        reader = spark.read.format("fsstate").option("path", str(tmp_path))
        for name, value in options.items():
            reader = reader.option(name, str(value))
        return reader.load()

    whole = load()
    split = load(partitionBytes=2 * 2**20)
    assert whole.rdd.getNumPartitions() == 2
    assert split.rdd.getNumPartitions() > 3, split.rdd.getNumPartitions()

    def rows(df: Any) -> list[tuple[Any, ...]]:
        return sorted(
            (r.partition_id, r.key.k, r.user_map_key.u, r.user_map_value.pad) for r in df.collect()
        )

    got = rows(split)
    assert got == rows(whole)
    engine = read_table(str(tmp_path / "q1"), "Big", 0, "tags")
    want = sorted(zip(engine["k"].to_pylist(), engine["u"].to_pylist(), engine["pad"].to_pylist()))
    assert [r[1:] for r in got if r[0] == 0] == want
    nested = load(partitionBytes=2 * 2**20, flattenCollectionTypes="false")
    keyed = [(r.partition_id, r.key.k) for r in nested.collect()]
    assert len(keyed) == len(set(keyed)) == len({r[:2] for r in got}), "a key was split"
    with pytest.raises(Exception, match="partitionBytes must be > 0"):
        load(partitionBytes=0).collect()
