"""The streaming queries of Spark's TwsTester fuzz tests against fsstate's ways: a running
count (value state), the top k scores (list state) and word frequencies (map state) over
seeded random micro-batches (``test_tws_tester.py``, ``TwsTesterFuzzTests``).

Spark compares its in-memory ``TwsTester`` with a streaming query; here the streaming query
with Spark's handles is the reference. The other tests of ``test_tws_tester.py`` exercise
``TwsTester`` alone (no streaming query, no state store) and are not ported.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any

import pytest

from tests.fsstate_spark.conformance import processors as p
from tests.fsstate_spark.conformance.harness import (
    STATE_API_WAYS,
    Conformance,
    Scenario,
    cases,
    flavours,
    step,
)

BATCHES, ROWS, KEYS = 3, 40, 6  # Spark's: 5 batches of 200 rows over 10 keys


def _batches(
    seed: int, value: Callable[[random.Random], Any], column: str
) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    return [
        [{"key": f"key{rng.randint(0, KEYS - 1)}", column: value(rng)} for _ in range(ROWS)]
        for _ in range(BATCHES)
    ]


def _word(rng: random.Random) -> str:
    return rng.choice(string.ascii_lowercase[:8])


SCENARIOS = [
    Scenario(
        "test_fuzz_running_count",
        (
            step(
                flavours(p.PandasRunningCount, p.RowRunningCount),
                "key string, count int",
                *_batches(1, lambda r: "".join(r.choices(string.ascii_lowercase, k=5)), "value"),
            ),
        ),
        input_schema="key STRING, value STRING",
        keys=("key",),
        slow=True,
    ),
    Scenario(
        "test_fuzz_topk",
        (
            step(
                flavours(lambda: p.PandasTopK(10), lambda: p.RowTopK(10)),
                "key string, score double",
                *_batches(2, lambda r: r.randint(0, 1_000_000) / 1000, "score"),
            ),
        ),
        input_schema="key STRING, score DOUBLE",
        keys=("key",),
        slow=True,
    ),
    Scenario(
        "test_fuzz_word_frequency",
        (
            step(
                flavours(p.PandasWordFrequency, p.RowWordFrequency),
                "key string, word string, count int",
                *_batches(3, _word, "word"),
            ),
        ),
        input_schema="key STRING, word STRING",
        keys=("key",),
        slow=True,
    ),
]


# make test-compat-full runs it on every matrix entry, every way
@pytest.mark.compat_full
@pytest.mark.parametrize(("scenario", "way", "flavour"), cases(SCENARIOS, STATE_API_WAYS))
def test_tws_fuzz_scenarios_match_sparks_handles(
    conformance: Conformance, scenario: Scenario, way: str, flavour: str
) -> None:
    """Value, list and map state over random micro-batches: the way's output is Spark's,
    batch by batch."""
    conformance.check(scenario, way, flavour)
