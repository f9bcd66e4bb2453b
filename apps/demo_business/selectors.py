"""Reads: products with their live stock, orders with their refunds, the request log."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from . import catalog
from .errors import OrderNotFound, ProductNotFound
from .models import OrderAccount, Refund, RequestLogEntry, StockLevel

LOW_STOCK = 20
MAX_MATCHES = 5


def money(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01'))}"


def stock_on_hand(*, skus: list[str]) -> dict[str, int]:
    stored = dict(StockLevel.objects.filter(sku__in=skus).values_list("sku", "on_hand"))
    return {sku: stored.get(sku, catalog.known_product(sku).initial_stock) for sku in skus}


def stock_status(on_hand: int) -> str:
    if on_hand <= 0:
        return "out_of_stock"
    return "low_stock" if on_hand < LOW_STOCK else "in_stock"


def product_view(product: catalog.Product, on_hand: int) -> dict[str, Any]:
    return {
        "sku": product.sku,
        "name_zh": product.name_zh,
        "name_en": product.name_en,
        "category": product.category,
        "price": money(product.price),
        "currency": catalog.CURRENCY,
        "stock": {"on_hand": on_hand, "status": stock_status(on_hand)},
    }


def product_lookup(*, query: str) -> dict[str, Any]:
    """Products whose SKU is ``query`` or whose name contains it, with live stock; none → 404."""
    found = catalog.products_matching(query)
    if not found:
        raise ProductNotFound(f"No product has the SKU or a name containing {query[:100]!r}.")
    shown = found[:MAX_MATCHES]
    stock = stock_on_hand(skus=[item.sku for item in shown])
    return {"products": [product_view(item, stock[item.sku]) for item in shown], "total_matches": len(found)}


def order_refunded(*, order_id: str) -> Decimal:
    account = OrderAccount.objects.filter(order_id=order_id).first()
    return account.refunded if account else Decimal("0.00")


def order_status(*, order_id: str) -> dict[str, Any]:
    order = catalog.order(order_id)
    if order is None:
        raise OrderNotFound(f"No order has the id {order_id[:64]!r}.")
    customer = catalog.known_customer(order.customer_id)
    refunded = order_refunded(order_id=order.order_id)
    refunds = Refund.objects.filter(order_id=order.order_id)
    shipment = None
    if order.carrier:
        shipment = {"carrier": order.carrier, "tracking_number": order.tracking_number,
                    "shipped_at": order.shipped_at, "delivered_at": order.delivered_at or None}
    return {
        "order_id": order.order_id,
        "status": order.status,
        "placed_at": order.placed_at,
        "customer": {"customer_id": customer.customer_id, "name": customer.name},
        "lines": [
            {"sku": line.sku, "name_zh": catalog.known_product(line.sku).name_zh,
             "name_en": catalog.known_product(line.sku).name_en, "quantity": line.quantity,
             "unit_price": money(line.unit_price)}
            for line in order.lines
        ],
        "currency": catalog.CURRENCY,
        "total": money(order.total),
        "refunded_total": money(refunded),
        "refundable": money(order.total - refunded),
        "refunds": [{"refund_id": refund.refund_id, "amount": money(refund.amount), "reason": refund.reason,
                     "created_at": refund.created_at.isoformat()} for refund in refunds],
        "shipment": shipment,
    }


def request_log(*, operation: str = "", after_id: int = 0) -> list[RequestLogEntry]:
    """The shop's request log, oldest first."""
    entries = RequestLogEntry.objects.filter(id__gt=after_id)
    if operation:
        entries = entries.filter(operation=operation)
    return list(entries)
