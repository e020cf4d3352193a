"""The ``fsstate`` command line: list, stats, show, diff, verify (:mod:`fsstate.cli.verify`), gc
and compact stored state, and list and drop its branches (:mod:`fsstate.cli.branches`).

``python -m fsstate --help`` or the ``fsstate`` console script (``pip install 'fsstate[cli]'``:
click for the commands, rich for tables and progress bars). Every command takes the state
root first: a local path or an object store URI (``s3://bucket/prefix``; settings from the
``AWS_*`` variables or ``-o name=value``), and finds every partition store below it at any
depth (a tiered Spark query's stores sit under ``<state_uri>/<query id>/``).

The package, top down: :mod:`~fsstate.cli.commands` (the group and the reading and compacting
commands), :mod:`~fsstate.cli.verify` and :mod:`~fsstate.cli.gc` (``gc``, ``drop-branch``),
:mod:`~fsstate.cli.branches`, :mod:`~fsstate.cli.tables` and :mod:`~fsstate.cli.history` (what
the commands print), and :mod:`~fsstate.cli.console`, the plumbing ``fsstate-spark`` shares
(the group's options, errors as one line, tables that fit, progress bars).

Invariants:

* ``list``, ``stats``, ``show``, ``diff`` and ``verify`` never write. ``show`` and ``diff`` read
  exactly what the engine's reads return (:mod:`fsstate.inspect`).
* Branches (lineages of a copied, restored or rolled-back query, :mod:`fsstate.store.lineage`)
  are never read silently: ``show``, ``diff`` and ``stats`` read the trunk unless ``--branch``
  names one, and say on stderr which branches the stores read have; ``list`` counts each
  operator's branches; ``verify`` checks every branch's retained versions too.
* An operator's partitions that disagree on their latest version (:func:`fsstate.inspect.skews`)
  are never hidden: ``list`` shows each partition behind or ahead (and says so on stderr),
  ``verify`` names them and exits 1, and ``show`` and ``diff`` never mix versions: without
  ``--version`` they refuse skewed partitions, and a version some selected partition lacks is
  refused before anything is read; both refusals name the partitions and the version to pass.
* ``gc`` and ``drop-branch`` delete only what no retained manifest of any remaining branch
  references, older than the grace time (:mod:`fsstate.cli.gc`).
* ``compact`` publishes a new version, through an epoch (:mod:`fsstate.store.maintenance`), so
  it refuses stores a streaming writer owns (a tiered query or the operators' runner record
  one in the manifest, or their operator's kind in its layout record): their version numbers
  are batch ids, and a version published beside them would meet the query's next batch.
  Those stores compact in their writer's own tasks.
* ``verify --checkpoint`` reads the Spark checkpoint as files (no Spark: the Spark-side
  command line, ``fsstate-spark``, is for steps that need a SparkSession) and compares each
  operator's partitions with its last committed batch
  (:func:`fsstate.inspect.checkpoint.check_checkpoint`).
* Exit codes: 0 done; 1 ``verify`` found a damaged or missing file, skewed partitions, a
  partition with no version, or (``--checkpoint``) partitions behind or ahead of the
  checkpoint (each named on stderr);
  2 bad usage (click's usage message) or any error (one line on stderr naming the object and
  what to do; also for an error fsstate did not type, which is reported as a bug; refusals of
  the command's own input, :mod:`fsstate.cli.console`, are ``ConfigError``). ``--debug`` (before
  the command) logs the storage client's full reports and tracebacks to stderr.
* ``--json`` prints one JSON document on stdout instead of tables; it and ``-o`` work before
  the command name or after it (:class:`fsstate.cli.console.ErrorsAsOneLine`).
"""

from __future__ import annotations

try:
    import click  # noqa: F401 - the commands and their options
    import rich  # noqa: F401 - the tables and progress bars (fsstate.cli.console)
except ImportError as exc:  # pragma: no cover - the cli extra is missing
    raise SystemExit(
        f"fsstate's command lines need click and rich ({exc}): pip install 'fsstate[cli]'"
    ) from None

from fsstate.cli.commands import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Entry point of the ``fsstate`` console script and ``python -m fsstate``."""
    cli(prog_name="fsstate")
