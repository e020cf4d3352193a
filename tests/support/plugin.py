"""The test suite's pytest plugin (loaded by ``tests/conftest.py``): environment, shared fixtures.

* Spark's Python workers are started by the JVM with the driver's environment, so the
  repository root is put on ``PYTHONPATH`` here (:func:`devkit.repo.worker_paths`), before any
  SparkSession exists: workers import processors defined under ``tests/`` and ``examples/``
  as ``tests.<...>`` and ``examples.<...>``. PySpark is pointed at this interpreter, started
  through :data:`devkit.repo.WORKER_LAUNCHER` (pyspark imported from its compiled files, not
  from Spark's zip: :func:`devkit.repo.compiled_pyspark_workers`). Every JVM started from the
  suite's environment maps Spark's classes from one class-data archive, built once per
  virtualenv (:func:`devkit.jvm_archive.spark_class_archive`). Each pytest process that runs
  tests starts a :class:`devkit.python_forkserver.ForkServer` (stopped at its end): the
  driver-side Python runner of every ``transformWithState`` query start is a fork of it.
* ``s3_server``: a real S3 server (SeaweedFS ``weed mini`` on loopback, credentials checked),
  started once per session when a test asks for it and stopped at the end; ``s3_uri`` gives
  every test its own prefix of the bucket; :func:`s3_options` (:mod:`devkit.s3_server`) are the
  settings that reach it.
* ``spark``: one small local SparkSession for the whole session (``conf/spark-defaults.conf``);
  tests that use it get the ``spark`` marker (``-m "not spark"`` skips them).
* ``pyfiles``: the ``--py-files`` zip of fsstate and fsstate_spark.

Invariants: no test reaches the network beyond loopback; every server or session a fixture
starts is stopped by it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from devkit.jvm_archive import spark_class_archive
from devkit.python_forkserver import ForkServer
from devkit.repo import compiled_pyspark_workers, worker_paths
from devkit.s3_server import S3Info, SeaweedS3
from devkit.s3_server import s3_options as s3_options  # the tests import it from here
from tests.support.schedule import longest_first

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

compiled_pyspark_workers()  # the workers import pyspark compiled, not from Spark's zip
worker_paths()  # before any SparkSession: its workers inherit the environment
spark_class_archive()  # every JVM the suite starts maps Spark's classes from one archive


_FORK_SERVER: list[ForkServer] = []


def pytest_configure(config: pytest.Config) -> None:
    """Start the process's fork server unless this process is pytest-xdist's controller
    (which runs no test)."""
    controller = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if not controller:
        _FORK_SERVER.append(ForkServer.start())


def pytest_unconfigure() -> None:
    """Stop the fork server."""
    while _FORK_SERVER:
        _FORK_SERVER.pop().stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the SparkSession get the ``spark`` marker; the longest files start first
    (:mod:`tests.support.schedule`)."""
    longest_first(items)
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Info]:
    """A credential-checking S3 server on 127.0.0.1 with one bucket (stopped at the end)."""
    server = SeaweedS3(tmp_path_factory.mktemp("weed"))
    info = server.start()
    yield info
    server.stop()


@pytest.fixture
def s3_uri(s3_server: S3Info, request: pytest.FixtureRequest) -> str:
    """A fresh prefix of the test bucket for this test: ``s3://<bucket>/<test>-<uuid>``."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"s3://{s3_server.bucket}/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The suite's SparkSession (settings from conf/spark-defaults.conf)."""
    from devkit.spark_local import local_session

    # a Python task running for a minute is stuck: its stack is printed (into the test's stderr)
    session = local_session(
        "fsstate-spark-tests", **{"spark.python.worker.tracebackDumpIntervalSeconds": "60"}
    )
    yield session
    session.stop()


# settings of the shared session every later test depends on (checked around every Spark test)
KEPT_CONF = (
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.noDataMicroBatches.enabled",
    "spark.fsstate.memoryLimit",
    "spark.fsstate.stateUri",
)


@pytest.fixture(autouse=True)
def _session_conf_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """A Spark test leaves the shared session's settings as it found them: a test that changed
    one (``spark.conf.unset`` falls back to Spark's default, 200 shuffle partitions, not the
    session's 2) fails, and the settings are put back for the tests after it."""
    if "spark" not in request.fixturenames:
        yield
        return
    session = request.getfixturevalue("spark")
    before = {k: session.conf.get(k, None) for k in KEPT_CONF}
    yield
    after = {k: session.conf.get(k, None) for k in KEPT_CONF}
    changed = {k: (before[k], after[k]) for k in KEPT_CONF if before[k] != after[k]}
    for key, (old, _) in changed.items():
        if old is None:
            session.conf.unset(key)
        else:
            session.conf.set(key, old)
    if changed:
        pytest.fail(
            f"the test changed the shared SparkSession's settings {changed} (was, now): use "
            "devkit.spark_local.session_conf"
        )


@pytest.fixture(scope="session")
def pyfiles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The --py-files zip of fsstate and fsstate_spark."""
    from fsstate_spark.pyfiles import build

    target = tmp_path_factory.mktemp("dist") / "fsstate-pyfiles.zip"
    names = build(target)
    assert "fsstate/__init__.py" in names and "fsstate_spark/__init__.py" in names
    return target
