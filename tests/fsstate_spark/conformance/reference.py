"""Spark's reference outputs of the conformance scenarios, stored per PySpark minor.

Spark's handles give the same rows on every run of one PySpark release, so the reference of a
scenario (its run with Spark's handles, in one flavour) is computed once per release by ``make
conformance-reference`` (``devkit.compat_matrix --reference write``, which runs
:mod:`.make_reference` on every minor's virtualenv) and stored in
``reference/<minor>/<module>.json``; the suite compares fsstate's ways with the stored rows.
``make conformance-reference-check`` recomputes them and fails where Spark's handles give
other rows than the stored ones.

Invariants:

* A stored file records the PySpark release it came from; per scenario and flavour, a
  fingerprint of what Spark's handles ran (:func:`fingerprint`: the input batches, the
  processors' and helpers' code, the query's settings). A run whose installed minor has no
  file, whose file is of another release than the pinned one (pyproject's ``dev`` extra for
  the default minor, ``devkit.compat_matrix.MATRIX`` for the others) or than the installed one,
  or whose scenario's fingerprint changed, fails with a message naming ``make
  conformance-reference``: a stored reference never goes stale silently.
  ``tests/fsstate_spark/conformance/test_reference.py`` holds every minor's files to the pins
  and the scenarios without running Spark.
* Values round-trip type for type (:func:`encode`, :func:`decode`): what is decoded is what
  ``collect()`` gave (rows, maps, lists, decimals, timestamps converted as PySpark converts
  them, bytes; strings over :data:`LONG` characters zlib-compressed), so the comparison is the
  one a reference run in the session had. Rows are stored as collected (wall-clock values
  too: a scenario's ``check`` runs on them), sorted within a micro-batch; an error as its root
  cause and the lines that name what Spark's test expects (``Step.spark_error``).
* A scenario Spark's handles do not reproduce on an older minor is stored as skipped there,
  with the reason (the harness's rule); on the minor the scenarios are ported from, making
  its reference fails instead.
* ``FSSTATE_CONFORMANCE_REFERENCE`` (:data:`MODE_ENV`): ``stored`` (the default), ``live``
  (Spark's handles run in the test session, on any PySpark, as :mod:`.harness` always could),
  ``write`` or ``check`` (what ``make conformance-reference[-check]`` sets: Spark's handles
  run live and are written or compared).
"""

from __future__ import annotations

import ast
import base64
import copy
import datetime
import hashlib
import importlib
import inspect
import json
import math
import os
import re
import sys
import textwrap
import types
import zlib
from collections.abc import Iterator, Mapping
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import Row
from pyspark.sql.types import StructType, TimestampType

from fsstate_spark.pyspark import PYSPARK_MINOR
from tests.fsstate_spark.conformance.harness import (
    WAYS,
    Outcome,
    Scenario,
    StepOutcome,
    canonical,
    cause,
    stable,
)

HERE = Path(__file__).resolve().parent
DIR = HERE / "reference"
MAKE = "make conformance-reference"
MODE_ENV = "FSSTATE_CONFORMANCE_REFERENCE"
MODES = ("stored", "live", "write", "check")
LONG = 4096
ROW_FLAVOUR_FROM = (4, 1)
"""The first minor with Row-flavour transformWithState (``fsstate_spark.pyspark``'s
``ROW_TRANSFORM_WITH_STATE``): older minors store pandas references only."""


def mode() -> str:
    """The reference mode of this run (:data:`MODE_ENV`, default ``stored``)."""
    value = os.environ.get(MODE_ENV, "").strip() or "stored"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r}: one of {', '.join(MODES)}")
    return value


