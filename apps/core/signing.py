"""Self-contained, HMAC-signed tokens with domain separation and an expiry.

A token is `base64url(payload) "." base64url(mac)`, without padding, where

    payload = version (1 byte) || expires_at (8 bytes, Unix seconds, big-endian) || body
    mac     = HMAC-SHA256(key(domain), domain || 0x00 || payload)
    key(domain) = HKDF-SHA256(ikm=SECRET_KEY, salt=SALT, info=domain)   (RFC 5869)

Each domain (e.g. knowledge references, knowledge cursors) has its own key and its name inside
the MAC, so a token of one domain never verifies in another. The keys are derived from the
current `settings.SECRET_KEY` only — `SECRET_KEY_FALLBACKS` is deliberately not consulted — so
rotating the secret invalidates every token at once. Verification checks the MAC in constant
time before reading anything else; the body is the caller's bytes, opaque here.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import struct
import time
from dataclasses import dataclass

from django.conf import settings

VERSION = 1
SALT = b"bailinghub.signing.v1"
MAC_BYTES = 32
MAX_TOKEN_CHARS = 4096
_HEADER = struct.Struct(">BQ")


class BadSignature(Exception):
    """Not a token of this domain under the current secret (malformed, tampered, foreign)."""


class SignatureExpired(BadSignature):
    """An authentic token past its expiry. `signed` is its verified content, so a caller may still
    tell whose token it was before answering "expired"."""

    def __init__(self, signed: Signed):
        super().__init__("The token has expired.")
        self.signed = signed


@dataclass(frozen=True)
class Signed:
    body: bytes
    expires_at: int


def now() -> float:
    """The clock tokens are issued and checked against (Unix seconds)."""
    return time.time()


def hkdf_sha256(ikm: bytes, *, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF (RFC 5869) with SHA-256: extract, then expand to `length` bytes."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


@functools.lru_cache(maxsize=64)
def _derived_key(secret: bytes, domain: str) -> bytes:
    return hkdf_sha256(secret, salt=SALT, info=domain.encode("ascii"))


def _secret_bytes(secret: str | bytes | None) -> bytes:
    value = settings.SECRET_KEY if secret is None else secret
    return value if isinstance(value, bytes) else value.encode("utf-8")


def b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64decode(text: str) -> bytes:
    """Strict base64url without padding: any other spelling of the same bytes is refused."""
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadSignature("Malformed token.") from exc
    if b64encode(raw) != text:
        raise BadSignature("Malformed token.")
    return raw


class Signer:
    """Signs and verifies the tokens of one `domain` (ASCII, e.g. "bailinghub.knowledge.ref.v1").

    `secret` defaults to the current `settings.SECRET_KEY`, read at every call.
    """

    def __init__(self, domain: str, *, ttl_seconds: int, secret: str | bytes | None = None) -> None:
        if not domain or not domain.isascii() or "\x00" in domain:
            raise ValueError("A signing domain is a non-empty ASCII name without NUL.")
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive.")
        self.domain = domain
        self.ttl_seconds = ttl_seconds
        self._secret = secret

    def _mac(self, payload: bytes) -> bytes:
        key = _derived_key(_secret_bytes(self._secret), self.domain)
        return hmac.new(key, self.domain.encode("ascii") + b"\x00" + payload, hashlib.sha256).digest()

    def expiry(self, *, at: float | None = None) -> int:
        """When a token issued at `at` (default: now) expires: `ttl_seconds` later, in whole seconds."""
        return int(now() if at is None else at) + self.ttl_seconds

    def sign(self, body: bytes, *, expires_at: int | None = None, at: float | None = None) -> str:
        """A token for `body`, expiring at `expires_at` (default: `ttl_seconds` after `at`)."""
        if expires_at is None:
            expires_at = self.expiry(at=at)
        payload = _HEADER.pack(VERSION, expires_at) + body
        return b64encode(payload) + "." + b64encode(self._mac(payload))

    def unsign(self, token: str, *, at: float | None = None) -> Signed:
        """The verified body and expiry of `token`. BadSignature unless authentic under this
        domain and the current secret; SignatureExpired once `at` (default: now) reaches the expiry."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
            raise BadSignature("Malformed token.")
        encoded_payload, encoded_mac = token.split(".")
        payload, mac = b64decode(encoded_payload), b64decode(encoded_mac)
        if len(mac) != MAC_BYTES or not hmac.compare_digest(mac, self._mac(payload)):
            raise BadSignature("Bad signature.")
        if len(payload) < _HEADER.size:
            raise BadSignature("Malformed token.")
        version, expires_at = _HEADER.unpack_from(payload)
        if version != VERSION:
            raise BadSignature("Unknown token version.")
        signed = Signed(body=payload[_HEADER.size:], expires_at=expires_at)
        if (now() if at is None else at) >= expires_at:
            raise SignatureExpired(signed)
        return signed
