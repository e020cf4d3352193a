"""Shared fixtures: stores and the tier configurations contract tests run over (constants and
helpers are in :mod:`tests.support.engine`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fsstate import PartitionStore, StoreConfig
from tests.support.engine import TIERS


@pytest.fixture
def make_store(tmp_path: Path) -> Callable[..., PartitionStore]:
    """Factory of empty stores under a temporary directory."""

    def make(operator: str = "op", partition: int = 0, **config: int) -> PartitionStore:
        store = PartitionStore.open(
            str(tmp_path / "state"), operator, partition, None, StoreConfig(**config)
        )
        store.set_time(1_000)
        return store

    return make


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest) -> str:
    """Each tier configuration in turn."""
    return str(request.param)
