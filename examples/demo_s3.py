"""The demo with its state on an S3 server (``make demo-s3``).

Starts a local S3-compatible server (SeaweedFS ``weed mini`` on 127.0.0.1, credentials checked;
see ``s3_server.py``), points the usual ``AWS_*`` variables at it, runs ``demo.py`` with
``state_uri="s3://<bucket>/demo"`` and stops the server. The variables are set before Spark
starts, so Spark's Python workers inherit them, as executors on a cluster get theirs. The same
settings could come from ``tiered(storage_options=...)`` or ``spark.fsstate.storage.<name>``.
"""

from __future__ import annotations

import os
import tempfile

from devkit.s3_server import SeaweedS3
from examples import demo


def main() -> None:
    """Run the demo against a fresh local S3 server."""
    with tempfile.TemporaryDirectory(prefix="fsstate-s3-") as tmp, SeaweedS3(tmp) as server:
        os.environ.update(
            AWS_ENDPOINT_URL=server.endpoint,
            AWS_ACCESS_KEY_ID=server.access_key,
            AWS_SECRET_ACCESS_KEY=server.secret_key,
            AWS_REGION="us-east-1",
            AWS_ALLOW_HTTP="true",
        )
        print(f"S3 server at {server.endpoint}, bucket {server.bucket!r}")
        demo.main(state_uri=f"s3://{server.bucket}/demo")


if __name__ == "__main__":
    main()