def minor_name(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"


# -- scenarios -------------------------------------------------------------------------------
def module_names() -> list[str]:
    """The conformance suite's scenario modules (``test_*.py`` defining ``SCENARIOS``)."""
    names = sorted(p.stem for p in HERE.glob("test_*.py"))
    return [n for n in names if hasattr(scenario_module(n), "SCENARIOS")]


def scenario_module(name: str) -> types.ModuleType:
    return importlib.import_module(f"{__package__}.{name}")


def scenarios(module: str) -> list[Scenario]:
    return list(scenario_module(module).SCENARIOS)


def referenced(scenario: Scenario) -> bool:
    """Whether a way compares with the scenario's reference (one it can apply to)."""
    return any(scenario.skip_reason(way) is None for way in WAYS)


def flavours_of(scenario: Scenario, minor: tuple[int, int]) -> tuple[str, ...]:
    """The scenario's flavours that ``minor`` runs (Row from :data:`ROW_FLAVOUR_FROM`)."""
    return tuple(f for f in scenario.flavours if f != "row" or minor >= ROW_FLAVOUR_FROM)


# -- values ----------------------------------------------------------------------------------
_TIMESTAMP = TimestampType()


def encode(value: Any) -> Any:
    """A collected value as JSON (nested values tagged by type, see :func:`decode`)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, str):
        if len(value) <= LONG:
            return value
        return {"$zstr": base64.b64encode(zlib.compress(value.encode("utf-8"), 9)).decode()}
    if isinstance(value, Row):
        return {"$row": [[k, encode(v)] for k, v in zip(value.__fields__, value)]}
    if isinstance(value, dict):
        return {"$map": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime.datetime):  # epoch microseconds, as PySpark converts them
        return {"$timestamp": _TIMESTAMP.toInternal(value)}
    if isinstance(value, datetime.date):
        return {"$date": value.isoformat()}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"no stored form for a collected {type(value).__name__}: {value!r:.200}")


def decode(value: Any) -> Any:
    """The collected value :func:`encode` stored."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, body),) = value.items()
    if tag == "$row":  # as PySpark makes a collected row: values, then the field names
        row = Row(*(decode(v) for _, v in body))
        row.__fields__ = [k for k, _ in body]
        return row
    if tag == "$map":
        return {decode(k): decode(v) for k, v in body}
    simple = {
        "$float": float,
        "$zstr": lambda b: zlib.decompress(base64.b64decode(b)).decode("utf-8"),
        "$decimal": Decimal,
        "$timestamp": _TIMESTAMP.fromInternal,
        "$date": datetime.date.fromisoformat,
        "$bytes": base64.b64decode,
    }
    return simple[tag](body)


def _sorted_rows(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(batch, key=lambda r: repr(tuple((k, canonical(v)) for k, v in r.items())))


def _stored_error(error: str | None, expected: str | None) -> str | None:
    """An error as stored: its root cause, and the lines naming ``expected`` (Spark's
    test's text), which the reference is held to."""
    if error is None:
        return None
    named = [line.strip() for line in error.splitlines() if expected and expected in line]
    return stable("\n".join([cause(error), *named[:3]]))


def encode_outcome(scenario: Scenario, outcome: Outcome) -> list[dict[str, Any]]:
    """An outcome's steps as stored (rows sorted within a batch, errors shortened)."""
    return [
        {
            "error": _stored_error(s.error, st.spark_error),
            "batches": [
                [b, [{k: encode(v) for k, v in r.items()} for r in _sorted_rows(rows)]]
                for b, rows in sorted(s.batches.items())
            ],
        }
        for st, s in zip(scenario.steps, outcome.steps)
    ]


def decode_outcome(steps: list[dict[str, Any]]) -> Outcome:
    """The outcome :func:`encode_outcome` stored (no checkpoint: nothing ran)."""
    return Outcome(
        [
            StepOutcome(
                {
                    int(b): [{k: decode(v) for k, v in r.items()} for r in rows]
                    for b, rows in s["batches"]
                },
                s["error"],
            )
            for s in steps
        ],
        None,
    )


# -- fingerprints ----------------------------------------------------------------------------
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def fingerprint(scenario: Scenario) -> str:
    """What Spark's handles ran for ``scenario``, hashed: its query settings, input batches,
    processors (their classes' code and attributes) and helper functions (their code, the
    values they close over and the repository's functions and constants they name, followed
    down). Comments, docstrings and formatting do not count; ``normalize``, ``check`` and
    ``expected`` do not either (they apply to the stored rows at every run)."""
    seen: set[str] = set()
    parts: list[Any] = [
        scenario.name,
        scenario.input_schema,
        scenario.keys,
        scenario.time_mode,
        scenario.output_mode,
        scenario.sink_mode,
        scenario.event_time_column,
        sorted(scenario.conf.items()),
        scenario.partitions,
        scenario.batch_query,
        scenario.gap_s,
        [_code(f, seen) for f in (scenario.prepare, scenario.initial_state, scenario.downstream)],
    ]
    for st in scenario.steps:
        parts += [st.output, json.dumps([list(b) for b in st.batches], default=str)]
        parts.append(st.spark_error)
        for flavour, factory in sorted(st.processors.items()):
            processor = factory()
            attrs = sorted((k, _value(v, seen)) for k, v in vars(processor).items())
            parts.append([flavour, _code(factory, seen), _code(type(processor), seen), attrs])
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


def _ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "")).startswith("tests.")


