"""Validation rules for route settings, each with the message an operator sees."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

ROUTE_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
RESERVED_ROUTE_KEYS = frozenset({"auto"})

MESSAGES = {
    "route_key_format": (
        "Route keys are 2–64 characters of lower-case letters, digits, '_' or '-', "
        "starting with a letter or digit."
    ),
    "route_key_reserved": "'%(value)s' is reserved and cannot be a route key.",
    "tool_wildcard": "Wildcards are not allowed: list exact operationIds (found '%(value)s').",
    "tool_name": (
        "'%(value)s' is not a valid operationId (letters, digits and '_', at most 64, not starting with a digit)."
    ),
    "tool_duplicate": "'%(value)s' is listed twice.",
    "list_item_too_long": "Item %(index)s is longer than %(limit)s characters.",
    "list_too_long": "At most %(limit)s items are allowed.",
    "list_item_blank": "Item %(index)s is empty.",
    "audience_format": "'%(value)s' is not a valid audience (1–64 characters, no spaces).",
}


def validate_route_key(value: str) -> None:
    if value in RESERVED_ROUTE_KEYS:
        raise ValidationError(MESSAGES["route_key_reserved"], code="route_key_reserved", params={"value": value})
    if not ROUTE_KEY_RE.fullmatch(value or ""):
        raise ValidationError(MESSAGES["route_key_format"], code="route_key_format")


def validate_tool_names(values: list[str] | None) -> None:
    seen: set[str] = set()
    for value in values or []:
        if "*" in value:
            raise ValidationError(MESSAGES["tool_wildcard"], code="tool_wildcard", params={"value": value})
        if not TOOL_NAME_RE.fullmatch(value):
            raise ValidationError(MESSAGES["tool_name"], code="tool_name", params={"value": value})
        if value in seen:
            raise ValidationError(MESSAGES["tool_duplicate"], code="tool_duplicate", params={"value": value})
        seen.add(value)


@deconstructible
class BoundedListValidator:
    """At most `max_items` non-blank strings of at most `max_chars` characters each."""

    def __init__(self, *, max_items: int, max_chars: int) -> None:
        self.max_items = max_items
        self.max_chars = max_chars

    def __call__(self, values: list[str] | None) -> None:
        values = values or []
        if len(values) > self.max_items:
            raise ValidationError(MESSAGES["list_too_long"], code="list_too_long", params={"limit": self.max_items})
        for index, value in enumerate(values, start=1):
            if not value.strip():
                raise ValidationError(MESSAGES["list_item_blank"], code="list_item_blank", params={"index": index})
            if len(value) > self.max_chars:
                raise ValidationError(
                    MESSAGES["list_item_too_long"],
                    code="list_item_too_long",
                    params={"index": index, "limit": self.max_chars},
                )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BoundedListValidator)
            and (self.max_items, self.max_chars) == (other.max_items, other.max_chars)
        )


AUDIENCE_RE = re.compile(r"^\S{1,64}$")


def validate_audiences(values: list[str] | None) -> None:
    for value in values or []:
        if not AUDIENCE_RE.fullmatch(value):
            raise ValidationError(MESSAGES["audience_format"], code="audience_format", params={"value": value})
