"""Names packages export but import on first use (:mod:`fsstate.exports`): every name of each
package's ``__all__`` resolves to the object its module defines, through attribute access,
``from`` imports and ``import *``; unknown names raise ``AttributeError``; the name ``tiered``
stays the function."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from fsstate.exports import lazy_exports
from tests.support.engine import run_probe

PACKAGES = ("fsstate", "fsstate.operators", "fsstate_spark", "fsstate_spark.tiered")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_its_modules_object(package: str) -> None:
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        value = getattr(pkg, name)  # every export is a class or a function
        home = importlib.import_module(value.__module__)
        assert getattr(home, value.__name__) is value, (package, name)


STAR_PROBE = """
import json, sys
from fsstate_spark import *  # noqa: F403
from fsstate.operators import *  # noqa: F403
from fsstate import read_table
from fsstate_spark import fork_query, tiered, rescale_query
import fsstate_spark.tiered.fast_loop  # a submodule import must not rebind the name tiered
import fsstate_spark
print("PROBE " + json.dumps({
    "star": sorted(k for k in ("WindowAggregate", "progress", "StateSummary", "CheckpointCut")
                   if k in globals()),
    "tiered_is_function": callable(fsstate_spark.tiered) and not hasattr(fsstate_spark.tiered,
                                                                          "__path__"),
    "read_table": read_table.__module__,
    "fork_query": fork_query.__module__,
}))
"""


def test_star_and_from_imports_in_a_fresh_interpreter() -> None:
    seen, _ = run_probe(STAR_PROBE)
    assert seen["star"] == ["CheckpointCut", "StateSummary", "WindowAggregate", "progress"]
    assert seen["tiered_is_function"] is True
    assert seen["read_table"].startswith("fsstate.inspect")
    assert seen["fork_query"] == "fsstate_spark.fork"


def test_a_lazy_name_is_imported_once_and_cached() -> None:
    module = type(sys)("fsstate_lazy_probe")
    sys.modules[module.__name__] = module
    try:
        getter = lazy_exports(module.__name__, {"dumps": "json"})
        module.__getattr__ = getter  # type: ignore[attr-defined]
        assert module.dumps is json.dumps
        assert module.__dict__["dumps"] is json.dumps  # cached: no second lookup
        with pytest.raises(AttributeError, match="no attribute 'loads'"):
            getter("loads")
    finally:
        del sys.modules[module.__name__]
