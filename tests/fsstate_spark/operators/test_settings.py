"""The flow driver's own settings and messages (no Spark session: conf is given explicitly)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsstate.errors import ConfigError
from fsstate_spark.operators.settings import FlowSettings, resolve_flow_settings
from fsstate_spark.tiered.settings import resolve_config


def test_defaults_under_the_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    s = resolve_flow_settings(str(ckpt), 4, None, "64MiB", {"retain_versions": 7}, conf={})
    assert isinstance(s, FlowSettings)
    assert s.state_uri == str(ckpt / "fsstate")
    assert (s.partitions, s.memory_limit_bytes, s.store.retain_versions) == (4, 64 << 20, 7)


def test_spark_conf_state_uri_is_not_a_flow_location(tmp_path: Path) -> None:
    """A shared spark.fsstate.stateUri would mix the stores of several flows: not used."""
    conf = {"state_uri": str(tmp_path / "shared"), "memory_limit": "32MiB"}
    s = resolve_flow_settings(str(tmp_path / "ckpt"), 2, None, None, {}, conf=conf)
    assert s.state_uri == str(tmp_path / "ckpt" / "fsstate")
    assert s.memory_limit_bytes == 32 << 20  # other spark.fsstate.* settings apply


def test_unknown_setting_names_write_stream(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown ops.write_stream\(\) setting 'name'"):
        resolve_flow_settings(str(tmp_path), 2, None, None, {"name": "x"}, conf={})
    with pytest.raises(ConfigError, match=r"ops.write_stream\(\) setting 'bogus'"):
        resolve_flow_settings(str(tmp_path), 2, None, None, {"bogus": 1}, conf={})


def test_bad_state_uri_says_how_to_give_it_to_write_stream(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"ops.write_stream\(state_uri=\.\.\.\)") as err:
        resolve_flow_settings(str(tmp_path), 2, str(blocker / "x"), None, {}, conf={})
    assert "tiered(" not in str(err.value)


def test_map_state_encoding_is_not_a_flow_setting(tmp_path: Path) -> None:
    """Spark's state encoding only orders tiered() map state: flows never check it."""
    conf = {"_state_encoding": "protobuf"}
    resolve_flow_settings(str(tmp_path), 2, None, None, {}, conf=conf)
    with pytest.raises(ConfigError, match="encodingFormat"):
        resolve_config("P", str(tmp_path / "t"), None, None, {}, conf=conf)


@pytest.mark.parametrize("partitions", [0, -1, True, 2.5])
def test_bad_partition_count(tmp_path: Path, partitions: object) -> None:
    with pytest.raises(ConfigError, match=r"partitions=.*int >= 1"):
        resolve_flow_settings(str(tmp_path), partitions, None, None, {}, conf={})  # type: ignore[arg-type]
    assert not (tmp_path / "fsstate").exists()  # refused before anything was written


def test_each_products_spark_settings_leave_the_other_alone(tmp_path: Path) -> None:
    """One session's spark.fsstate.* settings reach both products: a setting only tiered()
    takes (fastLoop, name) does not fail ops.write_stream(), one only the driver takes
    (combine) does not fail tiered(); an unknown one fails both."""
    from fsstate_spark.operators.settings import FLOW_FIELDS
    from fsstate_spark.settings import PRODUCT_FIELDS
    from fsstate_spark.tiered.settings import TIERED_FIELDS

    assert TIERED_FIELDS ^ FLOW_FIELDS <= PRODUCT_FIELDS
    conf = {"fastLoop": "false", "name": "op", "combine": "false"}
    flow = resolve_flow_settings(str(tmp_path / "ckpt"), 2, None, None, {}, conf=conf)
    assert flow.combine is False
    tiered = resolve_config("P", str(tmp_path / "state"), None, None, {}, conf=conf)
    assert tiered.fast_loop is False and tiered.name == "op"
    for resolve in (
        lambda: resolve_flow_settings(str(tmp_path), 2, None, None, {}, conf={"bogus": "1"}),
        lambda: resolve_config("P", str(tmp_path), None, None, {}, conf={"bogus": "1"}),
    ):
        with pytest.raises(ConfigError, match=r"unknown spark\.fsstate setting 'bogus'"):
            resolve()
