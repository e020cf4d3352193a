"""One line for a failure of the object store client: what went wrong, where, and what to check.

:func:`explain` words a failed request (connection refused, DNS, timeout, TLS, access denied,
no such bucket, connection reset, server error, a panic of the client), :func:`build_error` a
client that could not be built on its settings. :mod:`fsstate.storage.objects` raises both.

Invariants:

* Every message is one line: the cause in a few words, the address the client tried (scheme,
  host and port only) and the settings to check, never a secret (the location's secrets are
  scrubbed from the client's words with :func:`fsstate.storage.location.redact`).
* The client's full report (tens of lines with its debug structure) goes to the debug log of
  logger ``fsstate.storage.objects``, scrubbed of secrets too.
* The causes are recognized in a fixed order (the first that matches names the failure); a
  report that matches none is named by the client's own first words, cut at
  :data:`MESSAGE_CHARS`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from fsstate.errors import ConfigError
from fsstate.storage.backend import is_panic
from fsstate.storage.location import ENDPOINT_FORM, Location, redact

ENV_PREFIX = {"s3": "AWS", "gs": "GOOGLE", "az": "AZURE"}  # the environment variables per scheme
# the settings to name when the store cannot be reached / refuses the credentials
_NETWORK_SETTINGS = {
    "s3": "the storage settings endpoint (or AWS_ENDPOINT_URL) and region (or AWS_REGION)",
    "gs": "the storage setting base_url (or GOOGLE_BASE_URL) and proxy_url",
    "az": "the storage settings account_name (or AZURE_STORAGE_ACCOUNT_NAME) and endpoint "
    "(or AZURE_STORAGE_ENDPOINT)",
}
_CREDENTIAL_SETTINGS = {
    "s3": "the storage settings access_key_id, secret_access_key and session_token (or "
    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)",
    "gs": "the storage settings service_account or service_account_key (or "
    "GOOGLE_SERVICE_ACCOUNT, GOOGLE_SERVICE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS)",
    "az": "the storage settings account_key or sas_key (or AZURE_STORAGE_ACCOUNT_KEY, "
    "AZURE_STORAGE_SAS_KEY)",
}
_DEBUG_SOURCE = "\n\nDebug source:"  # the client appends its full error structure after this
_REQUEST = re.compile(r"Error performing (?P<method>[A-Z]+) (?P<url>\S+)")
_STATUS = re.compile(r"status code: (?P<status>\d{3})(?P<reason>[^:\n]*)")
_RETRIES = re.compile(r"after (?P<n>\d+) retries")
_PARSE = re.compile(r'failed to parse "(?P<value>[^"]*)" as (?P<kind>\w+)')
_FORMS = {  # what the client's "failed to parse ... as <kind>" asks for
    "boolean": "true or false",
    "Duration": "a duration with a unit, such as 30s",
    "usize": "a whole number from 0",
    "HeaderValue": "text without line breaks",
}
_IMDS = ("169.254.169.254", "169.254.170.2", "fd00:ec2::254")  # where S3 looks for credentials
MESSAGE_CHARS = 300  # an unclassified client message is cut here (the rest: debug log)

log = logging.getLogger("fsstate.storage.objects")  # the logger the storage docs name


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line (whitespace runs as one space), cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def _address(url: str) -> str:
    """``scheme://host[:port]`` of a URL (no user info, path or query)."""
    head = url.split("://", 1)
    if len(head) != 2:
        return url
    return f"{head[0]}://{head[1].split('/', 1)[0].rpartition('@')[2]}"


@dataclass(frozen=True)
class _Failure:
    """What the client's report of a failed request says, and the settings a message names."""

    text: str  # the whole report, scrubbed of secrets
    head: str  # the report without the client's debug structure
    where: str | None  # ``scheme://host[:port]`` the request went to, if the report says
    tries: str  # `` after n retries``, or ""
    code: int | None  # the HTTP status, if the report has one
    reason: str  # the status line's reason phrase ("" without a status)
    network: str  # the settings that say where the store is
    credentials: str  # the settings that hold the credentials

    @property
    def at(self) -> str:
        """`` at <address>``, or "" when the address is unknown."""
        return f" at {self.where}" if self.where else ""

    @property
    def reach(self) -> str:
        """What to check when the address cannot be reached."""
        return f"check {self.network}, and that this machine can reach that address"


def _read_failure(text: str, head: str, scheme: str) -> _Failure:
    """Parse the address, retries and HTTP status out of the client's report."""
    request = _REQUEST.search(head)
    retries = _RETRIES.search(head)
    n = int(retries.group("n")) if retries else 0
    status = _STATUS.search(head)
    return _Failure(
        text,
        head,
        _address(request.group("url")) if request else None,
        f" after {n} retr{'y' if n == 1 else 'ies'}" if retries else "",
        int(status.group("status")) if status else None,
        status.group("reason").rstrip() if status else "",
        _NETWORK_SETTINGS.get(scheme, "the storage settings (endpoint)"),
        _CREDENTIAL_SETTINGS.get(scheme, "the storage credential settings"),
    )


