"""Where state lives: a location parsed from a URI and options, joined as paths, never leaking
a secret.

Accepted forms:

* a local path (``/tmp/state``, ``./state``) or ``file:///tmp/state``;
* ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix`` (also ``abfs``,
  ``azure``), and ``memory:///prefix`` (one in-process store, for tests); a prefix has no
  empty segment (``a//b``: object stores cannot address it).

Settings of an object store come from, lowest precedence first: the environment (``AWS_*``,
``GOOGLE_*``, ``AZURE_*``, read by the client), the URI (user info ``KEY:SECRET@bucket``, as
pyarrow writes it, and query parameters), then ``options`` (``tiered(storage_options=...)`` or
``spark.fsstate.storage.<name>``). Names are the object_store client's (``endpoint``,
``region``, ``access_key_id``, ``secret_access_key``, ``session_token``, ``allow_http``, ...);
pyarrow's spellings are accepted too (``endpoint_override`` with ``scheme``, ``access_key``,
``secret_key``).

Typed settings are checked when a location is parsed (and again when its client is built, for a
location made some other way), so a bad value fails early with a :class:`ConfigError` naming
the setting and the form it takes: ``endpoint`` (``http(s)://host[:port][/path]``, port
1..65535), ``retries_max``, ``retry_timeout_ms`` and ``pool_max_idle_per_host`` (whole numbers
from 0), ``single_writer``, ``allow_http``, ``allow_invalid_certificates``, ``http1_only`` and
``http2_only`` (booleans: true/false, 1/0, yes/no, on/off), ``timeout``, ``connect_timeout`` and
``pool_idle_timeout`` (durations with a unit: ``30s``, ``500ms``, ``2min``). No setting may hold
a line break or another control character (but PEM certificates and JSON service account keys):
the client would panic putting it in a request header.

Invariants:

* ``str``, ``repr`` and :meth:`Location.describe` never hold a secret: user info and every
  option whose name says key, secret, token, password or credential show as ``***``;
  :func:`redact` removes the secrets of a location from any other text (error messages of the
  client, logs).
* :meth:`Location.child` appends path segments to the prefix; the query string and options
  stay where they are.
* A location is immutable and picklable (it travels to Spark's workers inside the processor).
* Every location :meth:`Location.parse` or :meth:`Location.with_options` returns has passed
  :func:`check_options`: no typed setting reaches the object store client in a form it would
  refuse or panic on (an endpoint port above 65535 makes it panic when it signs a request).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from fsstate.config import FLAG_WORDS, parse_flag
from fsstate.errors import ConfigError

OBJECT_SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "gcs": "gs",
    "az": "az",
    "abfs": "az",
    "abfss": "az",
    "azure": "az",
    "memory": "memory",
}
SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas")
_ALIASES = {
    "access_key": "access_key_id",
    "secret_key": "secret_access_key",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "aws_region": "region",
    "aws_endpoint": "endpoint",
    "aws_endpoint_url": "endpoint",
    "endpoint_url": "endpoint",
}
_SINGLE_WRITER = "single_writer"
# typed settings: booleans (fsstate.config.parse_flag), whole numbers, durations
_BOOL_OPTIONS = frozenset(
    {_SINGLE_WRITER, "allow_http", "allow_invalid_certificates", "http1_only", "http2_only"}
)
# name -> (example, largest value: the client's integer types and Python's timedelta bound them)
_INT_OPTIONS = {
    "retries_max": ("4", 1_000),
    "retry_timeout_ms": ("30000", 10**11),
    "pool_max_idle_per_host": ("8", 1_000_000),
}
_DURATION_OPTIONS = frozenset({"timeout", "connect_timeout", "pool_idle_timeout"})
# humantime's units (how the client parses durations), longest spelling first
_DURATION = re.compile(
    r"(?:\s*\d+(?:\.\d+)?\s*(?:nanos|nsec|ns|usec|us|\u00b5s|millis|msec|ms|seconds|second|secs|sec|s"
    r"|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w"
    r"|months|month|M|years|year|yrs|yr|y))+\s*"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MULTILINE_WORDS = ("certificate", "service_account_key")  # PEM or JSON documents
_HOST = re.compile(r"[A-Za-z0-9._-]+")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+")
ENDPOINT_FORM = "http(s)://host[:port][/path] with a port from 1 to 65535"


def is_secret(name: str) -> bool:
    """Whether an option's value must never be shown."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def _normalize(options: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw, value in options.items():
        if value is None:
            continue
        name = _ALIASES.get(raw.lower(), raw.lower())
        out[name] = value if isinstance(value, str) else str(value).lower()
        if name in _BOOL_OPTIONS:
            out[name] = _flag_text(out[name])
    return out


def _flag_text(value: str) -> str:
    """A boolean setting as the client reads it: ``true`` or ``false`` (it trims nothing); a
    value that is not a flag is kept for :func:`check_options` to refuse."""
    try:
        return "true" if parse_flag(value, "") else "false"
    except ConfigError:
        return value


