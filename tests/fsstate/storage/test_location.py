"""Locations: URI forms and options, paths joined as paths, secrets never shown; typed settings
(numbers, booleans, durations, endpoints) of the wrong form refused when parsed, as the object
store client would refuse them (or panic on them)."""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Callable
from urllib.parse import urlencode

import pytest
from obstore.store import from_url

from fsstate import PartitionStore
from fsstate.errors import ConfigError, FsStateError
from fsstate.storage.fileio import FileIO
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


# -- typed settings are checked where they are parsed ------------------------------------------
def _parsers(name: str, value: str) -> list[Callable[[], object]]:
    """Every way a setting reaches a location: options, the URI's query, options added to a
    parsed location, and the FileIO facade."""
    uri = "s3://bucket/prefix"
    return [
        lambda: Location.parse(uri, {name: value}),
        lambda: Location.parse(f"{uri}?{urlencode({name: value})}"),
        lambda: Location.parse(uri).with_options({name: value}),
        lambda: FileIO(uri, options={name: value}),
    ]


@pytest.mark.parametrize(
    ("name", "value", "form"),
    [
        ("retries_max", "abc", "whole number"),
        ("retries_max", "-1", "whole number"),
        ("retries_max", "10000000000000000000000", "whole number"),
        ("retry_timeout_ms", "1.5", "whole number"),
        ("pool_max_idle_per_host", "x", "whole number"),
        ("single_writer", "maybe", "true or false"),
        ("allow_http", "sometimes", "true or false"),
        ("http1_only", "", "true or false"),
        ("timeout", "30", "duration with a unit"),
        ("connect_timeout", "abc", "duration with a unit"),
    ],
)
def test_a_typed_setting_of_the_wrong_form_is_a_config_error(
    name: str, value: str, form: str
) -> None:
    """``retries_max=abc`` used to surface as ``ValueError: invalid literal for int()`` from
    the client's construction; every parser now names the setting and the form it takes."""
    for parse in _parsers(name, value):
        with pytest.raises(ConfigError) as info:
            parse()
        msg = str(info.value)
        assert name in msg and form in msg and "s3://bucket/prefix" in msg, msg
        assert "\n" not in msg


def test_a_location_made_directly_is_checked_when_its_client_is_built() -> None:
    loc = Location("s3", "bucket", "prefix", (("region", "us-east-1"), ("retries_max", "abc")))
    with pytest.raises(ConfigError, match=r"retries_max='abc'.*whole number"):
        FileIO(loc)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:99999",  # the client panicked signing a request to it
        "http://127.0.0.1:0",
        "http://127.0.0.1:abc",
        "http://exa mple.com:9000",  # a panic too (invalid URI character)
        "127.0.0.1:9000",  # no scheme: a panic too
        "ftp://127.0.0.1:21",
        "http://",
        "http://127.0.0.1:9000?x=1",
    ],
)
def test_a_bad_endpoint_is_refused_when_parsed(endpoint: str) -> None:
    opts = {"endpoint": endpoint, "access_key_id": KEY_ID, "secret_access_key": SECRET}
    for parse in [*_parsers("endpoint", endpoint), lambda: Location.parse("s3://b/p", opts)]:
        with pytest.raises(ConfigError) as info:
            parse()
        msg = str(info.value)
        assert "endpoint" in msg and "65535" in msg and "http(s)://" in msg, msg
        assert SECRET not in msg and KEY_ID not in msg
    # pyarrow's spelling becomes the same endpoint
    with pytest.raises(ConfigError, match=re.escape("endpoint='http://127.0.0.1:99999'")):
        Location.parse("s3://b/p?endpoint_override=127.0.0.1:99999&scheme=http")


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:9000",
        "https://minio.internal:9000",
        "http://[::1]:9000",
        "https://s3.eu-west-1.amazonaws.com",
        "http://host_name:1/path",
        "HTTPS://EXAMPLE.COM:65535",
    ],
)
def test_good_endpoints_pass(endpoint: str) -> None:
    assert Location.parse("s3://b/p", {"endpoint": endpoint}).option_map["endpoint"] == endpoint


def test_an_endpoint_from_the_environment_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:99999")
    opts = {"access_key_id": KEY_ID, "secret_access_key": SECRET, "region": "us-east-1"}
    with pytest.raises(ConfigError, match=r"environment variable AWS_ENDPOINT_URL.*65535"):
        FileIO("s3://bucket/prefix", options=opts)
    # a setting wins over the variable (and the client never sees the variable's bad port)
    FileIO("s3://bucket/prefix", options={**opts, "endpoint": "http://127.0.0.1:9"})


def test_plain_http_with_allow_http_off_and_control_characters_are_refused() -> None:
    with pytest.raises(ConfigError, match="allow_http"):
        Location.parse("s3://b/p", {"endpoint": "http://127.0.0.1:9", "allow_http": "false"})
    with pytest.raises(ConfigError, match=r"session_token.*line break") as info:
        Location.parse("s3://b/p", {"session_token": f"{SECRET}\n"})  # a panic when signing
    assert SECRET not in str(info.value)


def test_a_prefix_with_an_empty_segment_is_refused() -> None:
    """The client cannot address ``a//b`` (it raised a plain ValueError on the first request)."""
    with pytest.raises(ConfigError, match="empty path segment"):
        Location.parse("s3://bucket/a//b")
    assert Location.parse("s3://bucket/a/b/").path == "a/b"


def _client_accepts(name: str, value: str) -> bool:
    try:
        from_url("s3://b", config={"region": "us-east-1"}, client_options={name: value})
    except Exception:
        return False
    return True


def _parse_accepts(name: str, value: str) -> bool:
    try:
        Location.parse("s3://b/p", {name: value})
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize(
    ("name", "value"),
    [
        *[
            ("timeout", v)
            for v in ["30s", "500ms", "2min", "1m 30s", "1m30s", "1.5s", "3 days", "1µs", "0s"]
        ],
        *[("timeout", v) for v in ["30", "abc", "", "s", "1 S", "-1s", ".5s", "1.5"]],
        *[("pool_max_idle_per_host", v) for v in ["0", "8", "x", "-1", "1.0"]],
    ],
)
def test_the_checks_agree_with_the_client(name: str, value: str) -> None:
    """What parsing accepts is what the object store client accepts (asked directly)."""
    assert _parse_accepts(name, value) == _client_accepts(name, value)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        *[(v, True) for v in ["true", "FALSE", "1", "0", "yes", "Off", " true", "On\n"]],
        *[(v, False) for v in ["maybe", "t", "y", "n", "", "2"]],
    ],
)
def test_a_boolean_setting_takes_the_flag_words_and_reaches_the_client_as_true_or_false(
    value: str, accepted: bool
) -> None:
    """Boolean settings take the words of :func:`fsstate.config.parse_flag`, as every flag of
    fsstate does (the client's own ``y`` / ``n`` are not among them), and the location holds
    them as ``true`` / ``false``: what it passes on is what the client accepts."""
    assert _parse_accepts("allow_http", value) == accepted
    if accepted:
        held = Location.parse("s3://b/p", {"allow_http": value}).option_map["allow_http"]
        assert held in ("true", "false") and _client_accepts("allow_http", held)
