"""Configuration of the engine and of partition stores: frozen, validated dataclasses.

:class:`StoreConfig` holds the settings of one partition store, :class:`EngineConfig` the
process-wide ones (the memory budget shared by every store, compaction bounds). The parsers of
setting values given as text are here too: :func:`parse_bytes` for sizes, :func:`parse_flag`
for every boolean setting of fsstate and its Spark adapter (one set of words everywhere), and
:func:`local_options_error`, the one refusal of object store settings given with a local path
(``tiered()``, the flow driver and both command lines say it alike).

Invariants:

* Every config object is immutable and validated in ``__post_init__``; an invalid value raises
  :class:`fsstate.errors.ConfigError` naming the setting and the accepted range. A number
  setting takes a number of its kind only (:func:`check_whole`, :func:`check_number`): a bool
  (``True`` is an int in Python) or a string is refused, never read as 1.
* Units are the last part of every name (``memory_limit_bytes``, ``orphan_grace_ms``).
* Every background loop and queue has an explicit bound here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fsstate.errors import ConfigError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})
FLAG_WORDS = "true or false (also 1/0, yes/no, on/off, in any case)"  # what parse_flag takes


def parse_flag(value: str | bool, name: str) -> bool:
    """Parse a boolean setting: a bool as it is, or a word of :data:`FLAG_WORDS`.

    Words are matched in any case, surrounding whitespace ignored: ``"true"``, ``" Yes"``,
    ``"ON"`` and ``"1"`` are True; ``"false"``, ``"no"``, ``"off"`` and ``"0"`` are False.

    Args:
        value: the setting's value.
        name: the setting as the message names it (e.g. ``storage setting allow_http``).

    Returns:
        The flag.

    Raises:
        ConfigError: anything else (another word, an empty string, a number, None), naming the
            setting, the value and the accepted words.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise ConfigError(f"{name}={value!r} is not a flag: it must be {FLAG_WORDS}")


def check_whole(name: str, value: object, minimum: int, hint: str = "") -> int:
    """A whole-number setting: an ``int`` (not a bool) of at least ``minimum``.

    Raises:
        ConfigError: anything else, naming the setting (``hint`` adds how to give it).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}={value!r} must be an integer >= {minimum}{hint}")
    return value


def check_number(name: str, value: object) -> float:
    """A real-number setting: an ``int`` or ``float`` (not a bool); its range is the caller's.

    Raises:
        ConfigError: anything else, naming the setting.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}={value!r} must be a number")
    return float(value)


def local_options_error(names: Iterable[str], given: str, where: str) -> ConfigError:
    """The refusal of object store settings given with a local path, where they cannot apply.

    Args:
        names: the settings given (never their values: they may be secrets).
        given: where they came from, as the user wrote them (``-o``, ``storage_options of
            tiered() or spark.fsstate.storage.*``).
        where: the local location as the message shows it (``state_uri='/data/state'``).
    """
    return ConfigError(
        f"object store settings ({', '.join(sorted(names))}; from {given}) were given, but "
        f"{where} is a local path where they cannot apply: remove them, or give an object "
        "store URI (s3://bucket/prefix, ...)"
    )


def parse_bytes(value: int | str, setting: str = "memory_limit") -> int:
    """Parse a byte size: an int, or a string such as ``"256MiB"``, ``"1.5GB"``, ``"4096"``.

    Args:
        value: the size.
        setting: the name of the setting, used in the error message.

    Returns:
        The size in bytes.

    Raises:
        ConfigError: if the value is not a positive size.
    """
    if isinstance(value, bool):
        raise ConfigError(
            f"{setting}={value!r} is not a size: give bytes or a string like '256MiB'"
        )
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ConfigError(
                f"{setting}={value!r} is not a size: use bytes or a number with a unit "
                "(B, KB, MB, GB, KiB, MiB, GiB), e.g. '256MiB'"
            )
        size = int(float(match.group(1)) * _UNITS[unit])
    else:
        raise ConfigError(
            f"{setting}={value!r} is not a size: give bytes or a string like '256MiB'"
        )
    if size <= 0:
        raise ConfigError(f"{setting}={value!r} must be a positive number of bytes")
    return size


