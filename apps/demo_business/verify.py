"""Verify (and make) the signature BailingHub puts on every call it sends to a business backend.

This module has no dependency outside the Python standard library: copy it into your backend.

Canonical string (UTF-8, fields joined by a single ``\\n``, no trailing newline)::

    v1
    {timestamp}
    {METHOD}
    {path?query}
    {sha256(body) hex}

- ``timestamp`` is the ``X-Bailing-Timestamp`` header: unix seconds, a decimal integer.
- ``METHOD`` is the HTTP method in upper case (``GET``, ``POST``, ...).
- ``path?query`` is the request target exactly as sent on the request line, without scheme and
  host: the path with its percent-encoding kept (including any prefix of the provider's base URL,
  e.g. ``/demo-business/orders/SO-240001``), then ``?`` and the query string as sent when there is
  one. No ``?`` when the query is empty.
- ``sha256(body) hex`` is the lowercase hex SHA-256 of the raw body bytes; an empty body gives
  ``e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855``.

Signature: ``X-Bailing-Signature: v1=<lowercase hex HMAC-SHA256(secret, canonical string)>``, where
``secret`` is the provider's signing secret as UTF-8 bytes. A backend rotating its secret may pass
several secrets; any one matching is enough.

A request is accepted when both headers are present and well formed, the timestamp is within
``max_skew`` seconds of the backend's clock (either direction), and the signature matches (compared
in constant time). Otherwise ``verify_request`` raises ``InvalidSignature``; answer 401
``{"error": "invalid_signature"}`` and do nothing else.

BailingHub also sends, unsigned and for information: ``X-Bailing-Tool-Scope`` (the tool's ACC
scope), ``X-Bailing-Job-Id`` (the invocation's job), ``X-Bailing-On-Behalf-Of`` (the end user the
agent acts for, when known) and ``X-Bailing-Idempotency-Key`` (stable across re-sends of one
invocation: a write seen twice with the same key must take effect once). The scope and the end
user are percent-encoded UTF-8 (``%D9%85…@example.com`` for an Arabic name; a ``%`` in a value is
``%25``): decode them. ``bailing_headers`` reads them all, decoded.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

SIGNATURE_HEADER = "X-Bailing-Signature"
TIMESTAMP_HEADER = "X-Bailing-Timestamp"
TOOL_SCOPE_HEADER = "X-Bailing-Tool-Scope"
JOB_ID_HEADER = "X-Bailing-Job-Id"
ON_BEHALF_OF_HEADER = "X-Bailing-On-Behalf-Of"
IDEMPOTENCY_KEY_HEADER = "X-Bailing-Idempotency-Key"
VERSION = "v1"
DEFAULT_MAX_SKEW = 300
_MAX_TIMESTAMP_DIGITS = 12
_HEX = frozenset("0123456789abcdef")

Secret = str | bytes


class InvalidSignature(Exception):
    """The request is not proven to come from BailingHub. ``reason`` is for the backend's own logs;
    the answer to the caller should not say which check failed."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class BailingHeaders:
    tool_scope: str
    job_id: str
    on_behalf_of: str
    idempotency_key: str


def canonical_string(*, timestamp: int | str, method: str, path_with_query: str, body: bytes) -> str:
    return "\n".join((VERSION, str(timestamp), method.upper(), path_with_query, hashlib.sha256(body).hexdigest()))


def _key(secret: Secret) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)


def _mac(secret: Secret, canonical: str) -> str:
    return hmac.new(_key(secret), canonical.encode("utf-8"), hashlib.sha256).hexdigest()


def sign_request(*, secret: Secret, method: str, path_with_query: str, body: bytes, timestamp: int) -> dict[str, str]:
    """The two signature headers for one request (the hub's side, and tests')."""
    canonical = canonical_string(timestamp=int(timestamp), method=method, path_with_query=path_with_query, body=body)
    return {
        SIGNATURE_HEADER: f"{VERSION}={_mac(secret, canonical)}",
        TIMESTAMP_HEADER: str(int(timestamp)),
    }


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        for key, candidate in headers.items():
            if key.lower() == lowered:
                return candidate
    return value


def verify_request(*, secret: Secret | Sequence[Secret], method: str, path_with_query: str, body: bytes,
                   headers: Mapping[str, str], now: float, max_skew: int = DEFAULT_MAX_SKEW) -> None:
    """Return when the request is signed with ``secret`` (or one of several) and fresh; raise
    ``InvalidSignature`` otherwise. ``headers`` is any mapping; names are matched case-insensitively."""
    secrets = [secret] if isinstance(secret, str | bytes) else list(secret)
    if not secrets or any(not _key(item) for item in secrets):
        raise InvalidSignature("no signing secret is configured")
    raw_timestamp = _header(headers, TIMESTAMP_HEADER)
    raw_signature = _header(headers, SIGNATURE_HEADER)
    if raw_timestamp is None or raw_signature is None:
        raise InvalidSignature("signature or timestamp header missing")
    raw_timestamp = raw_timestamp.strip()
    if not raw_timestamp.isascii() or not raw_timestamp.isdigit() or len(raw_timestamp) > _MAX_TIMESTAMP_DIGITS:
        raise InvalidSignature("timestamp is not unix seconds")
    timestamp = int(raw_timestamp)
    if abs(now - timestamp) > max_skew:
        raise InvalidSignature("timestamp outside the allowed skew")
    scheme, _, presented = raw_signature.strip().partition("=")
    if scheme != VERSION or len(presented) != 64 or not set(presented) <= _HEX:
        raise InvalidSignature("signature header is not v1=<64 lowercase hex>")
    canonical = canonical_string(timestamp=timestamp, method=method, path_with_query=path_with_query, body=body)
    # Every secret is tried, matched or not, so timing says nothing about which one matched.
    matched = False
    for item in secrets:
        matched |= hmac.compare_digest(_mac(item, canonical), presented)
    if not matched:
        raise InvalidSignature("signature does not match")


def bailing_headers(headers: Mapping[str, str]) -> BailingHeaders:
    """The informational headers the hub sends beside the signature ('' when absent), the scope
    and the end user decoded."""
    return BailingHeaders(
        tool_scope=unquote(_header(headers, TOOL_SCOPE_HEADER) or ""),
        job_id=_header(headers, JOB_ID_HEADER) or "",
        on_behalf_of=unquote(_header(headers, ON_BEHALF_OF_HEADER) or ""),
        idempotency_key=_header(headers, IDEMPOTENCY_KEY_HEADER) or "",
    )
