"""The demo shop's errors: a stable code, an HTTP status and a message, rendered as
``{"error": code, "message": ..., **extra}``."""

from __future__ import annotations

from typing import Any


class ShopError(Exception):
    code = "error"
    status = 400
    message = "The request could not be processed."

    def __init__(self, message: str | None = None, *, code: str | None = None, detail: str = "",
                 **extra: Any) -> None:
        self.message = message or self.message
        self.code = code or self.code
        # For the shop's own request log only, never sent back.
        self.detail = detail
        self.extra = extra
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


class SignatureRejected(ShopError):
    code = "invalid_signature"
    status = 401
    message = "The request signature is missing, stale or does not match."


class InvalidJson(ShopError):
    code = "invalid_json"
    status = 400
    message = "The body must be a JSON object."


class IdempotencyKeyRequired(ShopError):
    code = "idempotency_key_required"
    status = 400
    message = "Writes need an X-Bailing-Idempotency-Key header of 1–255 visible ASCII characters."


class IdempotencyKeyReused(ShopError):
    code = "idempotency_key_reused"
    status = 409
    message = "This idempotency key was already used for a different request."


class InvalidField(ShopError):
    """One input field is missing, of the wrong type or out of range; the code names the field
    (``invalid_quantity``)."""

    status = 422

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, code=f"invalid_{field}", field=field)


class UnknownField(ShopError):
    code = "unknown_field"
    status = 422

    def __init__(self, field: str) -> None:
        super().__init__(f"Unknown field {field[:64]!r}.", field=field[:64])


class ProductNotFound(ShopError):
    code = "product_not_found"
    status = 404
    message = "No product matches."


class OrderNotFound(ShopError):
    code = "order_not_found"
    status = 404
    message = "No order has this id."


class CustomerNotFound(ShopError):
    code = "customer_not_found"
    status = 404
    message = "No customer has this id."


class InsufficientStock(ShopError):
    code = "insufficient_stock"
    status = 422
    message = "The decrease is larger than the stock on hand."


class RefundExceedsBalance(ShopError):
    code = "refund_exceeds_balance"
    status = 422
    message = "The amount is larger than what is left to refund on this order."


class MethodNotAllowed(ShopError):
    code = "method_not_allowed"
    status = 405
    message = "This method is not allowed here."
