"""Provider signing secrets, encrypted at rest with Fernet keys from the environment.

``TOOL_SECRET_KEYS`` lists Fernet keys, newest first: the first encrypts, every one decrypts, so a
key rotates by putting a new one in front, re-encrypting (``manage.py rotate_tool_secrets``) and
then dropping the old one. In DEBUG without keys, one key is derived from SECRET_KEY so development
needs no set-up; without DEBUG a missing key is an error at first use (and in ``check --deploy``).
"""

from __future__ import annotations

import base64
import hashlib
import json

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


# A signing secret typed on a provider's page that the page is shown again with (a preview, an
# error) goes back to the browser only as this: encrypted with the same keys, bound to the
# operator's sign-in and that page, and readable for CARRIED_SECRET_MAX_AGE seconds. A browser never
# refills a password field, and the form left blank generated another secret on Save.
CARRIED_SECRET_MAX_AGE = 30 * 60
_CARRIED_PURPOSE = "bailinghub.tools.carried-signing-secret"


def secret_carry(secret: str, *, binding: str) -> str:
    """`secret` sealed for `binding` (who, in which sign-in, on which page): only
    secret_uncarry with the same binding reads it, within CARRIED_SECRET_MAX_AGE."""
    payload = json.dumps({"purpose": _CARRIED_PURPOSE, "binding": binding, "secret": secret})
    return _fernet().encrypt(payload.encode("utf-8")).decode("ascii")


def secret_uncarry(token: str, *, binding: str) -> str:
    """secret_carry's secret; SecretUnreadable for a token that is expired, altered, sealed for
    another binding or not one of secret_carry's (a stored secret's ciphertext included)."""
    try:
        payload = json.loads(_fernet().decrypt(token.encode("ascii"), ttl=CARRIED_SECRET_MAX_AGE))
    except (InvalidToken, UnicodeError, ValueError):
        raise SecretUnreadable("The carried secret is expired or unreadable.") from None
    if not isinstance(payload, dict) or payload.get("purpose") != _CARRIED_PURPOSE \
            or payload.get("binding") != binding or not isinstance(payload.get("secret"), str):
        raise SecretUnreadable("The carried secret is expired or unreadable.")
    return str(payload["secret"])
