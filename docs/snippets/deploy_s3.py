"""State on object storage: the state URI and the object store settings.

Run end to end against an S3 server by tests/fsstate_spark/tiered/ (the S3 suites) and
tests/fsstate_spark/test_cluster.py (a local-cluster that loses an executor).
"""

from examples.session_tracker import SessionTracker

# --8<-- [start:s3]
from fsstate_spark import tiered

processor = tiered(
    SessionTracker(),
    state_uri="s3://my-bucket/fsstate",  # also gs://bucket/prefix, az://container/prefix
    storage_options={"region": "eu-west-1"},  # or endpoint, access_key_id, retries_max, ...
)
# --8<-- [end:s3]
