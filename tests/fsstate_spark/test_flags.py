"""The Spark adapter reads every flag with :func:`fsstate.config.parse_flag`: the
``spark.fsstate`` settings and the ``fsstate`` source's options take the engine's words, and
refuse anything else with a :class:`ConfigError` naming the setting (no SparkSession needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsstate.errors import ConfigError
from fsstate.storage.fileio import FileIO
from fsstate_spark.settings import coerce
from fsstate_spark.sources.selection import select
from tests.support.rescale_state import OP, write_state


def test_spark_settings_take_the_flag_words() -> None:
    assert coerce("fsync", " Off", True) is False
    assert coerce("fsync", "ON", False) is True
    assert coerce("fsync", "1", False) is True
    with pytest.raises(ConfigError, match=r"spark.fsstate setting fsync='y'.*true or false"):
        coerce("fsync", "y", True)


def test_source_options_take_the_flag_words(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    write_state(FileIO(uri), 2, seed=3)
    opts = {"path": uri, "operatorName": OP, "stateVarName": "plain"}
    sel = select({**opts, "includeExpiry": " Yes", "includeSequence": "on"})
    assert sel.with_expiry and sel.with_seq and sel.flatten
    sel = select({**opts, "includeExpiry": "OFF", "flattenCollectionTypes": "0"})
    assert not sel.with_expiry and not sel.flatten
    with pytest.raises(ConfigError, match=r"option includesequence='y'.*true or false"):
        select({**opts, "includeSequence": "y"})