def _value(value: Any, seen: set[str]) -> Any:
    """A value a fingerprint counts: the repository's functions and classes by their code, a
    module by name, anything else by its ``repr`` (without memory addresses)."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    if isinstance(value, (types.FunctionType, type)) and _ours(value):
        return _code(value, seen)
    if isinstance(value, (types.FunctionType, type, types.BuiltinFunctionType)):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return _ADDRESS.sub("", repr(value))


@cache
def _top_classes(module: str) -> dict[str, ast.ClassDef]:
    """The classes a module defines at its top level, parsed once."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


@cache
def _parsed(obj: Any) -> tuple[str, tuple[str, ...]]:
    """``obj``'s code without comments, docstrings and formatting, and the names it reads (a
    lambda: its lines with whitespace collapsed, when they do not parse alone)."""
    node: ast.AST | None = _top_classes(obj.__module__).get(obj.__qualname__)
    if node is None:
        text = textwrap.dedent(inspect.getsource(obj))
        try:
            node = ast.parse(text)
        except SyntaxError:
            return " ".join(text.split()), ()
    node = copy.deepcopy(node)
    for part in ast.walk(node):
        body = getattr(part, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    names = (n.id for n in ast.walk(node) if isinstance(n, ast.Name))
    return ast.unparse(node), tuple(dict.fromkeys(names))


def _names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _code(obj: Any, seen: set[str]) -> Any:
    """A function's or class's code and what it names of the repository (each once)."""
    if obj is None:
        return None
    if not isinstance(obj, (types.FunctionType, type)):
        return _value(obj, seen)
    key = f"{obj.__module__}.{obj.__qualname__}"
    if key in seen or not _ours(obj):
        return key
    seen.add(key)
    source, names = _parsed(obj)
    out: list[Any] = [key, source]
    if isinstance(obj, types.FunctionType):
        out += [_value(c.cell_contents, seen) for c in obj.__closure__ or ()]
        scope, names = obj.__globals__, tuple(dict.fromkeys(_names(obj.__code__)))
    else:
        out += [_code(base, seen) for base in obj.__mro__[1:] if _ours(base)]
        scope = vars(sys.modules[obj.__module__])
    out += [(n, _value(scope[n], seen)) for n in names if n in scope]
    return out


# -- stored files ----------------------------------------------------------------------------
def path(minor: tuple[int, int], module: str) -> Path:
    return DIR / minor_name(minor) / f"{module}.json"


def load(minor: tuple[int, int], module: str) -> dict[str, Any] | None:
    """A stored file (None: there is none)."""
    file = path(minor, module)
    return json.loads(file.read_text("utf-8")) if file.exists() else None


def save(minor: tuple[int, int], module: str, entries: Mapping[str, Any]) -> Path:
    """Write a module's file of the installed release (scenarios in their order)."""
    file = path(minor, module)
    file.parent.mkdir(parents=True, exist_ok=True)
    data = {"pyspark": pyspark.__version__, "module": module, "scenarios": entries}
    file.write_text(_pretty(data) + "\n", "utf-8")
    return file


def _pretty(value: Any, indent: str = "") -> str:
    """JSON with each value on one line when it fits in 100 columns (a row, mostly), else
    one line per item."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(indent) + len(flat) <= 100 or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {_pretty(v, inner).lstrip()}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    items = [inner + _pretty(v, inner).lstrip() for v in value]
    return "[\n" + ",\n".join(items) + f"\n{indent}]"


@cache
def pinned_release(minor: tuple[int, int]) -> str | None:
    """The PySpark release pinned for ``minor`` (pyproject's ``dev`` extra for the default
    minor, the matrix's entry for the others; None: no pin)."""
    from devkit.compat_matrix import pinned_releases

    return pinned_releases().get(minor_name(minor))


class StoredReferences:
    """The stored references of the installed PySpark: outcomes by scenario and flavour,
    every mismatch a failure naming :data:`MAKE`."""

    def __init__(self, minor: tuple[int, int] = PYSPARK_MINOR) -> None:
        self.minor = minor
        self._entries: dict[str, tuple[str, dict[str, Any]]] | None = None

    def _index(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Scenario name -> (module, its stored entry), every module's file checked."""
        if self._entries is not None:
            return self._entries
        name, entries = minor_name(self.minor), {}
        for module in module_names():
            data = load(self.minor, module)
            if data is None:
                pytest.fail(
                    f"no stored reference of Spark's handles for PySpark {name} "
                    f"(reference/{name}/{module}.json): run `{MAKE}`",
                    pytrace=False,
                )
            release, pin = data["pyspark"], pinned_release(self.minor)
            if release != pin or release != pyspark.__version__:
                pytest.fail(
                    f"the stored references of PySpark {name} are of {release}; the pin is "
                    f"{pin}, the installed release {pyspark.__version__}: run `{MAKE}` (or "
                    f"{MODE_ENV}=live to run Spark's handles in the session)",
                    pytrace=False,
                )
            entries.update({s: (module, e) for s, e in data["scenarios"].items()})
        self._entries = entries
        return entries

    def entry(self, scenario: Scenario, flavour: str) -> dict[str, Any]:
        """The stored entry of ``scenario`` in ``flavour``, made from its present definition."""
        module, entries = self._index().get(scenario.name, ("", {}))
        entry = entries.get(flavour)
        where = f"{scenario.name} [{flavour}] on PySpark {minor_name(self.minor)}"
        if entry is None:
            pytest.fail(f"no stored reference of {where}: run `{MAKE}`", pytrace=False)
        if entry["fingerprint"] != fingerprint(scenario):
            pytest.fail(
                f"{where}: the scenario changed since its reference was made "
                f"(reference/{minor_name(self.minor)}/{module}.json): run `{MAKE}`",
                pytrace=False,
            )
        return dict(entry)

    def outcome(self, scenario: Scenario, flavour: str) -> Outcome:
        """The stored outcome (skips where the minor does not have the scenario)."""
        entry = self.entry(scenario, flavour)
        if entry["skip"] is not None:
            pytest.skip(entry["skip"])
        return decode_outcome(entry["steps"])

    def state_read(
        self, scenario: Scenario, flavour: str, key: str
    ) -> tuple[StructType, list[tuple[Any, ...]]]:
        """What a read of Spark's state store of the reference's checkpoint gave."""
        read = self.entry(scenario, flavour).get("state_reads", {}).get(key)
        if read is None:
            pytest.fail(
                f"{scenario.name} [{flavour}]: no stored {key!r}: run `{MAKE}`", pytrace=False
            )
        rows = [tuple(decode(v) for v in r) for r in read["rows"]]
        return StructType.fromJson(read["schema"]), rows
