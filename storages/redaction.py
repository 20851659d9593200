"""Credentials never leave the process: one place that strips them from anything printed.

A storage URL may carry a password (``redis://:secret@host``), an access key in its query
(``s3://bucket?aws_secret_access_key=...``) or a token. Every report, repr, error message and
log line that shows a URL shows :func:`redact_url` of it; free text that may embed a URL (a
driver's error message) goes through :func:`redact_text`.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

REDACTED = "***"
MIN_SECRET_LENGTH = 4
"""Shorter secrets are not masked where they appear as text: masking every ``ab`` of an output
would hide data and tell where the secret's letters are. Redaction by position (a URL's password,
a secret option's value) covers them."""

# Query options whose values are credentials, compared lower-case. Names that merely contain
# one of these words (``aws_session_token``, ``x-api-key``) are matched by _is_secret_name.
_SECRET_WORDS = ("password", "passwd", "secret", "token", "credential", "key", "auth", "signature")
# Option names that contain a secret word but name no secret.
_NOT_SECRET = frozenset(
    {
        "integrity_key_env",
        "key_prefix",
        "keyprefix",
        "max-keys",
        "sse_kms_key_id",
        # A workflow's graph signature is a topology hash, shown in every kit and verify message.
        "graph_signature_hash",
        "expected_graph_signature_hash",
    }
)

# scheme://userinfo@ inside free text; userinfo ends at the last '@' before the path, so a
# password written with a raw '@' in it is hidden whole.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s]*)@")
_QUERY_PAIR = re.compile(r"(?P<name>[A-Za-z0-9_\-.]+)=(?P<value>[^&\s#'\"]*)")


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    if lowered in _NOT_SECRET:
        return False
    return any(word in lowered for word in _SECRET_WORDS)


def redact_url(url: str) -> str:
    """``url`` with its password and every credential-like query value replaced by ``***``.

    The user name stays (it says which account), the host, path and other options too, so a
    redacted URL still tells an operator which store it names. Never raises: a string that is
    not a URL is returned with :func:`redact_text` applied.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if not parts.scheme or "://" not in url:
        # A URL written without its scheme (``user:secret@host/db``) still hides its password.
        head, slash, tail = url.partition("/")
        userinfo, at, host = head.rpartition("@")
        if at and ":" in userinfo:
            url = f"{userinfo.partition(':')[0]}:{REDACTED}@{host}{slash}{tail}"
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        if has_password:
            netloc = f"{user}:{REDACTED}@{hostinfo}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(name, _redacted_value(name, value)) for name, value in pairs], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redacted_value(name: str, value: str) -> str:
    """A query option's value as shown: a secret's hidden, a URL's (an endpoint) redacted."""
    if _is_secret_name(name) and value:
        return REDACTED
    return redact_url(value) if "://" in value else value


def redact_text(text: str) -> str:
    """``text`` with the password of every embedded URL and every secret ``name=value`` hidden."""

    def _userinfo(match: re.Match[str]) -> str:
        user, has_password, _ = match["userinfo"].partition(":")
        if has_password:
            return f"{match['scheme']}{user}:{REDACTED}@"
        return match.group(0)

    def _pair(match: re.Match[str]) -> str:
        if _is_secret_name(match["name"]) and match["value"]:
            return f"{match['name']}={REDACTED}"
        inner = unquote(match["value"])
        if "://" in inner and "%" in match["value"]:  # a URL inside an encoded query: its own password
            shown = redact_url(inner)
            if shown != inner:
                return f"{match['name']}={shown}"
        return match.group(0)

    return _QUERY_PAIR.sub(_pair, _URL_USERINFO.sub(_userinfo, text))


def url_secrets(url: str) -> frozenset[str]:
    """The credentials ``url`` carries, as a message might quote them: the password of its
    userinfo and the value of every secret-named query option, as written and percent-decoded.

    What is quoted without its URL around it (a bucket name ``KEY:SECRET@bucket`` a parser
    refused, a value in a driver's message) can then be masked as text: :func:`redact_known`."""
    found: set[str] = set()
    _, scheme, rest = url.partition("://")
    rest = rest if scheme else url
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    userinfo, at, _ = authority.rpartition("@")
    if at:
        _, has_password, password = userinfo.partition(":")
        found.update((password, unquote(password)) if has_password else ())
    _, _, query = url.partition("?")
    for pair in query.split("#", 1)[0].split("&"):
        name, equals, value = pair.partition("=")
        decoded = unquote(value.replace("+", " "))
        if equals and _is_secret_name(unquote(name)):
            found.update((value, decoded))
        elif "://" in decoded:  # a URL in an option (an endpoint) carries credentials of its own
            found.update(url_secrets(decoded))
    return frozenset(secret for secret in found if secret)


def redact_known(text: str, secrets: Iterable[str]) -> str:
    """:func:`redact_text` of ``text``, and every secret in ``secrets`` at least
    :data:`MIN_SECRET_LENGTH` characters long replaced by ``***`` wherever it appears."""
    text = redact_text(text)
    for secret in sorted(secrets, key=len, reverse=True):  # a secret inside another goes after it
        if len(secret) >= MIN_SECRET_LENGTH and secret in text:
            text = text.replace(secret, REDACTED)
    return text


class _ScrubbingStream:
    """A text stream that masks known secrets in what is written to it, then writes it on."""

    def __init__(self, stream: TextIO, secrets: frozenset[str]) -> None:
        self._stream = stream
        self._secrets = secrets

    def write(self, text: str) -> int:
        self._stream.write(redact_known(text, self._secrets))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, flush, encoding: the stream's own
        return getattr(self._stream, name)


@contextlib.contextmanager
def scrubbed_output(secrets: Iterable[str]) -> Iterator[None]:
    """While the block runs, what is written to ``sys.stdout`` and ``sys.stderr`` has every known
    secret masked: the last net under the command-line tools, whose every message is redacted
    where it is made."""
    masked = frozenset(secret for secret in secrets if len(secret) >= MIN_SECRET_LENGTH)
    if not masked:
        yield
        return
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = _ScrubbingStream(stdout, masked)
    sys.stderr = _ScrubbingStream(stderr, masked)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def chainable(error: BaseException) -> BaseException | None:
    """``error``, to chain as the cause of one of ours, or None when its message (or one of its
    own causes') shows a credential: tracebacks and logged exceptions print the whole chain, and
    a driver's message may quote a URL with its password (botocore's endpoint errors do)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        if redact_text(text) != text:
            return None
        current = current.__cause__ or current.__context__
    return error


__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "chainable",
    "redact_known",
    "redact_text",
    "redact_url",
    "scrubbed_output",
    "url_secrets",
]
