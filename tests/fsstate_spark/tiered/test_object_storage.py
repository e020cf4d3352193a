"""The Spark equivalence suites with state on the S3 server: the same processors, the same
micro-batches and the same output as Spark's own handles, with ``state_uri="s3://bucket/prefix"``
and the server's settings given through ``tiered(storage_options=...)`` (they reach the
workers inside the processor; the local-cluster test passes them as ``AWS_*`` variables)."""

from __future__ import annotations

from typing import Any

from devkit.s3_server import S3Info
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from tests.fsstate_spark.conftest import Tiered
from tests.support.plugin import s3_options
from tests.support.processors import (
    ORDER_BATCHES,
    ORDER_INPUT_SCHEMA,
    ORDER_SCHEMA,
    SINK_BATCHES,
    SINK_SCHEMA,
    TTL_SCHEMA,
    KitchenSink,
    MapListOrder,
    TtlTimers,
)
from tests.support.stream import StreamRunner, memo_run, query_versions


def _queries(location: Location) -> set[str]:
    """Query ids with state under ``location``."""
    return {f.path.split("/", 1)[0] for f in FileIO(location).list("", recursive=True)}


def test_value_list_map_on_s3_match_native_with_a_failed_attempt(
    tiered_loop: Tiered,
    runner: StreamRunner,
    native_results: dict[str, list[tuple[Any, ...]]],
    s3_server: S3Info,
    s3_uri: str,
    tmp_path: Any,
) -> None:
    native = memo_run(
        runner,
        native_results,
        "sink",
        processor=KitchenSink(fail_key="b"),
        batches=SINK_BATCHES,
        output_schema=SINK_SCHEMA,
    )
    marker = tmp_path / "failure-injected"
    processor = tiered_loop(
        KitchenSink(fail_key="b", marker=str(marker)),
        state_uri=s3_uri,
        storage_options=s3_options(s3_server),
    )
    assert s3_server.secret_key not in repr(processor.config)
    got = runner.run(processor, SINK_BATCHES, SINK_SCHEMA)
    assert marker.exists() and got == native
    location = Location.parse(s3_uri, s3_options(s3_server))
    (query,) = _queries(location)
    for partition in (0, 1):  # one store per partition, one version per micro-batch, on S3
        versions = query_versions(location.child(query), "KitchenSink", partition)
        assert versions == [0, 1, 2]


def test_ttl_timers_and_map_order_on_s3_match_native(
    tiered_loop: Tiered, runner: StreamRunner, s3_server: S3Info, s3_uri: str
) -> None:
    batches = [
        [{"k": "a", "v": 1}, {"k": "b", "v": 2}],
        [{"k": "a", "v": 3}, {"k": "c", "v": 4}, {"k": "a", "v": 8}],
        [{"k": "a", "v": 5}, {"k": "b", "v": 6}, {"k": "c", "v": 7}],
    ]
    opts = s3_options(s3_server)
    kwargs: dict[str, Any] = {"time_mode": "ProcessingTime"}
    native = runner.run(TtlTimers(), batches, TTL_SCHEMA, **kwargs)
    got = runner.run(
        tiered_loop(TtlTimers(), state_uri=f"{s3_uri}/ttl", storage_options=opts),
        batches,
        TTL_SCHEMA,
        **kwargs,
    )
    assert got == native
    order: dict[str, Any] = {
        "batches": ORDER_BATCHES,
        "output_schema": ORDER_SCHEMA,
        "input_schema": ORDER_INPUT_SCHEMA,
    }
    native = runner.run(MapListOrder(), **order)
    got = runner.run(
        tiered_loop(MapListOrder(), state_uri=f"{s3_uri}/order", storage_options=opts), **order
    )
    assert got == native
