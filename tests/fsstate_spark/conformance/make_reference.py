"""Making and checking the stored references of Spark's handles (``make conformance-reference``,
``make conformance-reference-check``).

One test per scenario module: every scenario a way compares with, in every flavour the
installed minor has, runs with Spark's handles in the session; ``write`` stores the outcomes
in the installed minor's file of the module (:mod:`.reference`), ``check`` fails where they
differ from the stored ones (rows compared as the ways' are, by :func:`.harness.compare`;
fingerprints, skips and state reads exactly).

Invariants: not a ``test_`` file, so ``make test`` never collects it; ``devkit.compat_matrix
--reference write|check`` runs it by name in every minor's virtualenv, with
``FSSTATE_CONFORMANCE_REFERENCE`` set to the mode (anything else fails). A file is written
only whole, and only when every scenario of the minor the scenarios are ported from
reproduces the values Spark's own test asserts.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyspark
import pytest
from pyspark.sql import DataFrame

from fsstate_spark.pyspark import PYSPARK_MINOR
from tests.fsstate_spark.conformance.harness import (
    PORTED_FROM,
    SPARK,
    Conformance,
    Outcome,
    Scenario,
    compare,
)
from tests.fsstate_spark.conformance.reference import (
    MAKE,
    MODE_ENV,
    decode_outcome,
    encode,
    encode_outcome,
    fingerprint,
    flavours_of,
    load,
    mode,
    module_names,
    referenced,
    save,
    scenarios,
)

Made = dict[tuple[str, str], tuple[dict[str, Any], Outcome | None]]


def _made(conf: Conformance, scenario: Scenario, flavour: str, problems: list[str]) -> Any:
    """``scenario``'s entry in ``flavour`` and its outcome (None: skipped on this minor)."""
    entry: dict[str, Any] = {"fingerprint": fingerprint(scenario), "skip": None, "steps": []}
    try:
        outcome = conf.reference(scenario, flavour)  # run, and held to Spark's test's values
    except pytest.skip.Exception as exc:
        entry["skip"] = str(exc.msg)
        return entry, None
    except AssertionError as exc:
        problems.append(f"{scenario.name} [{flavour}]: {exc}")
        outcome = conf.outcome(SPARK, scenario, flavour)
    entry["steps"] = encode_outcome(scenario, outcome)
    return entry, outcome


def _read(df: DataFrame) -> dict[str, Any]:
    rows = [[encode(v) for v in r] for r in df.collect()]
    return {"schema": df.schema.jsonValue(), "rows": sorted(rows, key=repr)}


def _make(conf: Conformance, module: str, problems: list[str]) -> Made:
    """Every referenced scenario of ``module`` with Spark's handles, with the state reads
    later scenarios made of their checkpoints."""
    made: Made = {}
    for scenario in scenarios(module):
        if referenced(scenario):
            for flavour in flavours_of(scenario, PYSPARK_MINOR):
                made[scenario.name, flavour] = _made(conf, scenario, flavour, problems)
    for key, reads in conf.state_reads.items():
        if key in made:
            made[key][0]["state_reads"] = {k: _read(df) for k, df in sorted(reads.items())}
    return made


def _reads(entry: dict[str, Any]) -> dict[str, Counter[str]]:
    """An entry's state reads, each as a multiset of its stored rows."""
    return {k: Counter(map(repr, v["rows"])) for k, v in entry.get("state_reads", {}).items()}


def _entry_differences(
    scenario: Scenario, flavour: str, made: dict[str, Any], outcome: Outcome | None, old: Any
) -> list[str]:
    """Where a made entry differs from the stored one (rows as :func:`compare` has them)."""
    where = f"{scenario.name} [{flavour}]"
    if old is None:
        return [f"{where}: made, not stored"]
    out = [
        f"{where}: {k} {old.get(k)!r} stored, {made.get(k)!r} made"
        for k in ("fingerprint", "skip")
        if old.get(k) != made.get(k)
    ]
    if _reads(made) != _reads(old):
        out.append(f"{where}: the state reads differ")
    if outcome is not None and old["skip"] is None:
        try:
            compare(
                scenario, "the stored reference", flavour, outcome, decode_outcome(old["steps"])
            )
        except (pytest.fail.Exception, AssertionError) as exc:
            out.append(str(exc))
    return out


def _differences(module: str, made: Made) -> list[str]:
    """Where ``made`` differs from the stored file of ``module``."""
    data = load(PYSPARK_MINOR, module)
    if data is None:
        return ["no stored file"]
    out = [] if data["pyspark"] == pyspark.__version__ else [f"stored from {data['pyspark']}"]
    by_name = {s.name: s for s in scenarios(module)}
    stored = {(n, f): e for n, es in data["scenarios"].items() for f, e in es.items()}
    out += [f"{n} [{f}]: stored, not made" for n, f in sorted(set(stored) - set(made))]
    for (name, flavour), (entry, outcome) in made.items():
        old = stored.get((name, flavour))
        out += _entry_differences(by_name[name], flavour, entry, outcome, old)
    return out


@pytest.mark.parametrize("module", module_names())
def test_spark_reference(conformance: Conformance, module: str) -> None:
    """Spark's handles on every scenario of ``module``: stored (``write``) or compared with
    the stored outcomes (``check``)."""
    run = mode()
    if run not in ("write", "check") or conformance.stored is not None:
        pytest.fail(f"{MODE_ENV}={run}: `{MAKE}` runs this file with write or check")
    problems: list[str] = []
    made = _make(conformance, module, problems)
    if problems:
        pytest.fail(
            f"PySpark {pyspark.__version__} (the minor the scenarios port, "
            f"{PORTED_FROM}) does not reproduce Spark's tests' values; nothing stored:\n"
            + "\n".join(problems),
            pytrace=False,
        )
    if run == "write":
        entries: dict[str, dict[str, Any]] = {}
        for (name, flavour), (entry, _) in made.items():
            entries.setdefault(name, {})[flavour] = entry
        save(PYSPARK_MINOR, module, entries)
        return
    differences = _differences(module, made)
    assert not differences, (
        f"Spark's handles on PySpark {pyspark.__version__} differ from the stored references "
        f"of {module} (`{MAKE}` stores them):\n" + "\n".join(differences)
    )
