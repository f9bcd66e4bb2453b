"""Serializer fields that take JSON values as they are: no coercion between types, bounded work.

DRF's fields are lenient by design (`12345` is a valid CharField, `"32"` and `32.0` valid
IntegerFields, `"yes"` a BooleanField); an API whose inputs are JSON wants the JSON type the
contract names, and a clear error naming the field otherwise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, cast
from uuid import UUID

from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from apps.core.parsers import lone_surrogate_path
from apps.core.validators import uuid_parse

_UNSAFE_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def safe_text(value: str) -> None:
    """Text may hold tab, line feed and carriage return; no other control character, no lone
    surrogate (PostgreSQL and every UTF-8 encoder refuse them)."""
    match = _UNSAFE_TEXT.search(value)
    if match:
        raise serializers.ValidationError(f"Control character or lone surrogate U+{ord(match.group()):04X} "
                                          "is not allowed.")


class JSONStringField(serializers.CharField):
    """A JSON string only, with safe text."""

    default_error_messages = {"invalid": "A JSON string is required."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("validators", [])
        kwargs["validators"] = [*kwargs["validators"], safe_text]
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string only: numbers and booleans are not coerced to text (no text rule added)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return cast(str, super().to_internal_value(data))


class JSONUUIDField(serializers.UUIDField):
    """A UUID written as a JSON string in the 8-4-4-4-12 form (uuid_parse): DRF would also take an
    integer as a UUID's 128 bits, and braces, `urn:uuid:` or no dashes."""

    def to_internal_value(self, data: Any) -> UUID:
        if not isinstance(data, str) or uuid_parse(data) is None:
            self.fail("invalid", value=str(data)[:64])
        return super().to_internal_value(data)


class JSONIntegerField(serializers.IntegerField):
    """A JSON integer only: no strings, booleans or floats."""

    default_error_messages = {"invalid": "A JSON integer is required."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class JSONNumberField(serializers.FloatField):
    """A finite JSON number (integer or fraction), never a string or boolean."""

    default_error_messages = {"invalid": "A finite JSON number is required."}

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class JSONDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date and time as a JSON string, with its offset (`Z` or `+08:00`): a time without
    one names no instant (DRF would read it in the server's time zone, hours off the client's)."""

    default_error_messages = {"invalid": "An ISO 8601 date and time with its offset (Z or ±hh:mm) is required, "
                                         "as in 2027-01-31T18:00:00Z."}

    def to_internal_value(self, value: Any) -> Any:
        if not isinstance(value, str):
            self.fail("invalid")
        try:
            given = parse_datetime(value) if len(value) <= 64 else None
        except ValueError:  # a well-formed date that does not exist (month 13)
            given = None
        if given is None or given.tzinfo is None:
            self.fail("invalid")
        return super().to_internal_value(value)


class JSONBooleanField(serializers.BooleanField):
    """`true` or `false` only."""

    default_error_messages = {"invalid": "A JSON boolean (true or false) is required."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class JSONObjectField(serializers.JSONField):
    """A JSON object (already parsed strictly by apps.core.parsers), with no lone surrogate in it."""

    default_error_messages = {"invalid": "A JSON object is required."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            self.fail("invalid")
        where = lone_surrogate_path(data)
        if where is not None:
            raise serializers.ValidationError(f"{where[:200]}: a lone surrogate is not allowed (text must be valid "
                                              "Unicode).")
        # DRF's JSONField takes any JSON value; its stubs name only objects and lists.
        return cast(dict[str, Any], super().to_internal_value(cast(dict[str, Any], data)))


class BoundedListField(serializers.ListField):
    """A list whose length is checked before its items: 100,000 bad items cost one error, not
    100,000 item validations and an error naming each."""

    def to_internal_value(self, data: Any) -> list[Any]:
        if isinstance(data, list) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


class ExactFieldsSerializer(serializers.Serializer[Any]):
    """A JSON object with exactly these fields: every unknown one is named (the error handler
    shows the first few and counts them all)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown = [name for name in data if name not in self.fields]
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        validated: dict[str, Any] = super().to_internal_value(data)
        return validated
