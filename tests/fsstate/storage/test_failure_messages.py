"""What a failed object store request says: one line naming the operation and the object, the
cause in a few words (connection refused, DNS, timeout, access denied) and the settings to
check, never a secret; the client's tens of lines of debug structure go to the debug log only.
A panic of the client (a ``BaseException``) comes out as a typed error too.

Real parts only: a closed port, a socket that never answers, a host that cannot resolve, the
S3 test server with a wrong secret, and a session token the client panics on.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from devkit.s3_server import S3Info
from fsstate import PartitionStore
from fsstate.errors import StorageError
from fsstate.storage.fileio import FileIO
from fsstate.storage.location import Location
from tests.support.plugin import s3_options

SECRET = "s3cr3t-Value-0123456789"
KEY_ID = "AKIAEXAMPLEKEY"
MAX_CHARS = 400  # a message a terminal shows whole


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _location(endpoint: str, **extra: str) -> Location:
    return Location.parse(
        "s3://bucket/state",
        {
            "endpoint": endpoint,
            "access_key_id": KEY_ID,
            "secret_access_key": SECRET,
            "region": "us-east-1",
            "retries_max": "0",
            **extra,
        },
    )


def _assert_one_line(msg: str) -> None:
    assert "\n" not in msg and len(msg) <= MAX_CHARS, msg
    assert "Debug source" not in msg and "RetryError" not in msg, msg
    assert SECRET not in msg and KEY_ID not in msg, msg


@pytest.mark.parametrize("case", ["refused", "dns", "timeout"])
def test_an_unreachable_store_says_what_failed_why_and_what_to_check(
    case: str, silent_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, cause, extra = {
        "refused": (f"http://127.0.0.1:{closed_port()}", "connection refused", {}),
        "dns": ("http://no-such-host.invalid:9000", "DNS", {}),
        "timeout": (
            f"http://127.0.0.1:{silent_port}",
            "timeout",
            {"timeout": "1s", "connect_timeout": "1s"},
        ),
    }[case]
    loc = _location(endpoint, **extra)
    with caplog.at_level(logging.DEBUG, logger="fsstate"), pytest.raises(StorageError) as info:
        PartitionStore.open(loc, "op", 0, version=3)
    msg = str(info.value)
    _assert_one_line(msg)
    assert "s3://bucket/state/op/0/manifests/" in msg  # the object
    assert cause in msg  # why
    assert "endpoint" in msg and "AWS_ENDPOINT_URL" in msg  # what to check
    # the client's full report is in the debug log, scrubbed of secrets as well
    assert "Debug source" in caplog.text
    assert SECRET not in caplog.text and KEY_ID not in caplog.text


def test_a_wrong_secret_names_the_credential_settings(s3_server: S3Info, s3_uri: str) -> None:
    wrong = {**s3_options(s3_server), "secret_access_key": SECRET}
    io = FileIO(s3_uri, options=wrong)
    with pytest.raises(StorageError) as info:
        io.read_bytes("some/file")
    msg = str(info.value)
    _assert_one_line(msg)
    assert f"cannot read {s3_uri}/some/file" in msg
    assert "access denied" in msg and "403" in msg
    assert "secret_access_key" in msg and "AWS_SECRET_ACCESS_KEY" in msg


def test_a_panic_of_the_client_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value the client cannot put in a header makes it panic when it signs a request
    (``pyo3_runtime.PanicException``, which ``except Exception`` misses). Settings given to
    fsstate are checked first, but the client also reads the environment: every request
    through the backend turns that panic into a StorageError naming the object."""
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token\nwith a line break")
    io = FileIO(_location(f"http://127.0.0.1:{closed_port()}"))
    calls = {
        "list": lambda: io.list("op", recursive=True),
        "read": lambda: io.read_bytes("op/file"),
        "write": lambda: io.publish_bytes("op/file", b"data"),
        "stat": lambda: io.exists("op/file"),
    }
    for what, call in calls.items():
        with pytest.raises(StorageError) as info:
            call()
        msg = str(info.value)
        _assert_one_line(msg)
        assert "s3://bucket/state/op" in msg and "crashed" in msg, (what, msg)
        assert "line break" in msg and "AWS_*" in msg, msg


def test_a_request_the_client_refuses_is_a_storage_error() -> None:
    """The client raises a plain ValueError for a key it cannot address (an empty segment)."""
    io = FileIO("memory:///state")
    with pytest.raises(StorageError, match=r"cannot read memory:///state/a//b: invalid request"):
        io.read_bytes("a//b")