def _pyarrow_endpoint(opts: dict[str, str]) -> None:
    """``endpoint_override`` (host:port) and ``scheme`` (pyarrow) -> ``endpoint`` URL."""
    override = opts.pop("endpoint_override", None)
    scheme = opts.pop("scheme", None)
    if override and "endpoint" not in opts:
        opts["endpoint"] = override if "://" in override else f"{scheme or 'https'}://{override}"
    if (scheme == "http" or opts.get("endpoint", "").startswith("http://")) and (
        "allow_http" not in opts
    ):
        opts["allow_http"] = "true"


def check_endpoint(
    value: str, setting: str = "endpoint", where: str = "", environment: bool = False
) -> None:
    """Check that ``value`` is an endpoint URL the object store client can use.

    Args:
        value: the URL (``http(s)://host[:port][/path]``).
        setting: how the user named it (``endpoint``, ``AWS_ENDPOINT_URL``), for the message.
        where: the state location it is for (no secret), for the message.
        environment: ``setting`` is an environment variable (not a storage setting).

    Raises:
        ConfigError: the scheme is not http or https, the host is missing or malformed, the
            port is not a number from 1 to 65535, or the URL has a query or fragment.
    """
    shown = _redact_uri_text(value)
    of = f" of {where}" if where else ""
    kind = "environment variable" if environment else "storage setting"

    def refuse(problem: str) -> ConfigError:
        return ConfigError(
            f"{kind} {setting}={shown!r}{of} {problem}: write it as {ENDPOINT_FORM} "
            f"(e.g. {setting}=https://minio.internal:9000)"
        )

    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https"):
        raise refuse("has no http:// or https:// scheme")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise refuse("has a query or fragment")
    hostport = parts.netloc.rpartition("@")[2]
    if hostport.startswith("["):
        host, bracket, rest = hostport[1:].partition("]")
        if not bracket or not _IPV6.fullmatch(host) or (rest and not rest.startswith(":")):
            raise refuse(f"has a malformed IPv6 host {hostport!r}")
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = hostport.partition(":")
        port = port_text if colon else None
        if not host:
            raise refuse("names no host")
        if not _HOST.fullmatch(host):
            raise refuse(f"has a malformed host {host!r} (letters, digits, '.', '-', '_' only)")
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise refuse(f"has port {port!r}, not a number from 1 to 65535")


def check_options(options: Mapping[str, str], where: str = "") -> None:
    """Check the typed settings among ``options`` (see the module docstring).

    Args:
        options: normalized settings (names lower case, values strings).
        where: the state location they are for (no secret), for the message.

    Raises:
        ConfigError: naming the first setting whose value has the wrong form, and that form.
    """
    of = f" of {where}" if where else ""

    def refuse(name: str, value: str, form: str, example: str) -> ConfigError:
        shown = "***" if is_secret(name) else repr(value)
        return ConfigError(
            f"storage setting {name}={shown}{of} is not valid: it must be {form} "
            f"(e.g. {name}={example})"
        )

    for name, value in sorted(options.items()):
        if _CONTROL.search(value) and not any(w in name for w in _MULTILINE_WORDS):
            raise ConfigError(
                f"storage setting {name}{of} holds a line break or another control character "
                "(copied with a trailing newline?): remove it; the object store client cannot "
                "send it"
            )
        if name in _BOOL_OPTIONS:
            try:
                parse_flag(value, name)
            except ConfigError:
                raise refuse(name, value, FLAG_WORDS, "true") from None
        if name in _INT_OPTIONS:
            example, largest = _INT_OPTIONS[name]
            if not (value.isascii() and value.isdigit() and int(value) <= largest):
                raise refuse(name, value, f"a whole number from 0 to {largest}", example)
        if name in _DURATION_OPTIONS and not _DURATION.fullmatch(value):
            raise refuse(name, value, "a duration with a unit, such as 30s, 500ms or 2min", "30s")
    endpoint = options.get("endpoint")
    if endpoint is not None:
        check_endpoint(endpoint, "endpoint", where)
        allow = options.get("allow_http")
        plain = urlsplit(endpoint).scheme.lower() == "http"
        if plain and allow is not None and not parse_flag(allow, "allow_http"):
            raise ConfigError(
                f"storage setting endpoint={_redact_uri_text(endpoint)!r}{of} is plain http but "
                f"allow_http={allow!r}: set allow_http=true, or use an https:// endpoint"
            )