def _connection_problem(f: _Failure) -> str | None:
    """The message of a request that got no answer (no credentials from the instance metadata
    service, connection refused, DNS, timeout, plain http refused, TLS), else None."""
    text, at, tries = f.text, f.at, f.tries
    if f.where and any(host in f.where for host in _IMDS):
        return (
            f"no credentials were given and none could be fetched from the instance metadata "
            f"service{at}{tries} ({one_line(f.head.rpartition(' - ')[2], 120)}); set "
            f"{f.credentials}"
        )
    if "ConnectionRefused" in text or "Connection refused" in text:
        return f"connection refused{at}{tries}; {f.reach}"
    if "dns error" in text or "failed to lookup address" in text:
        return f"DNS lookup failed: unknown host{at}{tries}; {f.reach}"
    if "kind: Timeout" in text or "TimedOut" in text or "timed out" in text:
        return (
            f"request timeout{at}{tries}: no answer in time; {f.reach} (the storage settings "
            "timeout, connect_timeout, retries_max and retry_timeout_ms bound the wait)"
        )
    if "BadScheme" in text:
        return f"plain http refused{at}; set the storage setting allow_http=true or use https"
    if "certificate" in text.lower() or "InvalidCertificate" in text:
        return (
            f"TLS certificate rejected{at}{tries}; check {f.network} (http:// or https://) and "
            "the server's certificate (allow_invalid_certificates=true only for test servers)"
        )
    return None


_DENIED_WORDS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken")
_RESET_WORDS = (
    "ConnectionReset",
    "connection reset",
    "IncompleteMessage",
    "connection closed",
    "BrokenPipe",
    "ConnectionAborted",
)


def _answer_problem(f: _Failure, location: Location) -> str | None:
    """The message of a request the store refused or broke off (access denied, no such
    bucket, connection reset, server error), else None."""
    text, at, tries, code = f.text, f.at, f.tries, f.code
    if code in (401, 403) or any(word in text for word in _DENIED_WORDS):
        reason = f"HTTP {code}{f.reason}" if code is not None else "refused"
        return f"access denied ({reason}){at}; check {f.credentials}, and their permissions"
    if "NoSuchBucket" in text:
        return (
            f"bucket {location.bucket!r} does not exist{at}; check the bucket in "
            f"{location.uri()} and {f.network}"
        )
    if any(word in text for word in _RESET_WORDS):
        return (
            f"connection reset{at}{tries}; try again, and if it persists check the network "
            "between this machine and that address (storage settings retries_max, "
            "retry_timeout_ms)"
        )
    if code is not None and code >= 500:
        return (
            f"server error HTTP {code}{f.reason}{at}{tries}; try again later (storage settings "
            "retries_max, retry_timeout_ms)"
        )
    return None


def explain(exc: BaseException, location: Location) -> str:
    """One line for a failed request: its cause, the address tried and what to check.

    The client's message (tens of lines with its debug structure) is logged at debug level;
    both are scrubbed of the location's secrets. The causes are tried in a fixed order
    (:func:`_connection_problem`, then :func:`_answer_problem`); an unknown one is named by
    the client's own first words.
    """
    text = redact(str(exc), location)
    head = text.split(_DEBUG_SOURCE, 1)[0]
    log.debug("object store request on %s failed: %s", location.uri(), text)
    if location.scheme == "memory":
        return f"{type(exc).__name__}: {one_line(head)}"
    if is_panic(exc):
        env = ENV_PREFIX.get(location.scheme)
        variables = f" and the {env}_* environment variables" if env else ""
        return (
            f"the object store client crashed ({one_line(head, 160)}); check the storage "
            f"settings of {location.uri()}{variables}: an endpoint is {ENDPOINT_FORM}, and no "
            "value may hold a line break"
        )
    f = _read_failure(text, head, location.scheme)
    problem = _connection_problem(f) or _answer_problem(f, location)
    if problem is not None:
        return problem
    return f"{type(exc).__name__}: {one_line(head)}; check {f.network} and {f.credentials}"


def build_error(location: Location, opts: dict[str, str], exc: BaseException) -> ConfigError:
    """The error of a client that could not be built on ``opts``: a panic, a setting the
    client could not parse (named, with the form it takes), or the client's own words."""
    text = redact(str(exc), location)
    log.debug("cannot build the object store client of %s: %s", location.uri(), text)
    if is_panic(exc):
        return ConfigError(
            f"the object store client of {location.uri()} crashed on its settings "
            f"({one_line(text, 160)}); check them (names as the object_store client spells "
            "them: endpoint, region, access_key_id, secret_access_key, allow_http, ...)"
        )
    parsed = _PARSE.search(text)
    if parsed is not None:
        names = sorted(k for k, v in opts.items() if v == parsed.group("value"))
        kind = parsed.group("kind")
        if names:
            return ConfigError(
                f"storage setting {' / '.join(names)} of {location.uri()} is not valid: it must "
                f"be {_FORMS.get(kind, f'a {kind} as the object_store client reads it')}"
            )
    return ConfigError(
        f"cannot use object store {location} ({one_line(text.split(_DEBUG_SOURCE, 1)[0])}); "
        "check the storage options (names as the object_store client spells them: endpoint, "
        "region, access_key_id, secret_access_key, allow_http, ...)"
    )
