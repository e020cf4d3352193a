"""The process's storage request counters (diagnostics and benchmarks): the total of
:func:`fsstate_spark.runtime.storage_requests` is the sum of the counts by kind of
:func:`fsstate_spark.runtime.storage_request_counts`, and both grow with reads and writes."""

from __future__ import annotations

from pathlib import Path

from fsstate.storage.location import Location
from fsstate_spark.runtime import fileio_for, storage_request_counts, storage_requests


def test_request_counts_by_kind(tmp_path: Path) -> None:
    before, total0 = storage_request_counts(), storage_requests()
    assert sum(before.values()) == total0
    fileio = fileio_for(Location.parse(str(tmp_path)), False)
    fileio.publish_bytes("a.json", b"{}")
    assert fileio.read_bytes("a.json") == b"{}"
    after = storage_request_counts()
    assert set(after) == {"get", "put", "head", "list", "delete"}
    assert after["get"] > before["get"] and after["put"] > before["put"]
    assert sum(after.values()) == storage_requests()
