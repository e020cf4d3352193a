"""One flag parser for every boolean setting: :func:`fsstate.config.parse_flag`.

Invariants checked: the same words are accepted wherever a flag is read (any case, surrounding
whitespace ignored, bools as they are); anything else is a :class:`ConfigError` naming the
setting, the value and the accepted words; the storage settings go through it (the Spark
adapter's settings and source options: ``tests/fsstate_spark/test_flags.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from fsstate.config import FLAG_WORDS, parse_flag
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
