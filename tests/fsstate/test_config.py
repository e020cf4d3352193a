"""One flag parser for every boolean setting: :func:`fsstate.config.parse_flag`.

Invariants checked: the same words are accepted wherever a flag is read (any case, surrounding
whitespace ignored, bools as they are); anything else is a :class:`ConfigError` naming the
setting, the value and the accepted words; the storage settings go through it (the Spark
adapter's settings and source options: ``tests/fsstate_spark/test_flags.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from fsstate.config import FLAG_WORDS, EngineConfig, StoreConfig, parse_flag
from fsstate.errors import ConfigError, FsStateError
from fsstate.storage.location import Location

TRUE_WORDS = ["true", "1", "yes", "on", "TRUE", "Yes", "oN", " true", "on\n", "\t1 "]
FALSE_WORDS = ["false", "0", "no", "off", "FALSE", "No", "OFF", " false ", "0\n"]
NOT_FLAGS: list[Any] = ["", " ", "maybe", "y", "n", "t", "f", "2", "-1", "truee", "1.0", None, 1, 0]


@pytest.mark.parametrize("value", [*TRUE_WORDS, True])
def test_true_words(value: str | bool) -> None:
    assert parse_flag(value, "some_flag") is True


@pytest.mark.parametrize("value", [*FALSE_WORDS, False])
def test_false_words(value: str | bool) -> None:
    assert parse_flag(value, "some_flag") is False


@pytest.mark.parametrize("value", NOT_FLAGS)
def test_anything_else_is_a_config_error_naming_the_setting_and_the_words(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_flag(value, "spark.fsstate setting fsync")
    msg = str(info.value)
    assert f"spark.fsstate setting fsync={value!r}" in msg
    assert FLAG_WORDS in msg and "true or false" in msg and "on/off" in msg
    assert isinstance(info.value, FsStateError)


@pytest.mark.parametrize(("value", "expected"), [("on", "true"), (" No", "false"), ("1", "true")])
def test_storage_settings_take_the_same_words(value: str, expected: str) -> None:
    loc = Location.parse("s3://bucket/prefix", {"single_writer": value})
    assert loc.option_map["single_writer"] == expected
    assert loc.single_writer is (expected == "true")


STORE_NUMBERS = [
    "retain_versions",
    "row_group_rows",
    "row_group_bytes",
    "orphan_grace_ms",
    "orphan_scan_every_commits",
]
ENGINE_NUMBERS = [
    "memory_limit_bytes",
    "high_watermark",
    "low_watermark",
    "block_cache_fraction",
    "check_every_growth",
    "compaction_max_runs",
    "compaction_bytes_per_round",
    "compaction_queue_max",
]


@pytest.mark.parametrize("value", [True, False, "3", None])
@pytest.mark.parametrize("name", STORE_NUMBERS)
def test_a_store_number_setting_refuses_a_bool_or_text(name: str, value: Any) -> None:
    """``retain_versions=True`` was read as 1: every number setting takes a number only."""
    with pytest.raises(ConfigError, match=rf"^{name}={value!r} must be an integer"):
        StoreConfig(**{name: value})


@pytest.mark.parametrize("value", [True, False, "3", None])
@pytest.mark.parametrize("name", ENGINE_NUMBERS)
def test_an_engine_number_setting_refuses_a_bool_or_text(name: str, value: Any) -> None:
    shown = "memory_limit" if name == "memory_limit_bytes" else name
    with pytest.raises(ConfigError, match=rf"^{shown}={value!r} must be an? (integer|number)"):
        EngineConfig(**{name: value})


def test_numbers_of_the_right_kind_are_accepted() -> None:
    assert StoreConfig(retain_versions=1, orphan_grace_ms=0).retain_versions == 1
    engine = EngineConfig(high_watermark=1, low_watermark=0.5, block_cache_fraction=0)
    assert engine.high_watermark == 1
    with pytest.raises(ConfigError, match="background_compaction=1 must be True or False"):
        EngineConfig(background_compaction=1)  # type: ignore[arg-type]
