"""Where ``spark_scale``'s state comes from and what it weighs (part of the ``spark_scale``
suite): the loaded origins and their copies, the bytes a query writes and keeps, the peak RSS
of Spark's Python workers.

* Loading (:func:`load_bases`): per partition count, one loader query per origin
  (:data:`~bench.suites.spark_scale_plan.ORIGINS`: ``tiered()`` Row and pandas and the flow
  driver with :class:`~bench.harness.operator_queries.LoadAgg` under the running aggregate's
  state name, the Java processor itself) takes the load batches one at a time; at each key
  count a cell needs, the loaders stop and their checkpoints and state are copied to a *base*
  of that count, then they go on. Each key count is loaded once per origin; not timed.
* A cell's copy of a base (:func:`link_tree`): the directory tree with every file hard-linked.
  Spark's checkpoint files and fsstate's files are written to a temporary name and renamed (or
  linked) into place, never changed in place, so a copy and its base never see each other's
  writes; a copy restarts as its base would (the same checkpoint, the same state files), in
  O(files). A copy that runs beside another copy of its base gets a query id of its own
  (:func:`new_query_id`).
* S3 (:func:`upload_tree`): a copy of a base's ``tiered()`` state uploaded to the S3 server
  through fsstate's FileIO.
* Bytes (:func:`listing`, :func:`bytes_written`, :func:`bytes_on_disk`): a query's durable
  files are its directory (checkpoint and state) less its input; the bytes written between two
  listings are the new files' sizes (a file replaced under its name counts whole) plus what
  existing files grew.
* Peak worker RSS (:class:`WorkerPeaks`): a thread reads ``VmHWM`` (the kernel's peak resident
  set) of every Python worker process under this one (Spark's daemon and the workers it
  forks: ``python -m pyspark.daemon ...``; not the JVM, whose command line names the worker
  module in a setting) every half second, and once more at the end, so a worker that Spark
  replaces (after a minute without tasks) is counted too.

Invariants: nothing here times anything; a base is only read once made; a listing skips the
query's ``input`` directory (hard links of the batch files).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.harness.common import BenchContext
from bench.harness.operator_queries import INPUT_SCHEMA, LoadAgg
from bench.harness.processor_queries import ChecksumSink, wait_batch
from bench.harness.processor_sides import start_side
from bench.harness.spark import hand_in
from bench.suites.spark_scale_data import load_batch, load_ranges
from bench.suites.spark_scale_plan import MIB, ORIGINS, keys_label

STATE_NAME = "running_agg"  # the operator / stage name of every Python side's state
TRIGGER = "200 milliseconds"
MAX_CACHED_STORES = 4096
MTIME0 = 1_600_000_000  # batch file b of a lineage gets MTIME0 + 10 b (the file source's order)
WORKER_MARKS = ("pyspark.daemon", "pyspark.worker", "pyspark_fsstate.worker")  # python -m ...

Listing = dict[str, tuple[int, int]]  # relative path -> (inode, size)


@dataclass(frozen=True)
class Base:
    """State loaded to ``keys`` keys at ``partitions`` partitions: one directory per origin
    under ``root`` (``checkpoint``, and ``state`` for ``tiered()``), the last load batch id."""

    partitions: int
    keys: int
    root: Path
    last_batch: int


def link_tree(src: Path, dst: Path) -> None:
    """Copy the tree ``src`` to ``dst`` with every file hard-linked, ``input`` left out."""
    shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("input"))


def _loader(spark: Any, origin: str, root: Path, partitions: int) -> Any:
    flavour, how = ORIGINS[origin]
    (root / "input").mkdir(parents=True, exist_ok=True)
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
    return start_side(
        spark,
        df.parquet(str(root / "input")),
        flavour=flavour,
        side=how,
        name=f"load_{origin}_p{partitions}",
        root=root,
        sink=ChecksumSink(set()),
        trigger=TRIGGER,
        partitions=partitions,
        max_cached_stores=MAX_CACHED_STORES,
        processor=None if how == "java" else LoadAgg(),
        state_name=STATE_NAME,
    )


def load_bases(
    ctx: BenchContext,
    spark: Any,
    partitions: int,
    wanted: dict[int, set[str]],
    rows: int,
    scratch: Path,
) -> dict[int, Base]:
    """Load every origin of ``wanted`` (keys -> origins) at ``partitions`` partitions (the
    session's shuffle partitions are set here) in batches of ``rows`` ids, up to the largest
    count that wants it, copying a base of the origins each count wants; returns the bases by
    key count."""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))  # read at each start
    last = {
        o: max(k for k, os_ in wanted.items() if o in os_) for o in set().union(*wanted.values())
    }
    roots = {o: scratch / "load" / f"p{partitions}" / o for o in last}
    queries = {o: _loader(spark, o, roots[o], partitions) for o in sorted(last)}
    source = scratch / "load" / "batches"
    source.mkdir(parents=True, exist_ok=True)
    bases: dict[int, Base] = {}
    try:
        for b, (start, stop) in enumerate(load_ranges(list(wanted), rows)):
            path = source / f"p{partitions}-load-{b:05d}.parquet"
            pq.write_table(load_batch(start, stop), path)
            for o, q in queries.items():
                hand_in(path, roots[o] / "input" / path.name, MTIME0 + 10 * b)
                ms, got = wait_batch(q, f"load {o}", b, stop - start)
                ctx.log(f"  load p{partitions} batch {b} {o:<13} {got:,} keys {ms / 1000:7.2f} s")
            path.unlink()  # the loaders' input directories keep their links
            if stop in wanted:
                for q in queries.values():
                    q.stop()
                bases[stop] = _snapshot(
                    {o: roots[o] for o in wanted[stop]}, scratch, partitions, stop, b
                )
                ctx.log(
                    f"  base p{partitions} {keys_label(stop)} keys copied: {sorted(wanted[stop])}"
                )
                queries = {
                    o: _loader(spark, o, roots[o], partitions)
                    for o in sorted(last)
                    if last[o] > stop
                }
    finally:
        for q in queries.values():
            q.stop()
    return bases


def _snapshot(roots: dict[str, Path], scratch: Path, partitions: int, keys: int, b: int) -> Base:
    root = scratch / "base" / f"p{partitions}_{keys_label(keys)}"
    for origin, src in roots.items():
        link_tree(src, root / origin)
    return Base(partitions, keys, root, b)


def new_query_id(root: Path) -> str:
    """Give the copy under ``root`` a query id of its own: a new ``checkpoint/metadata`` (a
    file in place of the hard link to the base's; Spark's checkpoint keeps the id there alone,
    and its checksum file goes) and, for ``tiered()``, its state directory moved to the new id
    (``<state_uri>/<query id>``, where ``tiered()`` keeps a query's state); returns the id. The
    flow driver's state is inside the checkpoint and claims the copy on its first batch."""
    checkpoint = root / "checkpoint"
    old = json.loads((checkpoint / "metadata").read_text(encoding="utf-8"))["id"]
    query_id = str(uuid.uuid4())
    tmp = checkpoint / "metadata.tmp"
    tmp.write_text(json.dumps({"id": query_id}), encoding="utf-8")
    os.replace(tmp, checkpoint / "metadata")
    (checkpoint / ".metadata.crc").unlink(missing_ok=True)
    if (root / "state" / old).exists():
        (root / "state" / old).rename(root / "state" / query_id)
    return query_id


def upload_tree(src: Path, uri: str, options: dict[str, str]) -> int:
    """Upload every file under ``src`` to ``uri`` (same relative paths); returns the bytes."""
    from fsstate.storage.fileio import FileIO
    from fsstate.storage.location import Location

    fileio = FileIO(Location.parse(uri, options))
    total = 0
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        data = path.read_bytes()
        fileio.publish_bytes(path.relative_to(src).as_posix(), data)
        total += len(data)
    return total


def listing(root: Path) -> Listing:
    """Every file under ``root`` but its ``input`` directory: path -> (inode, size)."""
    out: Listing = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and "input" in dirnames:
            dirnames.remove("input")
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except FileNotFoundError:  # removed while listed (retention, maintenance)
                continue
            out[os.path.relpath(full, root)] = (st.st_ino, st.st_size)
    return out


def bytes_written(before: Listing, after: Listing) -> int:
    """Bytes written between two listings (module docstring)."""
    total = 0
    for path, (ino, size) in after.items():
        old = before.get(path)
        if old is None or old[0] != ino:
            total += size
        elif size > old[1]:
            total += size - old[1]
    return total


def bytes_on_disk(files: Listing) -> int:
    """The size of every file of a listing."""
    return sum(size for _, size in files.values())


def _vm_hwm_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass
class WorkerPeaks:
    """Peak RSS (MiB) of each Python worker process under this one (module docstring)."""

    every_s: float = 0.5
    peaks: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _error: Exception | None = None

    def sample(self) -> None:
        """Read the peak of every worker alive now."""
        import psutil

        for proc in psutil.Process().children(recursive=True):
            try:
                argv = proc.cmdline()
            except psutil.Error:
                continue
            # the module as an argument of its own: the JVM's command line names the worker
            # module inside a --conf, and so does a child it spawns until that child execs
            if any(m in argv for m in WORKER_MARKS):
                peak = _vm_hwm_mib(proc.pid)
                if peak is not None:
                    self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0.0), peak)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                self.sample()
        except Exception as exc:  # surfaced by running(): a peak missed is no figure
            self._error = exc

    @contextmanager
    def running(self) -> Iterator[WorkerPeaks]:
        """Sample in a thread while the block runs, and once at its end.

        Raises:
            RuntimeError: the sampling thread failed.
        """
        thread = threading.Thread(target=self._loop, name="worker-peaks", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(5)
        self.sample()
        if self._error is not None:
            raise RuntimeError(f"sampling the workers' peak RSS failed: {self._error!r}")


def mib(n: float) -> float:
    """Bytes in MiB."""
    return n / MIB
