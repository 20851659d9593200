"""Credentials never leave the process: one place that strips them from anything printed.

A storage URL may carry a password (``redis://:secret@host``), an access key in its query
(``s3://bucket?aws_secret_access_key=...``) or a token. Every report, repr, error message and
log line that shows a URL shows :func:`redact_url` of it; free text that may embed a URL (a
driver's error message) goes through :func:`redact_text`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"

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

# scheme://userinfo@ inside free text; userinfo ends at the last '@' before the host.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s@]*)@")
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
        query = urlencode(
            [(name, REDACTED if _is_secret_name(name) and value else value) for name, value in pairs],
            safe="*",
        )
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


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
        return match.group(0)

    return _QUERY_PAIR.sub(_pair, _URL_USERINFO.sub(_userinfo, text))


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


__all__ = ["REDACTED", "chainable", "redact_text", "redact_url"]
