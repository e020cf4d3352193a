"""``transform_with_state`` / ``transform_with_state_in_pandas``: Spark's calls, driven by fsstate.

Switching a query is one line: where it says
``df.groupBy("k").transformWithStateInPandas(MyProcessor(), schema, "Update", "ProcessingTime")``
it says ``ops.transform_with_state_in_pandas(df.groupBy("k"), MyProcessor(), schema, "Update",
"ProcessingTime")`` and runs the flow with :func:`fsstate_spark.operators.write_stream`. The
processor is unchanged; :mod:`fsstate_spark.operators.processor_stage` runs it over each partition's
whole batch. The result is a :class:`~fsstate_spark.operators.flows.Flow`, so further stages
chain after it.

What is taken from the grouped DataFrame: its DataFrame, its grouping columns (plain column
names) and the watermark declared with ``withWatermark`` on it (one event-time column and
delay; it becomes the flow source's watermark, Spark's rules apply). A classic ``GroupedData``
tells them through its JVM objects (the grouping expressions, the analyzed plan's
``EventTimeWatermark`` nodes); a Spark Connect one through its Python objects (its grouping
columns, the ``WithWatermark`` nodes of its plan, the event time column and the delay text as
given to ``withWatermark``). A :class:`~fsstate_spark.operators.flows.Grouped` flow
(``flow.group_by("k")``) works too.

Invariants:

* Everything is checked when the flow is built, on the driver: the processor's type, the
  modes, the output schema, grouping columns and their presence, the initial state's grouping
  (same number of columns), ``EventTime`` without a watermark. Nothing fails later in a worker
  for a reason known here.
* An initial state is read in micro-batch 0 only (as Spark), shuffled with the input by the
  grouping key (its key columns cast to the input's key types, so both sides hash alike).
* ``eventTimeColumnName`` (Spark's output event time for downstream operators) is not
  supported: a non-empty value is refused with :class:`fsstate.errors.ConfigError`.
* What a Spark Connect client cannot tell is refused, not guessed
  (:class:`fsstate.errors.ConfigError`): a grouping that is not plain columns (expressions,
  ordinals, rollup, cube, pivot), several watermarks, a delay that is not a fixed duration, a
  watermark the server's analyzed plan shows but the client's plan hides (declared inside SQL
  text or a view).
* On Spark Connect the flow's ``foreachBatch`` function runs in a Python process of the server,
  on a session cloned from the client's per query; the initial state (a DataFrame of the
  client's session) is re-bound to the batch's session there (its plan, unchanged).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, GroupedData
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import StructType

from fsstate.errors import ConfigError
from fsstate.operators.base import SIDE
from fsstate_spark.operators.flows import Flow, Grouped, is_connect, parse_duration_ms, source
from fsstate_spark.operators.processor_stage import (
    INIT,
    INPUT,
    OUTPUT_MODES,
    TIME_MODES,
    ProcessorSpec,
    ProcessorStage,
)
from fsstate_spark.pyspark.plans import (
    analyzed_plan,
    column_reference,
    connect_grouping,
    connect_relation,
    explain_extended,
    grouped_frame,
    grouping_exprs,
    is_connect_grouped,
    parse_type_string,
    rebound,
    session_parse_ddl,
)
from fsstate_spark.state.map_order import ENCODING_CONF, UNSAFEROW

if TYPE_CHECKING:
    from pyspark.sql.connect.group import GroupedData as ConnectGroupedData

MAX_RECORDS_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
MAX_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
SAFECHECK_CONF = "spark.sql.execution.pandas.convertToArrowArraySafely"
INT_TO_DECIMAL_CONF = "spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled"
TIMEZONE_CONF = "spark.sql.session.timeZone"


def transform_with_state_in_pandas(
    grouped: GroupedData | ConnectGroupedData | Grouped,
    statefulProcessor: StatefulProcessor,
    outputStructType: StructType | str,
    outputMode: str,
    timeMode: str,
    initialState: GroupedData | ConnectGroupedData | None = None,
    eventTimeColumnName: str = "",
    *,
    name: str | None = None,
) -> Flow:
    """``grouped.transformWithStateInPandas(...)`` as a flow stage (pandas flavour).

    Args:
        grouped: ``df.groupBy(cols)`` of a streaming DataFrame, or ``flow.group_by(cols)``.
        statefulProcessor: the user's processor, unchanged.
        outputStructType: the output schema (``StructType`` or DDL string).
        outputMode: ``"Append"`` or ``"Update"``.
        timeMode: ``"None"``, ``"ProcessingTime"`` or ``"EventTime"``.
        initialState: ``init_df.groupBy(cols)`` of a batch DataFrame, read in micro-batch 0.
        eventTimeColumnName: not supported (must be empty).
        name: the stage's state name (default: the processor's class name).

    Raises:
        ConfigError: any argument is invalid (see the module docstring).
    """
    return _transform(
        grouped,
        statefulProcessor,
        outputStructType,
        outputMode,
        timeMode,
        initialState,
        eventTimeColumnName,
        name,
        pandas=True,
    )


def transform_with_state(
    grouped: GroupedData | ConnectGroupedData | Grouped,
    statefulProcessor: StatefulProcessor,
    outputStructType: StructType | str,
    outputMode: str,
    timeMode: str,
    initialState: GroupedData | ConnectGroupedData | None = None,
    eventTimeColumnName: str = "",
    *,
    name: str | None = None,
) -> Flow:
    """``grouped.transformWithState(...)`` as a flow stage (Row flavour); arguments as
    :func:`transform_with_state_in_pandas`."""
    return _transform(
        grouped,
        statefulProcessor,
        outputStructType,
        outputMode,
        timeMode,
        initialState,
        eventTimeColumnName,
        name,
        pandas=False,
    )


def _transform(
    grouped: GroupedData | ConnectGroupedData | Grouped,
    processor: StatefulProcessor,
    output: StructType | str,
    output_mode: str,
    time_mode: str,
    initial: GroupedData | ConnectGroupedData | None,
    event_time_column: str,
    name: str | None,
    *,
    pandas: bool,
) -> Flow:
    call = "transform_with_state_in_pandas" if pandas else "transform_with_state"
    if not isinstance(processor, StatefulProcessor):
        raise ConfigError(
            f"{call}: statefulProcessor must be a pyspark StatefulProcessor, got "
            f"{type(processor).__name__}"
        )
    if event_time_column:
        raise ConfigError(
            f"{call}: eventTimeColumnName={event_time_column!r} is not supported; a later "
            "stage takes its watermark from the flow's source"
        )
    flow, keys = _grouped_flow(grouped, call)
    df_cols = _columns(flow)
    missing = [k for k in keys if df_cols is not None and k not in df_cols]
    if missing:
        raise ConfigError(f"{call}: grouping column(s) {missing} are not in {df_cols}")
    session = _session(flow)
    out_type = _output_type(output, session, call)
    tmode = TIME_MODES.get(str(time_mode).strip().lower())
    omode = str(output_mode).strip().lower()
    if tmode is None:
        raise ConfigError(
            f"{call}: timeMode={time_mode!r}: use 'None', 'ProcessingTime' or 'EventTime'"
        )
    if omode not in OUTPUT_MODES:
        raise ConfigError(f"{call}: outputMode={output_mode!r}: use 'Append' or 'Update'")
    origin = flow.origin
    event_time = origin.time if origin is not None else None
    conf = _conf(session)
    init_df, init_keys = _initial(initial, keys, call)
    spec = ProcessorSpec(
        keys=tuple(keys),
        output_type=out_type,
        output_mode=omode,
        time_mode=tmode,
        pandas=pandas,
        event_time=event_time,
        watermarked=any(s.time is not None for s in flow.sources),
        initial_state=init_df is not None,
        init_keys=tuple(init_keys),
        timezone=conf.get(TIMEZONE_CONF) or "UTC",
        max_records_per_batch=_int(conf.get(MAX_RECORDS_CONF), 10_000),
        max_bytes_per_batch=byte_size(conf.get(MAX_BYTES_CONF), 2**31 - 1),
        safecheck=(conf.get(SAFECHECK_CONF) or "false").strip().lower() == "true",
        int_to_decimal=(conf.get(INT_TO_DECIMAL_CONF) or "false").strip().lower() == "true",
        state_encoding=(conf.get(ENCODING_CONF) or UNSAFEROW).strip().lower(),
    )
    op = ProcessorStage(name or type(processor).__name__, processor, spec, name is not None)
    records = [("input", origin)] if origin is not None and origin.time is not None else []
    if init_df is None:
        return flow._stage(op, keys, records)
    partition_keys = [f"_k{i}" for i in range(len(keys))]
    init_frame = init_df

    def prepare(df: DataFrame, epoch: int) -> DataFrame:
        init = _in_session(init_frame, df) if epoch == 0 else None
        return _with_initial(df, init, keys, init_keys)

    return flow._stage(op, partition_keys, records, prepare)


def _grouped_flow(grouped: Any, call: str) -> tuple[Flow, list[str]]:
    """The flow and grouping columns of ``df.groupBy(...)`` or ``flow.group_by(...)``."""
    if isinstance(grouped, Grouped):
        return grouped.flow, list(grouped.keys)
    if not _is_grouped(grouped):
        raise ConfigError(
            f"{call}: takes df.groupBy(columns) of a streaming DataFrame, or "
            f"flow.group_by(columns); got {type(grouped).__name__}"
        )
    df = grouped_frame(grouped)
    keys = _keys(grouped, call)
    watermark = _connect_watermark(df, call) if is_connect(df) else _watermark(df, call)
    return source(df, watermark=watermark), keys


def _is_grouped(obj: Any) -> bool:
    """``df.groupBy(...)`` of a classic or a Spark Connect session."""
    if isinstance(obj, GroupedData):
        return True
    return is_connect(obj) and is_connect_grouped(obj)


def _keys(grouped: Any, call: str) -> list[str]:
    """The column names ``df.groupBy(...)`` groups by (classic or Spark Connect)."""
    if is_connect(grouped):
        return _connect_grouping_columns(grouped, call)
    return _grouping_columns(grouped, call)


def _grouping_columns(grouped: GroupedData, call: str) -> list[str]:
    """The column names a classic ``GroupedData`` groups by."""
    exprs = grouping_exprs(grouped)
    if exprs is None:
        raise ConfigError(f"{call}: group the DataFrame with groupBy(column names)")
    names = []
    for i in range(exprs.size()):
        e = exprs.apply(i)
        cls = e.getClass().getSimpleName()
        if cls not in ("UnresolvedAttribute", "AttributeReference"):
            raise ConfigError(
                f"{call}: group by plain column names (got the expression {e.sql()}); add "
                "the expression as a column first (withColumn)"
            )
        names.append(str(e.name()))
    if not names:
        raise ConfigError(f"{call}: groupBy() without columns: give the grouping columns")
    return names


def _watermark(df: DataFrame, call: str) -> tuple[str, int] | None:
    """The (column, delay ms) of the ``withWatermark`` in ``df``'s plan, if any."""
    plan = analyzed_plan(df)
    found: list[tuple[str, int]] = []
    todo = [plan]
    while todo:
        node = todo.pop()
        if node.nodeName() == "EventTimeWatermark":
            from py4j.java_gateway import get_field

            delay = node.delay()
            months, days, micros = (
                int(get_field(delay, f)) for f in ("months", "days", "microseconds")
            )
            if months:
                raise ConfigError(f"{call}: a watermark delay in months is not supported")
            found.append((str(node.eventTime().name()), int(days) * 86_400_000 + micros // 1000))
        children = node.children()
        todo.extend(children.apply(i) for i in range(children.size()))
    if len(found) > 1:
        raise ConfigError(
            f"{call}: the DataFrame has {len(found)} watermarks; use one (withWatermark once)"
        )
    return found[0] if found else None


def _connect_grouping_columns(grouped: Any, call: str) -> list[str]:
    """The column names a Spark Connect ``GroupedData`` groups by (its ``_grouping_cols``)."""
    group_type, pivot_col, grouping_cols = connect_grouping(grouped)
    if group_type != "groupby" or pivot_col is not None:
        raise ConfigError(
            f"{call}: group the DataFrame with groupBy(column names) (not rollup, cube, pivot or "
            "grouping sets)"
        )
    names = []
    for col in grouping_cols:
        kind, name = column_reference(col)
        if kind != "ColumnReference" or not isinstance(name, str):
            raise ConfigError(
                f"{call}: group by plain column names (got the expression {col}); add the "
                "expression as a column first (withColumn)"
            )
        names.append(name)
    if not names:
        raise ConfigError(f"{call}: groupBy() without columns: give the grouping columns")
    return names


WITH_WATERMARK = "spark.connect.WithWatermark"  # the plan node of withWatermark (Connect proto)
ANALYZED = "== Analyzed Logical Plan =="


def _connect_watermark(df: Any, call: str) -> tuple[str, int] | None:
    """The (column, delay ms) of the ``withWatermark`` in a Spark Connect DataFrame's plan."""
    try:
        relation = connect_relation(df)
    except Exception as exc:
        raise ConfigError(f"{call}: cannot read the DataFrame's plan ({exc})") from None
    found: list[tuple[str, str]] = []
    todo = [relation]
    while todo:  # every message of the plan: relations, expressions, subqueries
        msg = todo.pop()
        if msg.DESCRIPTOR.full_name == WITH_WATERMARK:
            found.append((str(msg.event_time), str(msg.delay_threshold)))
        for fd, value in msg.ListFields():
            if fd.message_type is None:  # a scalar field
                continue
            if hasattr(value, "ListFields"):  # a message
                todo.append(value)
            elif hasattr(value, "values"):  # a map (of messages or of scalars)
                todo.extend(v for v in value.values() if hasattr(v, "ListFields"))
            else:  # repeated messages
                todo.extend(value)
    if len(found) > 1:
        raise ConfigError(
            f"{call}: the DataFrame has {len(found)} watermarks; use one (withWatermark once)"
        )
    if _analyzed_watermarks(df) > len(found):
        raise ConfigError(
            f"{call}: the DataFrame's watermark is declared where a Spark Connect client cannot "
            "read it (SQL text or a view); declare it with withWatermark on the DataFrame"
        )
    if not found:
        return None
    column, delay = found[0]
    text = delay.strip().lower()
    text = text[len("interval") :].strip() if text.startswith("interval") else text
    try:
        return column, parse_duration_ms(text)
    except ConfigError:
        raise ConfigError(
            f"{call}: watermark delay {delay!r}: use a fixed duration (e.g. '10 seconds'; "
            "months, years and microseconds are not supported)"
        ) from None


def _analyzed_watermarks(df: Any) -> int:
    """How many ``EventTimeWatermark`` nodes the server's analyzed plan of ``df`` has (0 when
    it cannot tell)."""
    try:
        text = explain_extended(df)
    except Exception:
        return 0
    analyzed = text.partition(ANALYZED)[2].partition("\n== ")[0]
    # tree lines as "+- ~EventTimeWatermark ..." ("~" marks a streaming node)
    lines = [line.lstrip(" :+-~'") for line in analyzed.splitlines()]
    return sum(1 for line in lines if line.startswith("EventTimeWatermark"))


def _in_session(init: DataFrame, df: DataFrame) -> DataFrame:
    """``init`` as a DataFrame of ``df``'s session: on Spark Connect the batch's session (a
    clone of the client's, per query) differs from the one ``init`` was built on; its plan is
    the same."""
    if not is_connect(init):
        return init
    connect: Any = init
    session: Any = df.sparkSession
    if connect.sparkSession.session_id == session.session_id:
        return init
    bound: DataFrame = rebound(connect, session)
    return bound


def _columns(flow: Flow) -> list[str] | None:
    origin = flow.origin
    return list(origin.df.columns) if origin is not None else None


def _session(flow: Flow) -> Any:
    return flow.sources[0].df.sparkSession


def _conf(session: Any) -> dict[str, str]:
    out = {}
    keys = (MAX_RECORDS_CONF, MAX_BYTES_CONF, SAFECHECK_CONF, INT_TO_DECIMAL_CONF)
    for key in (*keys, TIMEZONE_CONF, ENCODING_CONF):
        try:
            value = session.conf.get(key, None)
        except Exception:
            value = None
        if value:
            out[key] = str(value)
    return out


def _int(text: str | None, default: int) -> int:
    try:
        value = int(text) if text is not None else default
    except ValueError:
        return default
    return value if value > 0 else 2**31 - 1


_BYTE_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$")
_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def byte_size(text: str | None, default: int) -> int:
    """A Spark byte size (``"1048576"``, ``"64k"``, ``"256m"``, ``"1g"``; binary units, as
    Spark's ``byteStringAsBytes``); ``default`` when unset or unreadable, at most 2**31 - 1."""
    m = _BYTE_SIZE.match((text or "").lower())
    if m is None or int(m.group(1)) <= 0:
        return default
    return min(int(m.group(1)) * _BYTE_UNITS[m.group(2)], 2**31 - 1)


def _output_type(output: StructType | str, session: Any, call: str) -> StructType:
    if isinstance(output, StructType):
        return output
    if isinstance(output, str):
        try:
            parsed = session_parse_ddl(session, output)
        except Exception as exc:
            raise ConfigError(
                f"{call}: outputStructType {output!r} does not parse: {exc}"
            ) from None
        if parsed is None:
            parsed = parse_type_string(output)
        if isinstance(parsed, StructType):
            return parsed
    raise ConfigError(f"{call}: outputStructType must be a StructType or a DDL string")


def _initial(
    initial: GroupedData | ConnectGroupedData | None, keys: list[str], call: str
) -> tuple[DataFrame | None, list[str]]:
    if initial is None:
        return None, list(keys)
    if not _is_grouped(initial):
        raise ConfigError(f"{call}: initialState takes init_df.groupBy(columns)")
    df = grouped_frame(initial)
    if df.isStreaming:
        raise ConfigError(f"{call}: initialState must be a batch DataFrame, not a streaming one")
    init_keys = _keys(initial, call)
    if len(init_keys) != len(keys):
        raise ConfigError(
            f"{call}: initialState is grouped by {init_keys}, the input by {keys}: give the "
            "same number of grouping columns"
        )
    return df, init_keys


def _with_initial(
    df: DataFrame, init: DataFrame | None, keys: list[str], init_keys: list[str]
) -> DataFrame:
    """Input rows and initial state rows in one DataFrame: ``_side``, ``_k0..``, ``input``,
    ``init`` (structs of each side's row; the other side null)."""
    in_struct = F.struct(*[F.col(c) for c in df.columns])
    key_types = [df.schema[k].dataType for k in keys]
    init_type = None
    if init is not None:
        init_struct = F.struct(*[F.col(c) for c in init.columns])
        init_type = init.select(init_struct.alias("s")).schema["s"].dataType
    in_type = df.select(in_struct.alias("s")).schema["s"].dataType
    left = df.select(
        F.lit(0).cast("tinyint").alias(SIDE),
        *[F.col(k).alias(f"_k{i}") for i, k in enumerate(keys)],
        in_struct.alias(INPUT),
        F.lit(None).cast(init_type or StructType([])).alias(INIT),
    )
    if init is None:
        return left
    right = init.select(
        F.lit(1).cast("tinyint").alias(SIDE),
        *[F.col(k).cast(t).alias(f"_k{i}") for i, (k, t) in enumerate(zip(init_keys, key_types))],
        F.lit(None).cast(in_type).alias(INPUT),
        init_struct.alias(INIT),
    )
    return left.unionByName(right)
