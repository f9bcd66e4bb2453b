"""The demo shop's fixed reference data: products, customers and orders.

They never change, so they live in code rather than in rows: a test database that is flushed
between transactional tests still has them, and nothing has to seed them. What changes (stock
levels, refunds, notes) is stored in this app's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

CURRENCY = "CNY"


@dataclass(frozen=True)
class Product:
    sku: str
    name_zh: str
    name_en: str
    category: str
    price: Decimal
    initial_stock: int


@dataclass(frozen=True)
class Customer:
    customer_id: str
    name: str
    tier: str


@dataclass(frozen=True)
class OrderLine:
    sku: str
    quantity: int
    unit_price: Decimal


@dataclass(frozen=True)
class Order:
    order_id: str
    customer_id: str
    status: str
    placed_at: str
    lines: tuple[OrderLine, ...]
    carrier: str = ""
    tracking_number: str = ""
    shipped_at: str = ""
    delivered_at: str = ""

    @property
    def total(self) -> Decimal:
        return sum((line.unit_price * line.quantity for line in self.lines), Decimal("0.00"))


PRODUCTS: tuple[Product, ...] = (
    Product("SKU-1001", "无线降噪耳机", "Wireless Noise-Cancelling Headphones", "audio", Decimal("899.00"), 42),
    Product("SKU-1002", "智能运动手环", "Smart Fitness Band", "wearables", Decimal("199.00"), 130),
    Product("SKU-1003", "不锈钢保温杯 500ml", "Insulated Steel Bottle 500 ml", "kitchen", Decimal("89.00"), 260),
    Product("SKU-1004", "机械键盘（茶轴）", "Mechanical Keyboard (Brown Switches)", "computers", Decimal("459.00"), 0),
    Product("SKU-1005", "西湖龙井礼盒", "West Lake Longjing Tea Gift Box", "tea", Decimal("168.00"), 75),
    Product("SKU-1006", "便携蓝牙音箱", "Portable Bluetooth Speaker", "audio", Decimal("329.00"), 18),
)

CUSTOMERS: tuple[Customer, ...] = (
    Customer("C-1001", "王芳", "gold"),
    Customer("C-1002", "李雷 (Li Lei)", "standard"),
    Customer("C-1003", "Emma Clarke", "standard"),
)

ORDERS: tuple[Order, ...] = (
    Order("SO-240001", "C-1001", "shipped", "2026-11-20T09:12:00+08:00",
          (OrderLine("SKU-1001", 1, Decimal("899.00")),),
          carrier="SF Express", tracking_number="SF1402837765", shipped_at="2026-11-21T15:40:00+08:00"),
    Order("SO-240002", "C-1002", "delivered", "2026-11-15T20:03:00+08:00",
          (OrderLine("SKU-1002", 2, Decimal("199.00")), OrderLine("SKU-1003", 1, Decimal("89.00"))),
          carrier="JD Logistics", tracking_number="JDV004512398", shipped_at="2026-11-16T10:05:00+08:00",
          delivered_at="2026-11-18T14:22:00+08:00"),
    Order("SO-240003", "C-1003", "processing", "2026-11-28T11:47:00+08:00",
          (OrderLine("SKU-1004", 1, Decimal("459.00")),)),
    Order("SO-240004", "C-1001", "delivered", "2026-10-30T08:30:00+08:00",
          (OrderLine("SKU-1005", 3, Decimal("168.00")), OrderLine("SKU-1006", 1, Decimal("329.00"))),
          carrier="SF Express", tracking_number="SF1398812044", shipped_at="2026-10-31T09:00:00+08:00",
          delivered_at="2026-11-01T16:45:00+08:00"),
)

_PRODUCTS_BY_SKU = {product.sku: product for product in PRODUCTS}
_CUSTOMERS_BY_ID = {customer.customer_id: customer for customer in CUSTOMERS}
_ORDERS_BY_ID = {order.order_id: order for order in ORDERS}


def product(sku: str) -> Product | None:
    return _PRODUCTS_BY_SKU.get(sku.strip().upper())


def known_product(sku: str) -> Product:
    """A SKU the catalogue itself holds (an order line, a checked SKU): KeyError otherwise."""
    return _PRODUCTS_BY_SKU[sku.strip().upper()]


def customer(customer_id: str) -> Customer | None:
    return _CUSTOMERS_BY_ID.get(customer_id.strip().upper())


def known_customer(customer_id: str) -> Customer:
    """A customer the catalogue itself names (an order's): KeyError otherwise."""
    return _CUSTOMERS_BY_ID[customer_id.strip().upper()]


def order(order_id: str) -> Order | None:
    return _ORDERS_BY_ID.get(order_id.strip().upper())


def products_matching(query: str) -> list[Product]:
    """An exact SKU first; otherwise every product whose Chinese or English name contains the query
    (case-insensitive), in catalogue order."""
    text = query.strip()
    exact = product(text)
    if exact:
        return [exact]
    folded = text.casefold()
    return [item for item in PRODUCTS if folded in item.name_zh.casefold() or folded in item.name_en.casefold()]
