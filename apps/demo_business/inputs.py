"""Input checks for the shop's operations: plain values in, clean values out, or an InvalidField
naming the field. The OpenAPI spec declares the same rules."""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import InvalidField, InvalidJson, UnknownField
from .models import StockAdjustment

MAX_QUERY_CHARS = 100
MAX_REASON_CHARS = 500
MAX_NOTE_CHARS = 2000
MAX_QUANTITY = 10000
MAX_REFUND = Decimal("100000.00")
# What the shop's database cannot store: PostgreSQL text takes no NUL, and UTF-8 no lone surrogate.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def json_object(body: bytes, *, allowed: frozenset[str]) -> dict[str, Any]:
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested past json's stack
        raise InvalidJson() from None
    if not isinstance(data, dict):
        raise InvalidJson()
    for key in sorted(set(data) - allowed):
        raise UnknownField(key)
    return data


def text(data: dict[str, Any], field: str, *, max_chars: int) -> str:
    value = data.get(field)
    if value is None:
        raise InvalidField(field, f"{field} is required.")
    if not isinstance(value, str) or not value.strip():
        raise InvalidField(field, f"{field} must be a non-empty string.")
    if _UNSTORABLE.search(value):
        raise InvalidField(field, f"{field} must not contain NUL characters or lone surrogates.")
    value = value.strip()
    if len(value) > max_chars:
        raise InvalidField(field, f"{field} must be at most {max_chars} characters.")
    return value


def query(params: dict[str, str]) -> str:
    return text(params, "query", max_chars=MAX_QUERY_CHARS)


def direction(data: dict[str, Any]) -> str:
    value = data.get("direction")
    if value not in StockAdjustment.Direction.values:
        raise InvalidField("direction", "direction must be 'increase' or 'decrease'.")
    return value


def quantity(data: dict[str, Any]) -> int:
    """A whole number from 1 to MAX_QUANTITY. 12.0 is one (JSON Schema's "integer", which the hub
    checks the arguments against, says so; some JSON writers put every number that way)."""
    value = data.get("quantity")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_QUANTITY:
        raise InvalidField("quantity", f"quantity must be a whole number from 1 to {MAX_QUANTITY}.")
    return value


def amount(data: dict[str, Any]) -> Decimal:
    value = data.get("amount")
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidField("amount", "amount must be a number of yuan, e.g. 89.5.")
    try:
        exact = Decimal(str(value))
    except InvalidOperation:
        raise InvalidField("amount", "amount must be a finite number.") from None
    if not exact.is_finite() or exact <= 0 or exact > MAX_REFUND or exact != exact.quantize(Decimal("0.01")):
        raise InvalidField("amount", f"amount must be more than 0 and at most {MAX_REFUND}, with at most two "
                           "decimal places.")
    return exact.quantize(Decimal("0.01"))
