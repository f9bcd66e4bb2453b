"""Writes: stock adjustments, refunds, customer notes; each runs at most once per idempotency key.
And the request log, appended after each answer."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, models, transaction

from . import catalog
from .errors import (
    CustomerNotFound,
    IdempotencyKeyReused,
    InsufficientStock,
    OrderNotFound,
    ProductNotFound,
    RefundExceedsBalance,
)
from .models import CustomerNote, IdempotencyRecord, OrderAccount, Refund, RequestLogEntry, StockAdjustment, StockLevel
from .selectors import money, stock_status


@dataclass(frozen=True)
class WriteAnswer:
    status: int
    payload: dict[str, Any]
    replayed: bool


def write_once(*, key: str, operation: str, fingerprint: str, perform: Callable[[], dict[str, Any]]) -> WriteAnswer:
    """Run ``perform`` once per idempotency key and keep its answer; later requests with the key get
    that answer back and change nothing. A refused write (``perform`` raised) keeps nothing, so it
    is evaluated again next time.

    Concurrent first requests with one key serialise on the key's unique index: the second waits for
    the first to commit, then replays its answer.
    """
    with transaction.atomic():
        existing = IdempotencyRecord.objects.filter(key=key).first()
        if existing is None:
            try:
                with transaction.atomic():
                    record = IdempotencyRecord.objects.create(key=key, operation=operation, fingerprint=fingerprint,
                                                              status_code=0, response={})
            except IntegrityError:
                existing = IdempotencyRecord.objects.get(key=key)
        if existing is not None:
            if existing.operation != operation or existing.fingerprint != fingerprint:
                raise IdempotencyKeyReused(detail=f"first used for {existing.operation}")
            return WriteAnswer(status=existing.status_code, payload=existing.response, replayed=True)
        payload = perform()
        record.status_code = 200
        record.response = payload
        record.save(update_fields=["status_code", "response"])
        return WriteAnswer(status=200, payload=payload, replayed=False)


def stock_adjust(*, sku: str, direction: str, quantity: int, reason: str, on_behalf_of: str) -> dict[str, Any]:
    product = catalog.product(sku)
    if product is None:
        raise ProductNotFound(f"No product has the SKU {sku[:64]!r}.")
    level, _ = StockLevel.objects.get_or_create(sku=product.sku, defaults={"on_hand": product.initial_stock})
    level = StockLevel.objects.select_for_update().get(pk=level.pk)
    before = level.on_hand
    after = before + quantity if direction == StockAdjustment.Direction.INCREASE else before - quantity
    if after < 0:
        raise InsufficientStock(f"Cannot decrease {product.sku} by {quantity}: {before} on hand.", on_hand=before)
    level.on_hand = after
    level.save(update_fields=["on_hand", "updated_at"])
    adjustment = StockAdjustment.objects.create(sku=product.sku, direction=direction, quantity=quantity,
                                                reason=reason, on_hand_after=after, on_behalf_of=on_behalf_of)
    return {
        "adjustment_id": f"ADJ-{adjustment.id:06d}",
        "sku": product.sku,
        "direction": direction,
        "quantity": quantity,
        "on_hand_before": before,
        "on_hand_after": after,
        "stock_status": stock_status(after),
    }


def refund_issue(*, order_id: str, amount: Decimal, reason: str, on_behalf_of: str) -> dict[str, Any]:
    order = catalog.order(order_id)
    if order is None:
        raise OrderNotFound(f"No order has the id {order_id[:64]!r}.")
    account, _ = OrderAccount.objects.get_or_create(order_id=order.order_id)
    account = OrderAccount.objects.select_for_update().get(pk=account.pk)
    remaining = order.total - account.refunded
    if amount > remaining:
        raise RefundExceedsBalance(f"At most {money(remaining)} {catalog.CURRENCY} can still be refunded on "
                                   f"{order.order_id}.", refundable=money(remaining))
    account.refunded += amount
    account.save(update_fields=["refunded"])
    refund = Refund.objects.create(refund_id=f"RF-{uuid.uuid4().hex[:10].upper()}", order_id=order.order_id,
                                   amount=amount, reason=reason, on_behalf_of=on_behalf_of)
    return {
        "refund_id": refund.refund_id,
        "order_id": order.order_id,
        "amount": money(amount),
        "currency": catalog.CURRENCY,
        "status": "issued",
        "refunded_total": money(account.refunded),
        "refundable": money(order.total - account.refunded),
    }


def customer_note_add(*, customer_id: str, note: str, author: str) -> dict[str, Any]:
    customer = catalog.customer(customer_id)
    if customer is None:
        raise CustomerNotFound(f"No customer has the id {customer_id[:64]!r}.")
    saved = CustomerNote.objects.create(customer_id=customer.customer_id, note=note, author=author)
    return {
        "note_id": f"N-{saved.id:06d}",
        "customer_id": customer.customer_id,
        "note": note,
        "author": author or None,
        "created_at": saved.created_at.isoformat(),
    }


def request_log_append(**fields: Any) -> RequestLogEntry:
    for name in ("path", "error", "detail", "idempotency_key", "job_id", "tool_scope", "on_behalf_of"):
        field = RequestLogEntry._meta.get_field(name)
        assert isinstance(field, models.CharField | models.TextField)  # these are text columns
        limit = field.max_length
        fields[name] = str(fields.get(name, ""))[:limit]
    return RequestLogEntry.objects.create(**fields)
