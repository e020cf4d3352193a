"""Repository-wide test set-up: everything lives in the plugin :mod:`tests.support.plugin`."""

from __future__ import annotations

pytest_plugins = ["tests.support.plugin"]