@dataclass(frozen=True)
class StoreConfig:
    """Settings of one partition store.

    Attributes:
        retain_versions: how many committed versions stay restorable (Spark's
            ``minBatchesToRetain`` defaults to 100 too); older manifests and files no retained
            manifest references are deleted after each commit.
        row_group_rows: most rows per Parquet row group.
        row_group_bytes: target bytes per row group (the unit of a pruned point read).
        compression: Parquet codec of state files.
        orphan_grace_ms: an unreferenced file younger than this is never deleted (it may belong
            to a commit under way in another attempt).
        orphan_scan_every_commits: how often (in commits) the store lists its directory to
            delete orphans left by failed attempts; the scan is bounded by the directory size.
        fsync: flush every published local file, and its directory entry, to disk before a
            manifest can name it (a committed version survives a power loss); False skips
            the flushes (faster commits, for scratch state). A FileIO passed to the store
            keeps its own setting.
        record_summary: record what each version did in its manifest (``summary``: rows
            total, updated, removed and expired, I/O, memory, commit time;
            :class:`fsstate.stats.VersionSummary`). Exact row totals keep a count per loaded
            view and resolve blind writes once per seal (:mod:`fsstate.store.summary`); False
            writes no summary and keeps none of that.
    """

    retain_versions: int = 100
    row_group_rows: int = 64 * 1024
    row_group_bytes: int = 1024 * 1024
    compression: str = "zstd"
    orphan_grace_ms: int = 10 * 60 * 1000
    orphan_scan_every_commits: int = 50
    fsync: bool = True
    record_summary: bool = True

    def __post_init__(self) -> None:
        check_whole("retain_versions", self.retain_versions, 1)
        check_whole("row_group_rows", self.row_group_rows, 1)
        check_whole("row_group_bytes", self.row_group_bytes, 1024)
        if self.compression not in ("zstd", "snappy", "lz4", "gzip", "none"):
            raise ConfigError(
                f"compression={self.compression!r}: use one of zstd, snappy, lz4, gzip, none"
            )
        check_whole("orphan_grace_ms", self.orphan_grace_ms, 0)
        check_whole("orphan_scan_every_commits", self.orphan_scan_every_commits, 1)
        if not isinstance(self.fsync, bool):
            raise ConfigError(f"fsync={self.fsync!r} must be True or False")
        if not isinstance(self.record_summary, bool):
            raise ConfigError(f"record_summary={self.record_summary!r} must be True or False")


DEFAULT_MEMORY_LIMIT = 1024**3


@dataclass(frozen=True)
class EngineConfig:
    """Process-wide settings.

    Attributes:
        memory_limit_bytes: the byte budget of everything the engine holds in memory.
        high_watermark: fraction of the budget above which the controller reclaims.
        low_watermark: fraction of the budget reclaiming brings usage down to.
        block_cache_fraction: share of the budget the block cache may use.
        check_every_growth: growth events between two budget checks (bounds the overshoot).
        compaction_max_runs: a table with more runs than this that one key may be in (its
            read depth), or with more than 8 times this many runs in all, is queued for
            compaction (:func:`fsstate.storage.depth.needs_merge`).
        compaction_bytes_per_round: most run bytes one compaction round merges.
        compaction_queue_max: bound of the compaction queue (extra requests are dropped and
            made again at the next commit).
        background_compaction: run compaction on a background thread (else only on request).
    """

    memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT
    high_watermark: float = 0.75
    low_watermark: float = 0.45
    block_cache_fraction: float = 0.2
    check_every_growth: int = 512
    compaction_max_runs: int = 8
    compaction_bytes_per_round: int = 64 * 1024 * 1024
    compaction_queue_max: int = 256
    background_compaction: bool = True

    def __post_init__(self) -> None:
        check_whole("memory_limit", self.memory_limit_bytes, 1024 * 1024, " (at least 1 MiB)")
        for name in ("high_watermark", "low_watermark", "block_cache_fraction"):
            check_number(name, getattr(self, name))
        if not 0 < self.low_watermark < self.high_watermark <= 1:
            raise ConfigError(
                f"watermarks must satisfy 0 < low ({self.low_watermark}) < high "
                f"({self.high_watermark}) <= 1"
            )
        if not 0 <= self.block_cache_fraction < 1:
            raise ConfigError(f"block_cache_fraction={self.block_cache_fraction} must be in [0, 1)")
        for name in ("check_every_growth", "compaction_max_runs", "compaction_queue_max"):
            check_whole(name, getattr(self, name), 1)
        if self.compaction_max_runs < 2:
            raise ConfigError("compaction_max_runs must be >= 2")
        check_whole(
            "compaction_bytes_per_round", self.compaction_bytes_per_round, 1024 * 1024, " (1 MiB)"
        )
        if not isinstance(self.background_compaction, bool):
            raise ConfigError(
                f"background_compaction={self.background_compaction!r} must be True or False"
            )
