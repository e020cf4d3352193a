"""Repository-wide test set-up: make test and example modules importable by Spark's workers.

Spark's Python workers are started by the JVM with the driver's environment, so PYTHONPATH set
here (before any SparkSession exists) lets them import processors defined under ``tests/`` and
``examples/``. It also points PySpark at this interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_paths = [str(ROOT), str(ROOT / "examples")]
_existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(_paths + _existing))
for _p in reversed(_paths):
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


# -- a real S3 server (SeaweedFS `weed mini` on loopback), started once per session when a test
# asks for it; every test gets its own prefix in the bucket
import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
from s3_server import S3Info, SeaweedS3  # noqa: E402


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Info]:
    """A credential-checking S3 server on 127.0.0.1 with one bucket (stopped at the end)."""
    server = SeaweedS3(tmp_path_factory.mktemp("weed"))
    info = server.start()
    yield info
    server.stop()


def s3_options(info: S3Info) -> dict[str, str]:
    """The storage options that reach the test server (explicit: no AWS_* in the tests)."""
    return {
        "endpoint": info.endpoint,
        "access_key_id": info.access_key,
        "secret_access_key": info.secret_key,
        "region": "us-east-1",
        "allow_http": "true",
    }


@pytest.fixture
def s3_uri(s3_server: S3Info, request: pytest.FixtureRequest) -> str:
    """A fresh prefix of the test bucket for this test: ``s3://<bucket>/<test>-<uuid>``."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"s3://{s3_server.bucket}/{name}-{uuid.uuid4().hex[:8]}"
