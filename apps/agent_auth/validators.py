"""URL and identifier rules of Agent Auth v1."""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import SplitResult, parse_qsl, urlsplit

from django.core.exceptions import ValidationError

from apps.routes.validators import RESERVED_ROUTE_KEYS, ROUTE_KEY_RE

APP_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{2,63}$")
REDIRECT_URI_MAX_CHARS = 2048


def _split(url: str) -> tuple[SplitResult, int | None] | tuple[None, None]:
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        return None, None
    return parts, port


def _has_explicit_port(parts: SplitResult, port: int | None) -> bool:
    # urlsplit gives port None for "http://127.0.0.1/" and for "http://127.0.0.1:/".
    return port is not None and 1 <= port <= 65535


def _is_loopback_netloc(parts: SplitResult) -> bool:
    # hostname strips the brackets of "[::1]"; the netloc must still carry them.
    host = parts.hostname
    if host == "::1":
        return parts.netloc.startswith("[::1]:")
    return host == "127.0.0.1" and parts.netloc.startswith("127.0.0.1:")


# What the hub adds to the loopback callback: code and state, or error and state.
CALLBACK_PARAMETERS = frozenset({"code", "state", "error"})


def loopback_redirect_uri_problem(value: str) -> str | None:
    """Why `value` is not an explicit-port loopback HTTP callback, or None when it is one."""
    if not isinstance(value, str) or not value:
        return "redirect_uri is required."
    if len(value) > REDIRECT_URI_MAX_CHARS:
        return f"redirect_uri is longer than {REDIRECT_URI_MAX_CHARS} characters."
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in value):
        return "redirect_uri contains spaces or control characters."
    parts, port = _split(value)
    if parts is None or parts.scheme != "http":
        return "redirect_uri must be an http:// loopback URL."
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "redirect_uri must not carry user information."
    if not _is_loopback_netloc(parts):
        return "redirect_uri must point at 127.0.0.1 or [::1]."
    if not _has_explicit_port(parts, port):
        return "redirect_uri must name an explicit port."
    if parts.fragment or value.endswith("#"):
        return "redirect_uri must not have a fragment."
    taken = sorted(CALLBACK_PARAMETERS.intersection(name for name, _ in parse_qsl(parts.query, keep_blank_values=True)))
    if taken:
        # The hub appends them: the callback would read the ones already there first.
        return f"redirect_uri must not have a query parameter the hub adds ({', '.join(taken)})."
    return None


def validate_agent_authorize_url(value: str) -> None:
    """HTTPS, or HTTP on an explicit-port 127.0.0.1 / [::1] for development; no query or fragment,
    and no space, control or invisible formatting character (urlsplit takes them all, even in the
    host: the agent's user would be sent to a page no browser opens, or one that reads other than
    it is)."""
    if any(unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp") for char in value or ""):
        raise ValidationError("The URL must not contain spaces, control characters or invisible formatting "
                              "characters (such as U+202E).", code="authorize_url_characters")
    parts, port = _split(value or "")
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValidationError("Enter an https:// URL.", code="authorize_url_scheme")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValidationError("The URL must not carry user information.", code="authorize_url_userinfo")
    if parts.scheme == "http" and not (_is_loopback_netloc(parts) and _has_explicit_port(parts, port)):
        raise ValidationError(
            "Plain http:// is only allowed on 127.0.0.1 or [::1] with an explicit port (development).",
            code="authorize_url_insecure",
        )
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ValidationError(
            "The URL must not have a query or fragment: BailingHub appends ?authorization_id=.",
            code="authorize_url_query",
        )


def validate_app_id(value: str) -> None:
    if not APP_ID_RE.fullmatch(value or ""):
        raise ValidationError(
            "App ids are 3–64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit.",
            code="app_id_format",
        )


def route_key_is_valid(value: object) -> bool:
    return isinstance(value, str) and value not in RESERVED_ROUTE_KEYS and bool(ROUTE_KEY_RE.fullmatch(value))


def validate_route_keys(values: list[str] | None) -> None:
    seen: set[str] = set()
    for value in values or []:
        if not route_key_is_valid(value):
            raise ValidationError(
                "'%(value)s' is not a valid route key ('auto' and '*' are not allowed).",
                code="route_key_format", params={"value": value},
            )
        if value in seen:
            raise ValidationError("'%(value)s' is listed twice.", code="route_key_duplicate", params={"value": value})
        seen.add(value)
