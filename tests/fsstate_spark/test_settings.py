"""Bad settings of the Spark products refused where they are made, each with one line naming
the setting (issue 45): a process-local store, an empty URI, a bool for a number, object store
settings with a local path, an unknown setting (named as written, with the nearest one), a
``state_uri`` or ``storage_options`` of the wrong type (issue 66).

No Spark session: the ``spark.fsstate.*`` settings are given explicitly, as
:func:`fsstate_spark.settings.spark_settings` returns them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from fsstate.errors import ConfigError
from fsstate_spark import tiered
from fsstate_spark.operators.settings import FlowSettings, resolve_flow_settings
from fsstate_spark.settings import SparkConf, StateSettings
from fsstate_spark.tiered.settings import TieredConfig, resolve_config

Resolve = Callable[..., Any]


def _tiered(tmp_path: Path) -> Resolve:
    def resolve(state_uri: str | None = None, conf: Any = None, **options: Any) -> Any:
        uri = str(tmp_path / "state") if state_uri is None else state_uri
        return resolve_config("P", uri, None, None, options, conf=conf or {})

    return resolve


def _flows(tmp_path: Path) -> Resolve:
    def resolve(state_uri: str | None = None, conf: Any = None, **options: Any) -> Any:
        return resolve_flow_settings(
            str(tmp_path / "ckpt"), 2, state_uri, None, options, conf or {}
        )

    return resolve


PRODUCTS = pytest.mark.parametrize("product", [_tiered, _flows], ids=["tiered", "flows"])


def _nothing_written(tmp_path: Path) -> bool:
    return not any(tmp_path.rglob("*"))


@PRODUCTS
def test_a_process_local_store_is_refused(
    tmp_path: Path, product: Callable[[Path], Resolve]
) -> None:
    with pytest.raises(ConfigError, match=r"state_uri='memory:///x' is a process-local store"):
        product(tmp_path)(state_uri="memory:///x")
    with pytest.raises(ConfigError, match="process-local"):  # at construction too
        StateSettings(state_uri="memory:///x")


@PRODUCTS
@pytest.mark.parametrize("uri", ["", "  "])
def test_an_empty_state_uri_is_refused(
    tmp_path: Path, product: Callable[[Path], Resolve], uri: str
) -> None:
    with pytest.raises(ConfigError, match=r"state_uri=.* is empty"):
        product(tmp_path)(state_uri=uri)
    assert _nothing_written(tmp_path)


def test_an_empty_spark_conf_state_uri_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"state_uri='' of tiered\(\) is empty"):
        resolve_config("P", None, None, None, {}, conf={"state_uri": ""})


@PRODUCTS
@pytest.mark.parametrize(
    "name", ["retain_versions", "orphan_grace_ms", "compaction_queue_max", "max_cached_stores"]
)
def test_a_bool_for_a_number_is_refused(
    tmp_path: Path, product: Callable[[Path], Resolve], name: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^{name}=True must be an integer"):
        product(tmp_path)(**{name: True})


def test_a_bool_for_a_number_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"memory_limit=True must be an integer"):
        StateSettings(state_uri="", memory_limit_bytes=True)
    with pytest.raises(ConfigError, match=r"max_cached_stores=False must be an integer"):
        TieredConfig(state_uri="", max_cached_stores=False)
    with pytest.raises(ConfigError, match=r"partitions=True"):
        FlowSettings(state_uri="", partitions=True)


@PRODUCTS
def test_object_store_settings_with_a_local_path_are_refused(
    tmp_path: Path, product: Callable[[Path], Resolve]
) -> None:
    resolve = product(tmp_path)
    with pytest.raises(ConfigError, match=r"object store settings \(region; .* is a local path"):
        resolve(state_uri=str(tmp_path / "state"), storage_options={"region": "eu-west-1"})
    conf = {"storage.endpoint": "http://localhost:9000"}
    with pytest.raises(ConfigError, match=r"\(endpoint; .*spark\.fsstate\.storage.*local path"):
        resolve(state_uri=str(tmp_path / "state"), conf=conf)
    assert _nothing_written(tmp_path)


@PRODUCTS
def test_an_unknown_spark_setting_is_named_as_written_with_the_nearest(
    tmp_path: Path, product: Callable[[Path], Resolve]
) -> None:
    conf = SparkConf(memory_limt="1GiB")
    conf.written["memory_limt"] = "spark.fsstate.memoryLimt"
    with pytest.raises(ConfigError) as err:
        product(tmp_path)(conf=conf)
    msg = str(err.value)
    assert "spark.fsstate.memoryLimt" in msg
    assert "did you mean spark.fsstate.memoryLimit?" in msg
    assert "\n" not in msg


@PRODUCTS
def test_an_unknown_keyword_gets_the_nearest_too(
    tmp_path: Path, product: Callable[[Path], Resolve]
) -> None:
    with pytest.raises(ConfigError, match=r"'retain_version' .*did you mean retain_versions="):
        product(tmp_path)(retain_version=3)
    with pytest.raises(ConfigError) as err:
        product(tmp_path)(zzz=3)  # nothing close: no suggestion
    assert "did you mean" not in str(err.value)


def test_good_settings_still_resolve(tmp_path: Path) -> None:
    assert _tiered(tmp_path)(retain_versions=3).store.retain_versions == 3
    assert _flows(tmp_path)(state_uri=None).state_uri == str(tmp_path / "ckpt" / "fsstate")


class _Counter(StatefulProcessor):
    """A processor for tiered() to wrap (never run)."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        yield from ()

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"storage_options": "x"}, ["storage_options of tiered() is a str", "give a dict"]),
        ({"storage_options": ["region"]}, ["storage_options of tiered() is a list"]),
        ({"state_uri": 123}, ["state_uri of tiered() is an int", "give a directory path or URI"]),
        ({"state_uri": b"/tmp/x"}, ["state_uri of tiered() is a bytes"]),
    ],
)
def test_a_setting_of_the_wrong_type_is_a_config_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], words: list[str]
) -> None:
    """``tiered(P(), storage_options="x")`` was a ValueError from ``dict("x")`` deep in the
    settings, ``state_uri=123`` a ConfigError saying the URI is empty (issue 66)."""
    monkeypatch.chdir(tmp_path)  # the default state_uri, were one taken, is under here
    with pytest.raises(ConfigError) as err:
        tiered(_Counter(), **options)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert "\n" not in str(err.value)
    assert _nothing_written(tmp_path)


@PRODUCTS
def test_a_state_uri_may_be_a_path(tmp_path: Path, product: Callable[[Path], Resolve]) -> None:
    got = product(tmp_path)(state_uri=tmp_path / "state")
    assert got.state_uri == str(tmp_path / "state")
