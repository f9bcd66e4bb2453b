"""The shop's HTTP endpoints. Every operation is verified first (signature and freshness), then
runs; writes run once per idempotency key; every request and its outcome lands in the request log."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from . import inputs, selectors, services
from .errors import IdempotencyKeyRequired, MethodNotAllowed, ShopError, SignatureRejected
from .models import RequestLogEntry
from .spec import demo_spec_bytes
from .verify import InvalidSignature, bailing_headers, verify_request

Outcome = RequestLogEntry.Outcome
MAX_IDEMPOTENCY_KEY = 255


@dataclass(frozen=True)
class Call:
    """What an operation gets: its path arguments, query, raw body and the hub's headers."""

    kwargs: dict[str, str]
    params: dict[str, str]
    body: bytes
    on_behalf_of: str


def _json(status: int, payload: dict[str, Any], **headers: str) -> JsonResponse:
    response = JsonResponse(payload, status=status, json_dumps_params={"ensure_ascii": False})
    for name, value in headers.items():
        response[name] = value
    return response


def signed_target(request: HttpRequest) -> str:
    """The request target as it came on the wire when the server says so (gunicorn's RAW_URI,
    Apache's REQUEST_URI); else Django's re-encoding of it, which is the same for the ASCII ids and
    percent-encoded queries the hub sends."""
    raw = request.META.get("RAW_URI") or request.META.get("REQUEST_URI") or ""
    return raw if raw.startswith("/") else request.get_full_path()


def _idempotency_key(value: str) -> str:
    if not value or len(value) > MAX_IDEMPOTENCY_KEY or not value.isascii() or not value.isprintable():
        raise IdempotencyKeyRequired()
    return value


def operation(name: str, *, method: str, write: bool, run: Callable[[Call], dict[str, Any]]):
    """A view for one operation of the spec."""

    @csrf_exempt
    def view(request: HttpRequest, **kwargs: str) -> HttpResponse:
        received_at = timezone.now()
        body = request.body
        headers = bailing_headers(request.headers)
        signature_valid = False
        outcome, error, detail = Outcome.REJECTED, "", ""
        try:
            if request.method != method:
                raise MethodNotAllowed()
            try:
                verify_request(secret=settings.DEMO_BUSINESS_SIGNING_SECRET, method=request.method,
                               path_with_query=signed_target(request), body=body, headers=request.headers,
                               now=time.time())
            except InvalidSignature as exc:
                raise SignatureRejected(detail=exc.reason) from None
            signature_valid = True
            if settings.DEMO_BUSINESS_RESPONSE_DELAY_MS:
                # A slow backend on purpose, outside any transaction: lets tests see calls in flight.
                time.sleep(settings.DEMO_BUSINESS_RESPONSE_DELAY_MS / 1000)
            call = Call(kwargs=kwargs, params=request.GET.dict(), body=body, on_behalf_of=headers.on_behalf_of)
            if write:
                key = _idempotency_key(headers.idempotency_key)
                fingerprint = hashlib.sha256(b"\n".join(
                    (request.method.encode(), request.path.encode(), body))).hexdigest()
                answer = services.write_once(key=key, operation=name, fingerprint=fingerprint,
                                             perform=lambda: run(call))
                outcome = Outcome.REPLAYED if answer.replayed else Outcome.APPLIED
                response = _json(answer.status, answer.payload,
                                 **({"Idempotent-Replayed": "true"} if answer.replayed else {}))
            else:
                response = _json(200, run(call))
                outcome = Outcome.READ
        except ShopError as exc:
            error, detail = exc.code, exc.detail
            response = _json(exc.status, exc.as_dict(), **({"Allow": method} if exc.status == 405 else {}))
        services.request_log_append(
            operation=name, method=request.method, path=request.get_full_path(), status_code=response.status_code,
            outcome=outcome, error=error, detail=detail, signature_valid=signature_valid,
            idempotency_key=headers.idempotency_key, job_id=headers.job_id, tool_scope=headers.tool_scope,
            on_behalf_of=headers.on_behalf_of, received_at=received_at)
        return response

    view.__name__ = name
    return view


def _lookup_product(call: Call) -> dict[str, Any]:
    return selectors.product_lookup(query=inputs.query(call.params))


def _get_order_status(call: Call) -> dict[str, Any]:
    return selectors.order_status(order_id=call.kwargs["order_id"])


def _adjust_stock(call: Call) -> dict[str, Any]:
    data = inputs.json_object(call.body, allowed=frozenset({"sku", "direction", "quantity", "reason"}))
    return services.stock_adjust(sku=inputs.text(data, "sku", max_chars=32), direction=inputs.direction(data),
                                 quantity=inputs.quantity(data),
                                 reason=inputs.text(data, "reason", max_chars=inputs.MAX_REASON_CHARS),
                                 on_behalf_of=call.on_behalf_of[:255])


def _issue_refund(call: Call) -> dict[str, Any]:
    data = inputs.json_object(call.body, allowed=frozenset({"order_id", "amount", "reason"}))
    return services.refund_issue(order_id=inputs.text(data, "order_id", max_chars=32), amount=inputs.amount(data),
                                 reason=inputs.text(data, "reason", max_chars=inputs.MAX_REASON_CHARS),
                                 on_behalf_of=call.on_behalf_of[:255])


def _add_customer_note(call: Call) -> dict[str, Any]:
    data = inputs.json_object(call.body, allowed=frozenset({"note"}))
    return services.customer_note_add(customer_id=call.kwargs["customer_id"],
                                      note=inputs.text(data, "note", max_chars=inputs.MAX_NOTE_CHARS),
                                      author=call.on_behalf_of[:255])


lookup_product = operation("lookup_product", method="GET", write=False, run=_lookup_product)
get_order_status = operation("get_order_status", method="GET", write=False, run=_get_order_status)
adjust_stock = operation("adjust_stock", method="POST", write=True, run=_adjust_stock)
issue_refund = operation("issue_refund", method="POST", write=True, run=_issue_refund)
add_customer_note = operation("add_customer_note", method="POST", write=True, run=_add_customer_note)


@require_GET
def openapi(request: HttpRequest) -> HttpResponse:
    return HttpResponse(demo_spec_bytes(), content_type="application/json")


@require_GET
def log(request: HttpRequest) -> JsonResponse:
    """The request log, signed like every call (it names the people agents acted for):
    ``?operation=`` and ``?after=<id>`` narrow it. Not itself logged."""
    try:
        verify_request(secret=settings.DEMO_BUSINESS_SIGNING_SECRET, method=request.method or "GET",
                       path_with_query=signed_target(request), body=request.body, headers=request.headers,
                       now=time.time())
    except InvalidSignature:
        return _json(SignatureRejected.status, SignatureRejected().as_dict())
    after = request.GET.get("after", "0")
    entries = selectors.request_log(operation=request.GET.get("operation", ""),
                                    after_id=int(after) if after.isascii() and after.isdigit() else 0)
    return _json(200, {"entries": [entry.as_dict() for entry in entries]})


def not_found(request: HttpRequest, unmatched: str = "") -> JsonResponse:
    return _json(404, {"error": "not_found", "message": "No such endpoint in the demo shop."})

