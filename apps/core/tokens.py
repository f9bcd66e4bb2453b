"""Bearer secrets: generated here, stored only as SHA-256 hex, compared in constant time.

A token is `prefix + base64url(32 random bytes)` without padding (43 characters after the
prefix). Lookups go by hash through a unique index; the final comparison is still constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

TOKEN_BYTES = 32


def token_generate(prefix: str) -> str:
    raw = secrets.token_bytes(TOKEN_BYTES)
    return prefix + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(token: str, hashed: str) -> bool:
    """Whether `token` hashes to `hashed`, in time independent of where they differ."""
    if not hashed:
        return False
    return hmac.compare_digest(token_hash(token), hashed)


def secrets_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))
