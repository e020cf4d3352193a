"""What fsstate reads of a ``StatefulProcessorHandle``'s state-server client beyond its public
API: the client itself, the micro-batch's timestamp, its DDL schema parser.

Invariant: every function here only reads, and none imports the client's module (the driver's
schema pass and every handle import this one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql.types import StructType


def client_of(handle: Any) -> Any | None:
    """The state-server client of a ``StatefulProcessorHandle`` (None: it has none)."""
    return getattr(handle, "_statefulProcessorApiClient", None)


def batch_timestamp(client: Any) -> int:
    """The micro-batch's timestamp as Spark's state server says it (raises where the server
    cannot say)."""
    return int(client._get_batch_timestamp())


def ddl_parser(client: Any) -> Callable[[str], StructType] | None:
    """The client's parser of DDL schema strings (None: the client has none)."""
    parse: Callable[[str], StructType] | None = getattr(client, "_parse_string_schema", None)
    return parse
