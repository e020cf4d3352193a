"""Locations: URI forms and options, paths joined as paths, secrets never shown."""

from __future__ import annotations

import logging
import pickle

import pytest

from fsstate import PartitionStore
from fsstate.errors import ConfigError, FsStateError
from fsstate.storage.location import Location, redact

SECRET = "s3cr3t/Value+With=Chars"
KEY_ID = "AKIAEXAMPLEKEY"


def test_pyarrow_style_uri_with_credentials_and_query() -> None:
    """``s3://KEY:SECRET@bucket/state?endpoint_override=...&scheme=http&region=...`` (how pyarrow
    takes S3 options in a URI): the prefix is the path, the query goes to options."""
    loc = Location.parse(
        f"s3://{KEY_ID}:{SECRET.replace('/', '%2F').replace('+', '%2B').replace('=', '%3D')}"
        "@bucket/state?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1"
    )
    assert (loc.scheme, loc.bucket, loc.path) == ("s3", "bucket", "state")
    opts = loc.option_map
    assert opts["endpoint"] == "http://127.0.0.1:9000" and opts["allow_http"] == "true"
    assert opts["region"] == "us-east-1"
    assert opts["access_key_id"] == KEY_ID and opts["secret_access_key"] == SECRET
    child = loc.child("0b6b8c1d-query", "Mixed", "0")
    assert child.path == "state/0b6b8c1d-query/Mixed/0" and child.options == loc.options
    assert child.uri() == "s3://bucket/state/0b6b8c1d-query/Mixed/0"
    for shown in (str(loc), repr(loc), loc.describe("x"), str(child), repr([child])):
        assert SECRET not in shown and KEY_ID not in shown, shown
    assert pickle.loads(pickle.dumps(loc)) == loc  # travels to Spark's workers


def test_options_win_and_aliases() -> None:
    loc = Location.parse(
        "s3://b/p?region=eu-west-1",
        {"access_key": "a", "secret_key": "b", "region": "us-east-1", "allow_http": True},
    )
    assert loc.option_map == {
        "access_key_id": "a",
        "secret_access_key": "b",
        "region": "us-east-1",
        "allow_http": "true",
    }
    assert Location.parse("gs://bucket").path == "" and Location.parse("s3a://b/x").scheme == "s3"
    local = Location.parse("relative/dir")
    assert local.is_local and local.path.endswith("relative/dir") and local.path.startswith("/")
    assert local.child("q", "op").path == f"{local.path}/q/op"


@pytest.mark.parametrize("bad", ["", "ftp://host/x", "s3:///no-bucket"])
def test_unusable_locations_are_typed_errors(bad: str) -> None:
    with pytest.raises(ConfigError):
        Location.parse(bad)


def test_redact_scrubs_uris_and_known_secrets() -> None:
    loc = Location.parse("s3://b/p", {"access_key_id": KEY_ID, "secret_access_key": SECRET})
    text = (
        f"failed s3://{KEY_ID}:{SECRET}@b/p?secret_key={SECRET}&x=1 "
        f"(signature of {KEY_ID} with {SECRET})"
    )
    out = redact(text, loc)
    assert SECRET not in out and KEY_ID not in out and "x=1" in out


def test_no_secret_in_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    """A store that cannot be reached fails with a typed error naming the object, and neither
    the error nor any log line holds a credential."""
    uri = f"s3://{KEY_ID}:{SECRET.replace('/', '%2F')}@bucket/state"
    loc = Location.parse(
        uri, {"endpoint": "http://127.0.0.1:9", "retries_max": "0", "region": "us-east-1"}
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(FsStateError) as info:
        PartitionStore.open(loc, "op", 0, version=3)
    text = f"{info.value}\n{info.value!r}\n{info.value.__cause__!r}\n{caplog.text}"
    assert "s3://bucket/state/op/0/manifests" in str(info.value)
    assert SECRET not in text and SECRET.replace("/", "%2F") not in text and KEY_ID not in text
