"""The client of :mod:`devkit.python_forkserver`: run ``python -m <module>`` in a fork of the
warm server instead of a new interpreter.

Run by ``devkit/bin/spark-python`` as ``<python> -S -I forkserver_client.py <socket> -m
<module>`` (no site, no environment: it starts in milliseconds and imports the standard
library only). It hands the server its standard streams (``SCM_RIGHTS``), arguments, working
directory and whole environment, then waits for the fork's exit status and exits with it.

Invariants:

* Whatever does not go to plan before the server has accepted (no server, a refusal, a
  broken connection, no answer in :data:`HANDSHAKE_TIMEOUT_S`) ends in ``exec`` of the
  interpreter named by ``FSSTATE_WORKER_PYTHON`` with the same arguments: the worker then
  starts as it would without the server.
* Once accepted, this process stands for the fork: the fork exits when this process's
  connection closes (this process killed, as Spark does to end a worker), and this process
  exits with the fork's status (1 if the fork died without sending one).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

STATUS = struct.Struct("!i")
LENGTH = struct.Struct("!Q")
HANDSHAKE_TIMEOUT_S = 10.0


def fallback(python: str, args: list[str]) -> None:
    """Start the worker as a new interpreter (replaces this process)."""
    os.execv(python, [python, *args])


def main() -> None:
    """Hand the worker to the server, wait for its status, exit with it."""
    path, args = sys.argv[1], sys.argv[2:]
    python = os.environ["FSSTATE_WORKER_PYTHON"]
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(HANDSHAKE_TIMEOUT_S)  # a stuck server: start the worker here instead
        conn.connect(path)
        request = json.dumps(
            {"python": python, "argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}
        ).encode()
        socket.send_fds(conn, [LENGTH.pack(len(request)) + request], [0, 1, 2])
        accepted = conn.recv(1) == b"y"
        conn.settimeout(None)  # the worker runs as long as Spark lets it
    except OSError:
        accepted = False
    if not accepted:
        fallback(python, args)
    data = b""
    while len(data) < STATUS.size:
        chunk = conn.recv(STATUS.size - len(data))
        if not chunk:
            sys.exit(1)  # the fork died without a status (killed)
        data += chunk
    sys.exit(STATUS.unpack(data)[0])


if __name__ == "__main__":
    main()
