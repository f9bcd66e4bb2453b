"""What the demo shop remembers: stock levels, refunds, customer notes, idempotency records and the
request log. The reference data (products, customers, orders) is fixed in ``catalog``."""

from django.db import models


class StockLevel(models.Model):
    """A product's stock once it has been adjusted; until then it is the catalogue's initial stock.
    The row is what concurrent adjustments of one SKU lock."""

    sku = models.CharField(max_length=32, unique=True)
    on_hand = models.IntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.sku}: {self.on_hand}"


class StockAdjustment(models.Model):
    class Direction(models.TextChoices):
        INCREASE = "increase"
        DECREASE = "decrease"

    sku = models.CharField(max_length=32)
    direction = models.CharField(max_length=8, choices=Direction.choices)
    quantity = models.PositiveIntegerField()
    reason = models.CharField(max_length=500)
    on_hand_after = models.IntegerField()
    on_behalf_of = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.sku} {self.direction} {self.quantity}"


class OrderAccount(models.Model):
    """An order's refunded total; the row concurrent refunds of one order lock."""

    order_id = models.CharField(max_length=32, unique=True)
    refunded = models.DecimalField(max_digits=12, decimal_places=2, default=0)

    def __str__(self) -> str:
        return f"{self.order_id}: {self.refunded} refunded"


class Refund(models.Model):
    refund_id = models.CharField(max_length=32, unique=True)
    order_id = models.CharField(max_length=32)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    reason = models.CharField(max_length=500)
    on_behalf_of = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.refund_id


class CustomerNote(models.Model):
    customer_id = models.CharField(max_length=32)
    note = models.TextField()
    author = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.customer_id}: {self.note[:40]}"


class IdempotencyRecord(models.Model):
    """The answer a write gave under an idempotency key, replayed for every later request with it.
    ``fingerprint`` is the SHA-256 of method, path and body: the same key on another request is a
    conflict, not a replay."""

    key = models.CharField(max_length=255, unique=True)
    operation = models.CharField(max_length=64)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.operation} {self.key}"


class RequestLogEntry(models.Model):
    """One request the shop received and what came of it, appended after the answer is decided."""

    class Outcome(models.TextChoices):
        READ = "read"  # a read answered
        APPLIED = "applied"  # a write took effect
        REPLAYED = "replayed"  # a write answered from its idempotency record, nothing done again
        REJECTED = "rejected"  # refused; nothing done

    operation = models.CharField(max_length=64)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=2000)
    status_code = models.PositiveSmallIntegerField()
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    error = models.CharField(max_length=64, blank=True)
    detail = models.CharField(max_length=255, blank=True)
    signature_valid = models.BooleanField()
    idempotency_key = models.CharField(max_length=255, blank=True)
    job_id = models.CharField(max_length=255, blank=True)
    tool_scope = models.CharField(max_length=255, blank=True)
    on_behalf_of = models.CharField(max_length=255, blank=True)
    # When the request arrived and when its answer was ready: the request was in flight in between,
    # which is what a concurrency test counts.
    received_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.operation} {self.status_code} {self.outcome}"

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "operation": self.operation,
            "method": self.method,
            "path": self.path,
            "status": self.status_code,
            "outcome": self.outcome,
            "error": self.error,
            "detail": self.detail,
            "signature_valid": self.signature_valid,
            "idempotency_key": self.idempotency_key,
            "job_id": self.job_id,
            "tool_scope": self.tool_scope,
            "on_behalf_of": self.on_behalf_of,
            "received_at": self.received_at.isoformat() if self.received_at else None,
            "created_at": self.created_at.isoformat(),
        }
