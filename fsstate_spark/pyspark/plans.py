"""What fsstate reads of a DataFrame's and a ``GroupedData``'s plan beyond PySpark's public API,
classic (py4j: the JVM's ``RelationalGroupedDataset`` and analyzed plan) and Spark Connect (the
client's plan and grouping): the same on every supported minor.

Invariant: every function here only reads (:func:`rebound` makes a new DataFrame of the same
plan).
"""

from __future__ import annotations

from typing import Any


def grouped_frame(grouped: Any) -> Any:
    """The DataFrame a ``GroupedData`` (classic or Spark Connect) groups."""
    return grouped._df


def is_connect_grouped(obj: Any) -> bool:
    """Whether a Spark Connect object is ``df.groupBy(...)`` (a ``GroupedData`` of a frame)."""
    return type(obj).__name__ == "GroupedData" and hasattr(obj, "_df")


def grouping_exprs(grouped: Any) -> Any | None:
    """The JVM's grouping expressions of a classic ``GroupedData`` (a Scala ``Seq``; None: it
    has no JVM twin)."""
    jgd = getattr(grouped, "_jgd", None)
    return None if jgd is None else jgd.groupingExprs()


def analyzed_plan(df: Any) -> Any:
    """The JVM's analyzed logical plan of a classic DataFrame."""
    return df._jdf.queryExecution().analyzed()


def connect_grouping(grouped: Any) -> tuple[Any, Any, list[Any]]:
    """(group type, pivot column, grouping columns) of a Spark Connect ``GroupedData``."""
    return (
        getattr(grouped, "_group_type", None),
        getattr(grouped, "_pivot_col", None),
        list(getattr(grouped, "_grouping_cols", None) or []),
    )


def column_reference(col: Any) -> tuple[str, Any]:
    """(expression class name, unparsed identifier or None) of a Spark Connect column."""
    expr = getattr(col, "_expr", None)
    return type(expr).__name__, getattr(expr, "_unparsed_identifier", None)


def connect_relation(df: Any) -> Any:
    """A Spark Connect DataFrame's plan as the client sends it (a ``Relation`` message)."""
    return df._plan.plan(df.sparkSession.client)


def explain_extended(df: Any) -> str:
    """The server's extended explain text of a Spark Connect DataFrame."""
    return str(df._explain_string(extended=True))


def rebound(df: Any, session: Any) -> Any:
    """A Spark Connect DataFrame of the same plan in another session."""
    return type(df)(df._plan, session)


def session_parse_ddl(session: Any, text: str) -> Any:
    """A DDL type string parsed by the session's own parser (a Spark Connect session's: the
    server's); None where the session has none."""
    return session._parse_ddl(text) if hasattr(session, "_parse_ddl") else None


def parse_type_string(text: str) -> Any:
    """A DDL type string parsed by PySpark's own parser (a classic session's JVM)."""
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(text)
