"""Names vulture reports as unused that are used: read by a framework, a protocol or users.

``make lint`` runs vulture over the packages with this file (``--min-confidence 60``, see
``[tool.vulture]`` in pyproject.toml); each expression below marks a name as used. Never
imported or run: it is type-checked (mypy), so an entry whose name is gone or renamed fails
``make lint`` instead of silently whitelisting nothing.

Invariants:

* Only true false positives: each group says who uses its names. A name that nothing uses is
  deleted, not listed here; the one exception is the last group, dead names in modules another
  change in flight owns, listed until that change removes them.
* A name used only by tests or benchmarks belongs here only if it is public API: a documented
  diagnostic or a method users call.
"""

from __future__ import annotations

import decimal
import zipfile
from typing import Any, cast

from fsstate.cli import commands
from fsstate.cli.console import ErrorsAsOneLine, Failed
from fsstate.codegen import _SourceLoader
from fsstate.compaction import Compactor
from fsstate.operators.local import LocalQuery
from fsstate.stats import CommitInfo, ProcessStats, TableStats, VersionSummary
from fsstate.storage.fileio import _CrcSink
from fsstate.storage.leases import LeaseBook
from fsstate.storage.objects import _RangeReader
from fsstate.store.epoch import EpochRun
from fsstate.store.partition import PartitionStore
from fsstate.store.pool import StorePool
from fsstate.tables.ttl_index import TtlIndex
from fsstate_spark import cli as spark_cli
from fsstate_spark import pyspark as spark_adapter
from fsstate_spark import runtime
from fsstate_spark.metrics.listen import FsStateListener, _ProgressOnly
from fsstate_spark.metrics.prometheus import PrometheusExporter, _Quiet
from fsstate_spark.operators.driver import Driver, _Receipts
from fsstate_spark.operators.flows import Flow
from fsstate_spark.pyspark.listener import JvmTargetListener
from fsstate_spark.sources.source import FsStatePushdownReader
from fsstate_spark.sources.summary import StateSummary
from fsstate_spark.state.handles import TieredHandle, TieredListState, TieredMapState
from fsstate_spark.tiered import lifecycle
from fsstate_spark.tiered.fast_loop import ArrowStreamIn, ArrowStreamOut
from fsstate_spark.tiered.lifecycle import StoreCache

_: Any = None  # an instance: ``cast(C, _).a`` is attribute ``a`` of a C (checked by mypy)

# Spark calls these by name: the state handle, list and map state of transformWithState...
TieredHandle.getListState
TieredHandle.getMapState
TieredHandle.deleteIfExists
TieredListState.appendValue
TieredListState.appendList
TieredMapState.getValue
TieredMapState.containsKey
TieredMapState.updateValue
TieredMapState.iterator
TieredMapState.removeKey
# ... a data source reader's filter pushdown, and an accumulator's merge (AccumulatorParam)
FsStatePushdownReader.pushFilters
_Receipts.addInPlace

# Python protocols: file objects handed to pyarrow, the loader linecache asks for generated
# source, click's exit code of an exception and the class a group's command decorator makes,
# click commands registered by their decorator
_CrcSink.tell
_CrcSink.writable
_RangeReader.readable
_RangeReader.seekable
_RangeReader.writable
_RangeReader.tell
_RangeReader.seek
_SourceLoader.get_source
Failed.exit_code
ErrorsAsOneLine.command_class
commands.list_cmd
commands.show
spark_cli.rollback
spark_cli.repair
# an object's class, set to swap a deleted state variable's methods (fsstate_spark.state.handles)
_.__class__

# Attributes the standard library reads: a zip entry's compression and mode, decimal precision
cast(zipfile.ZipInfo, _).compress_type
cast(zipfile.ZipInfo, _).external_attr
cast(decimal.Context, _).prec

# Public results: fields of the figures users and the demo read (fsstate.stats, re-exported
# by fsstate)
cast(CommitInfo, _).files_written
cast(CommitInfo, _).duration_ms
cast(TableStats, _).runs_in_memory
cast(TableStats, _).segment_bytes
cast(TableStats, _).ttl_entries
cast(ProcessStats, _).compaction_bytes_written
cast(ProcessStats, _).compaction_errors

# Public API: the flow DSL of fsstate_spark.operators (examples, docs), and store methods
Flow.transform
Flow.window_aggregate
Flow.session_aggregate
Flow.deduplicate
Flow.retract_aggregate
PartitionStore.retained_versions
PartitionStore.committed_versions  # public: a store's versions on one lineage (docs/api.md)
PartitionStore.collect_garbage  # public: fsstate gc of one store (docs/operations.md)
StateSummary.rows_by_table

# Documented diagnostics: counters and hooks read by tests and benchmarks
cast(Compactor, _).stale_skips
cast(Compactor, _).abandoned
Compactor.wait_idle
LeaseBook.rotate  # tests age a process's tag rather than wait rotate_ms
cast(LocalQuery, _).last_watermarks
cast(TtlIndex, _).lookups
cast(Driver, _).manifest_reads
EpochRun.of_store  # public: an epoch of a store its caller opened (the model test's)
StorePool.holds  # public diagnostic: whether the pool holds a partition's store (tests)
_.fsstate_driver  # set on the DataStreamWriter ops.write_stream returns
runtime.storage_requests
runtime.storage_request_counts
lifecycle.store_cache
cast(StoreCache, _).acquire_s
cast(StoreCache, _).finish_s
# PySpark's worker calls a task's deserializer and serializer (fsstate's keyed loop)
ArrowStreamIn.load_stream
ArrowStreamOut.dump_stream
# what the running PySpark has, for callers and the tests (the conformance suite)
spark_adapter.ROW_TRANSFORM_WITH_STATE
# the Prometheus exporter: public API, and the hooks of the stdlib HTTP handler it serves with
PrometheusExporter.forget
_Quiet.timeout
_Quiet.log_message
# version summary figures: written to manifests (to_json iterates the fields), read by tools
VersionSummary.memory_hot_bytes
VersionSummary.memory_sealed_bytes
VersionSummary.files_total
VersionSummary.versions_retained
VersionSummary.summary_format
# Spark's listener bus calls a StreamingQueryListener's callbacks (fsstate_spark.metrics.listen)
FsStateListener.onQueryStarted
FsStateListener.onQueryIdle
FsStateListener.onQueryTerminated
FsStateListener.onQueryProgress
# PySpark's addListener / removeListener read a listener's _jlistener; Py4J reads the Java
# interface a Python callback object implements (fsstate_spark.metrics.listen._ProgressOnly)
JvmTargetListener._jlistener
_ProgressOnly.Java
_ProgressOnly.Java.implements
_ProgressOnly.onQueryStarted
_ProgressOnly.onQueryIdle
