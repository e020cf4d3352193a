"""Where state lives: a location parsed from a URI and options, joined as paths, never leaking
a secret.

Accepted forms:

* a local path (``/tmp/state``, ``./state``) or ``file:///tmp/state``;
* ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix`` (also ``abfs``,
  ``azure``), and ``memory:///prefix`` (one in-process store, for tests).

Settings of an object store come from, lowest precedence first: the environment (``AWS_*``,
``GOOGLE_*``, ``AZURE_*``, read by the client), the URI (user info ``KEY:SECRET@bucket``, as
pyarrow writes it, and query parameters), then ``options`` (``tiered(storage_options=...)`` or
``spark.fsstate.storage.<name>``). Names are the object_store client's (``endpoint``,
``region``, ``access_key_id``, ``secret_access_key``, ``session_token``, ``allow_http``, ...);
pyarrow's spellings are accepted too (``endpoint_override`` with ``scheme``, ``access_key``,
``secret_key``).

Invariants:

* ``str``, ``repr`` and :meth:`Location.describe` never hold a secret: user info and every
  option whose name says key, secret, token, password or credential show as ``***``;
  :func:`redact` removes the secrets of a location from any other text (error messages of the
  client, logs).
* :meth:`Location.child` appends path segments to the prefix; the query string and options
  stay where they are.
* A location is immutable and picklable (it travels to Spark's workers inside the processor).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

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
    return out


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
            ConfigError: an empty location or a scheme fsstate cannot store state in.
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
        return Location(scheme, bucket, path, tuple(sorted(opts.items())))

    def with_options(self, options: Mapping[str, Any]) -> Location:
        """The same location with ``options`` added (they win over the existing ones)."""
        if not options:
            return self
        opts = dict(self.options)
        opts.update(_normalize(options))
        _pyarrow_endpoint(opts)
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
        return dict(self.options).get(_SINGLE_WRITER, "false") in ("true", "1", "yes")

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
