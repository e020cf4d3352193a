"""The configuration reference lists every setting the code reads.

``docs/configuration.md`` includes ``docs/snippets/settings_reference.md``, generated from the
code by :mod:`devkit.settings_reference`. These tests compare that file with the code itself:
the settings dataclasses' fields, the settings each product takes, the object store settings
fsstate reads or checks, the options of ``format("fsstate")`` (read from the source's code),
the environment variables and the Spark settings the packages read (found in their source).
A setting added to the code without a line on the page fails here, naming it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from devkit.repo import ROOT
from devkit.settings_reference import OUT, render
from fsstate import EngineConfig, StoreConfig
from fsstate.storage import location, objects
from fsstate_spark.operators.settings import FLOW_FIELDS, FlowSettings
from fsstate_spark.settings import SHARED_FIELDS
from fsstate_spark.tiered.settings import TIERED_FIELDS

PACKAGES = ("fsstate", "fsstate_spark", "pyspark_fsstate")


@pytest.fixture(scope="module")
def page() -> str:
    return OUT.read_text("utf-8")


def _listed(page: str) -> set[str]:
    """The names in the first column of every table of the page."""
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", page, re.M)}


def _sources(*parts: str) -> list[tuple[Path, str]]:
    files = [p for part in parts for p in sorted((ROOT / part).rglob("*.py"))]
    return [(p, p.read_text("utf-8")) for p in files]


def test_the_generated_reference_is_up_to_date(page: str) -> None:
    assert page == render(), "run python -m devkit.settings_reference (make docs-config)"


def test_the_configuration_page_includes_the_reference() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    assert '--8<-- "docs/snippets/settings_reference.md"' in text


def test_every_setting_of_the_settings_dataclasses_has_a_line(page: str) -> None:
    fields = {f.name for cls in (StoreConfig, EngineConfig) for f in dataclasses.fields(cls)}
    flow_args = {"partitions", "tasks", "checkpoint_location"}
    assert {f.name for f in dataclasses.fields(FlowSettings)} - flow_args <= FLOW_FIELDS | {
        "memory_limit_bytes",
        "store",
        "engine",
        "location",
    }
    wanted = (fields - {"memory_limit_bytes"}) | SHARED_FIELDS | TIERED_FIELDS | FLOW_FIELDS
    missing = sorted((wanted | flow_args) - _listed(page))
    assert not missing, f"settings without a line in the configuration reference: {missing}"


def test_every_object_store_setting_fsstate_reads_or_checks_has_a_line(page: str) -> None:
    names = (
        set(location._BOOL_OPTIONS)
        | set(location._INT_OPTIONS)
        | set(location._DURATION_OPTIONS)
        | set(objects._CLIENT_KEYS)
        | set(objects._FSSTATE_KEYS)
        | {"endpoint"}
    )
    missing = sorted(names - _listed(page))
    assert not missing, f"object store settings without a line: {missing}"


def test_every_option_the_state_source_reads_has_a_line(page: str) -> None:
    code = (ROOT / "fsstate_spark" / "sources" / "selection.py").read_text("utf-8")
    read = set(re.findall(r'(?:lower\.get|_flag|_int)\((?:lower,\s*)?"(\w+)"', code))
    assert len(read) >= 12, f"the source's options are read another way now: {read}"
    listed = {name.lower() for name in _listed(page)}
    missing = sorted(read - listed)
    assert not missing, f"format('fsstate') options without a line: {missing}"


def test_every_environment_variable_the_packages_read_has_a_line(page: str) -> None:
    found: set[str] = set()
    for _, text in _sources(*PACKAGES):
        found |= set(re.findall(r'environ(?:\.get|\.setdefault)?[(\[]\s*"([A-Z_]+)"', text))
        found |= set(re.findall(r'^\w*_ENV\s*=\s*"([A-Z_]+)"', text, re.M))
    for _, variables in objects._ENV_ENDPOINTS.values():
        found |= set(variables)
    listed = " ".join(_listed(page))
    missing = sorted(v for v in found if v not in listed)
    assert len(found) >= 6 and not missing, f"environment variables without a line: {missing}"


def test_every_spark_setting_the_packages_read_has_a_line(page: str) -> None:
    found: set[str] = set()
    for _, text in _sources("fsstate_spark", "pyspark_fsstate"):
        found |= set(re.findall(r'"(spark\.(?:sql|python)\.[\w.]+)"', text))
    missing = sorted(found - _listed(page))
    assert len(found) >= 8 and not missing, f"Spark settings without a line: {missing}"
