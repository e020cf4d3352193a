"""The private attribute check of ``make lint`` (:mod:`lint.private`).

Invariants checked: a private PySpark access (an attribute, through ``getattr``, a private
import, ``Row.__fields__``) is reported and exits 1; ``self._x``, ``cls._x``, names the module
or its package defines, dunders and namedtuple's API pass; an override calling someone else's
private method through ``super()`` is reported, one of the package's own is not; nothing under
``fsstate_spark/pyspark/`` is checked.
"""

from __future__ import annotations

from pathlib import Path

from lint.private import accesses_of_source, check, main

PYSPARK_ACCESS = """\
from pyspark.sql import SparkSession

def active():
    return SparkSession._activeSession
"""

OWN = """\
import collections

_cache = {}


class Store:
    _kind = "store"

    def __init__(self):
        self._rows = []

    def rows(self, other):
        return self._rows + other._rows + [type(self)._kind, _cache]

    @classmethod
    def make(cls):
        return cls._kind, cls.__name__


def point():
    return collections.namedtuple("P", "x")(1)._replace(x=2)
"""


def test_a_private_pyspark_access_fails(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(PYSPARK_ACCESS)
    [problem] = check([str(tmp_path)])
    assert problem == f"{tmp_path.as_posix()}/m.py:4: SparkSession._activeSession"
    assert main([str(tmp_path)]) == 1


def test_own_names_pass(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(OWN)
    assert check([str(tmp_path)]) == []
    assert main([str(tmp_path)]) == 0


def test_a_sibling_module_s_names_are_the_package_s_own(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class A:\n    def _stage(self):\n        return 1\n")
    (tmp_path / "b.py").write_text("def run(a):\n    return a._stage()\n")
    assert check([str(tmp_path)]) == []
    assert accesses_of_source("def run(a):\n    return a._stage()\n", "b.py") == [
        "b.py:2: a._stage"
    ]


def test_reflection_imports_and_row_fields_fail() -> None:
    source = (
        "from collections import _tuplegetter\n"
        "def f(handle, row):\n"
        "    client = getattr(handle, '_statefulProcessorApiClient', None)\n"
        "    return row.__fields__, {'__fields__': 1}\n"
    )
    assert accesses_of_source(source, "m.py") == [
        "m.py:1: from collections import _tuplegetter",
        "m.py:3: getattr(handle, '_statefulProcessorApiClient')",
        "m.py:4: '__fields__'",
        "m.py:4: row.__fields__",
    ]


def test_overriding_someone_else_s_private_method_fails() -> None:
    source = (
        "from pyspark.sql.streaming.stateful_processor_api_client import Client\n"
        "class Deferred(Client):\n"
        "    def _send_proto_message(self, message):\n"
        "        super()._send_proto_message(message)\n"
    )
    assert accesses_of_source(source, "m.py") == [
        "m.py:1: from pyspark.sql.streaming.stateful_processor_api_client import ...",
        "m.py:4: super()._send_proto_message",
    ]
    own_base = (
        "class Base:\n    def _go(self):\n        pass\n"
        + source.replace("Client", "Base").replace("_send_proto_message", "_go").split("\n", 1)[1]
    )
    assert accesses_of_source(own_base, "m.py") == []


def test_the_adapter_package_is_not_checked(tmp_path: Path) -> None:
    package = tmp_path / "fsstate_spark" / "pyspark"
    package.mkdir(parents=True)
    (package / "v4_0.py").write_text(PYSPARK_ACCESS)
    (tmp_path / "fsstate_spark" / "m.py").write_text(PYSPARK_ACCESS)
    [problem] = check([str(tmp_path)])
    assert problem.endswith("fsstate_spark/m.py:4: SparkSession._activeSession")


def test_pyspark_internal_modules_are_imported_only_by_the_package(tmp_path: Path) -> None:
    source = (
        "import pyspark.worker as w\n"
        "from pyspark import serializers\n"
        "from pyspark.sql.pandas.types import from_arrow_schema\n"
        "from pyspark.sql.streaming import stateful_processor_api_client\n"
        "from pyspark.sql.types import StructType\n"
        "import pyspark\n"
    )
    assert accesses_of_source(source, "fsstate_spark/m.py") == [
        "fsstate_spark/m.py:1: import pyspark.worker",
        "fsstate_spark/m.py:2: from pyspark import serializers",
        "fsstate_spark/m.py:3: from pyspark.sql.pandas.types import ...",
        "fsstate_spark/m.py:4: from pyspark.sql.streaming import stateful_processor_api_client",
    ]
    assert accesses_of_source(source, "pyspark_fsstate/worker.py") == []
    package = tmp_path / "fsstate_spark" / "pyspark"
    package.mkdir(parents=True)
    (package / "worker.py").write_text(source)
    assert check([str(tmp_path)]) == []
