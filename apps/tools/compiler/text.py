"""Text cleaning and whole-character cutting for descriptions and guidance."""

from __future__ import annotations

import re

# C0 and C1 controls except tab and newline; carriage returns become newlines first.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_text(value: str) -> str:
    return _CONTROL.sub("", value.replace("\r\n", "\n").replace("\r", "\n")).strip()


def cut_chars(value: str, limit: int) -> tuple[str, bool]:
    """At most ``limit`` code points, ending with an ellipsis when cut."""
    if len(value) <= limit:
        return value, False
    return value[: limit - 1].rstrip() + "…", True


def cut_chars_and_bytes(value: str, max_chars: int, max_bytes: int) -> tuple[str, bool]:
    """At most ``max_chars`` code points and ``max_bytes`` UTF-8 bytes, whichever binds first,
    never splitting a character."""
    cut = value[:max_chars]
    encoded = cut.encode("utf-8")
    if len(encoded) > max_bytes:
        cut = encoded[:max_bytes].decode("utf-8", errors="ignore")
    return cut, cut != value
