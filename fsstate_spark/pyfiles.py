"""Build a zip of the ``fsstate`` and ``fsstate_spark`` packages for ``spark-submit --py-files``.

Usage::

    python -m fsstate_spark.pyfiles dist/fsstate-pyfiles.zip
    spark-submit --py-files dist/fsstate-pyfiles.zip my_job.py

Invariants:

* The zip holds only the packages' Python sources (and ``py.typed`` markers), at the zip root,
  so Python imports them straight from the archive; caches and compiled files are left out.
* The archive is reproducible: entries are sorted and carry a fixed timestamp.
* Third-party dependencies (pyarrow, numpy, pandas) are not bundled: executors need them
  installed, as pyspark's Arrow-based APIs do anyway.
* fsstate's keyed loop (``spark.python.worker.module=pyspark_fsstate.worker``) cannot come from
  this zip, and the zip does not carry it: Spark's daemon imports the worker module when it
  forks a worker, before a task puts ``--py-files`` on the path, so the module must be
  installed in the executors' Python (a wheel in their environment, ``spark.archives`` with a
  packed environment, or ``spark.executorEnv.PYTHONPATH`` naming a directory that holds
  fsstate). With the zip alone, leave that setting out: ``tiered()`` then runs on PySpark's
  own per-key loop and says so once in the worker log.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

PACKAGES = ("fsstate", "fsstate_spark")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def package_files(package: str) -> list[tuple[Path, str]]:
    """(file on disk, name in the archive) for every source file of an importable package."""
    module = __import__(package)
    root = Path(module.__file__ or "").resolve().parent
    out = []
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        if path.suffix == ".py" or path.name == "py.typed":
            out.append((path, f"{package}/{path.relative_to(root).as_posix()}"))
    return out


def build(target: str | Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Write the archive; returns the names it holds.

    Args:
        target: the zip file to write (parent directories are created).
        packages: importable packages to include.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    tmp = target.with_suffix(target.suffix + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for package in packages:
            for path, name in package_files(package):
                info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
                names.append(name)
    tmp.replace(target)
    return names


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="dist/fsstate-pyfiles.zip")
    args = parser.parse_args(argv)
    names = build(args.target)
    size = Path(args.target).stat().st_size
    print(f"wrote {args.target}: {len(names)} files, {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