@dataclass(frozen=True)
class Location:
    """A root for state files.

    Attributes:
        scheme: ``file``, or the object store's scheme (``s3``, ``gs``, ``az``, ``memory``).
        bucket: bucket or container ("" for local paths and memory).
        path: the prefix inside the bucket, or the absolute local path; ``/`` separated,
            without leading or trailing ``/`` for object stores.
        options: object store settings as sorted (name, value) pairs.
    """

    scheme: str
    bucket: str
    path: str
    options: tuple[tuple[str, str], ...] = field(default=())

    # -- construction ------------------------------------------------------------------------
    @staticmethod
    def parse(uri: str | Location, options: Mapping[str, Any] | None = None) -> Location:
        """Parse a local path or URI; ``options`` win over what the URI says.

        Raises:
            ConfigError: an empty location, a scheme fsstate cannot store state in, or a
                setting whose value has the wrong form (see :func:`check_options`).
        """
        if isinstance(uri, Location):
            return uri.with_options(options or {})
        if not isinstance(uri, str) or not uri.strip():
            raise ConfigError(f"state location {uri!r} must be a non-empty path or URI")
        if "://" not in uri:
            return Location("file", "", os.path.abspath(uri))
        parts = urlsplit(uri)
        raw_scheme = parts.scheme.lower()
        if raw_scheme == "file":
            return Location("file", "", os.path.abspath(unquote(parts.path) or "/"))
        scheme = OBJECT_SCHEMES.get(raw_scheme)
        if scheme is None:
            raise ConfigError(
                f"state location {_redact_uri_text(uri)!r} has scheme {raw_scheme!r}; fsstate "
                f"stores state on local paths or {sorted(set(OBJECT_SCHEMES.values()))} "
                "(s3://bucket/prefix, gs://..., az://..., memory:///...)"
            )
        opts: dict[str, str] = {}
        if parts.username:
            opts["access_key_id"] = unquote(parts.username)
        if parts.password:
            opts["secret_access_key"] = unquote(parts.password)
        opts.update(_normalize(dict(parse_qsl(parts.query, keep_blank_values=True))))
        opts.update(_normalize(options or {}))
        _pyarrow_endpoint(opts)
        bucket = parts.hostname or ""
        if scheme == "memory":
            bucket, path = "", f"{parts.netloc}{parts.path}".strip("/")
        else:
            path = unquote(parts.path).strip("/")
            if not bucket:
                raise ConfigError(
                    f"state location {_redact_uri_text(uri)!r} names no bucket: use "
                    f"{scheme}://<bucket>/<prefix>"
                )
        if "//" in path:
            raise ConfigError(
                f"state location {_redact_uri_text(uri)!r} has an empty path segment ('//'), "
                "which object stores cannot address: write the prefix with single slashes"
            )
        location = Location(scheme, bucket, path, tuple(sorted(opts.items())))
        check_options(opts, location.uri())
        return location

    def with_options(self, options: Mapping[str, Any]) -> Location:
        """The same location with ``options`` added (they win over the existing ones).

        Raises:
            ConfigError: a setting whose value has the wrong form (see :func:`check_options`).
        """
        if not options:
            return self
        opts = dict(self.options)
        opts.update(_normalize(options))
        _pyarrow_endpoint(opts)
        check_options(opts, self.uri())
        return Location(self.scheme, self.bucket, self.path, tuple(sorted(opts.items())))

    def child(self, *parts: str) -> Location:
        """The location of a sub-directory (each part one or more path segments)."""
        segments = [p.strip("/") for p in parts if p and p.strip("/")]
        if not segments:
            return self
        if self.scheme == "file":
            return Location("file", "", os.path.join(self.path, *segments))
        path = "/".join([self.path, *segments]) if self.path else "/".join(segments)
        return Location(self.scheme, self.bucket, path, self.options)

    # -- properties --------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        """Whether this is a local directory."""
        return self.scheme == "file"

    @property
    def option_map(self) -> dict[str, str]:
        """The options as a dict (secrets included: never print it)."""
        return dict(self.options)

    @property
    def single_writer(self) -> bool:
        """Whether the user declared one writer per store at a time (option
        ``single_writer=true``): needed on stores that ignore conditional writes."""
        value = dict(self.options).get(_SINGLE_WRITER, "false")
        return parse_flag(value, f"storage setting {_SINGLE_WRITER} of {self.uri()}")

    def secrets(self) -> list[str]:
        """The secret values of this location (to scrub them from any text)."""
        return [v for k, v in self.options if is_secret(k) and v]

    # -- display -----------------------------------------------------------------------------
    def uri(self) -> str:
        """The location as a URI without any option (no secret)."""
        if self.scheme == "file":
            return self.path
        if self.scheme == "memory":
            return f"memory:///{self.path}"
        return f"{self.scheme}://{self.bucket}/{self.path}".rstrip("/")

    def describe(self, path: str = "") -> str:
        """A human-readable location of ``path`` under this root, for messages (no secret)."""
        base = self.uri()
        if not path:
            return base
        return f"{base.rstrip('/')}/{path}"

    def __str__(self) -> str:
        shown = [(k, "***" if is_secret(k) else v) for k, v in self.options]
        if not shown:
            return self.uri()
        return f"{self.uri()} ({', '.join(f'{k}={v}' for k, v in shown)})"

    def __repr__(self) -> str:
        return f"Location({str(self)!r})"


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")
_QUERY_SECRET = re.compile(
    r"(?P<name>[A-Za-z_]*(?:key|secret|token|password|credential|sas)[A-Za-z_]*)=[^&\s]*", re.I
)


def _redact_uri_text(text: str) -> str:
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('name')}=***", text)


def redact(text: str, location: Location | None = None) -> str:
    """``text`` without secrets: URI user info, secret query parameters and, if given, every
    secret value of ``location`` wherever it appears."""
    out = _redact_uri_text(text)
    if location is not None:
        for secret in location.secrets():
            if len(secret) >= 4:
                out = out.replace(secret, "***")
    return out
