"""Provider signing secrets, encrypted at rest with Fernet keys from the environment.

``TOOL_SECRET_KEYS`` lists Fernet keys, newest first: the first encrypts, every one decrypts, so a
key rotates by putting a new one in front, re-encrypting (``manage.py rotate_tool_secrets``) and
then dropping the old one. In DEBUG without keys, one key is derived from SECRET_KEY so development
needs no set-up; without DEBUG a missing key is an error at first use (and in ``check --deploy``).
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class SecretUnreadable(Exception):
    """A stored secret that none of the configured keys decrypts."""


def _keys() -> list[bytes]:
    keys = [key.strip().encode() for key in getattr(settings, "TOOL_SECRET_KEYS", []) if key.strip()]
    if keys:
        return keys
    if settings.DEBUG:
        digest = hashlib.sha256(b"bailinghub.tools.secret-key\x00" + settings.SECRET_KEY.encode()).digest()
        return [base64.urlsafe_b64encode(digest)]
    raise ImproperlyConfigured(
        "TOOL_SECRET_KEYS is required when DEBUG is off: set it to one or more Fernet keys, newest first "
        "(python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')."
    )


def _fernet() -> MultiFernet:
    try:
        return MultiFernet([Fernet(key) for key in _keys()])
    except ValueError as exc:
        raise ImproperlyConfigured(f"TOOL_SECRET_KEYS holds a key that is not a Fernet key: {exc}") from None


def secret_encrypt(secret: str) -> str:
    return _fernet().encrypt(secret.encode("utf-8")).decode("ascii")


def secret_decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise SecretUnreadable("No configured TOOL_SECRET_KEYS key decrypts this secret.") from None


def secret_rotate(token: str) -> str:
    """The same secret, encrypted with the first (newest) key."""
    try:
        return _fernet().rotate(token.encode("ascii")).decode("ascii")
    except InvalidToken:
        raise SecretUnreadable("No configured TOOL_SECRET_KEYS key decrypts this secret.") from None
