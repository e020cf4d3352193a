"""What :mod:`tests.devkit.test_python_forkserver` runs through the fork server: it reports
how it was started and exits with the status its environment asks for.

Invariants: imports ``fsstate_spark`` if ``PROBE_IMPORT_OWN`` is set (and reports from
where), prints one JSON line to stdout (flushed) before anything else, one line to stderr,
then sleeps ``PROBE_SLEEP_S`` seconds (if set) and exits with ``PROBE_STATUS``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    """Report, wait, exit."""
    report = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "marker": os.environ.get("PROBE_MARKER"),
        "path_head": sys.path[:3],
        "pandas_loaded": "pandas" in sys.modules,
        "own_loaded": "fsstate_spark" in sys.modules,
    }
    if os.environ.get("PROBE_IMPORT_OWN"):
        import fsstate_spark  # where this start's PYTHONPATH finds it

        report["own_file"] = fsstate_spark.__file__
    print(json.dumps(report), flush=True)
    print("probe stderr", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("PROBE_SLEEP_S", "0")))
    sys.exit(int(os.environ.get("PROBE_STATUS", "0")))


if __name__ == "__main__":
    main()
