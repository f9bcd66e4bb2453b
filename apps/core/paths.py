"""Which rules a path falls under: the API prefixes (JSON errors, no-store, ...) in settings."""

from __future__ import annotations

from django.conf import settings


def under_prefix(path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether `path` is under one of `prefixes` or is one of them without its trailing slash:
    `/agent-api` belongs to `/agent-api/` (an agent that drops the slash gets the API's answers,
    not a web page)."""
    return f"{path}/".startswith(prefixes)


def is_json_path(path: str) -> bool:
    """Errors at `path` are JSON: under the API prefixes, except at the few browser pages there
    (their exact paths: an unknown path beside them is the API's)."""
    return under_prefix(path, settings.BAILING_JSON_ERROR_PREFIXES) and path not in settings.BAILING_HTML_ERROR_PATHS
