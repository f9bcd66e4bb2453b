"""The shop behind a real HTTP server, called as the hub's dispatcher calls it: the signed target
is the request line's path and query, percent-encoding and all."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

import pytest

from apps.demo_business.models import RequestLogEntry, StockAdjustment
from apps.demo_business.verify import sign_request

from .conftest import TEST_SECRET


def call(base: str, method: str, target: str, payload=None, *, secret: str = TEST_SECRET, key: str = ""):
    body = json.dumps(payload).encode() if payload is not None else b""
    headers = sign_request(secret=secret, method=method, path_with_query=target, body=body,
                           timestamp=int(time.time()))
    headers["Content-Type"] = "application/json"
    if key:
        headers["X-Bailing-Idempotency-Key"] = key
    request = urllib.request.Request(base + target, data=body or None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def base(live_server, mounted) -> str:
    parts = urlsplit(live_server.url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.mark.django_db(transaction=True)
def test_a_signed_read_with_a_chinese_query_is_answered(base):
    status, body = call(base, "GET", f"/demo-business/products?query={quote('保温杯')}")
    assert (status, [item["sku"] for item in body["products"]]) == (200, ["SKU-1003"])


@pytest.mark.django_db(transaction=True)
def test_a_signed_write_takes_effect_once_over_two_sends(base):
    payload = {"sku": "SKU-1002", "direction": "decrease", "quantity": 3, "reason": "Returned to supplier"}
    first = call(base, "POST", "/demo-business/stock-adjustments", payload, key="live-1")
    second = call(base, "POST", "/demo-business/stock-adjustments", payload, key="live-1")
    assert first == second
    assert (first[0], first[1]["on_hand_after"]) == (200, 127)
    assert StockAdjustment.objects.count() == 1
    assert list(RequestLogEntry.objects.values_list("outcome", flat=True)) == ["applied", "replayed"]


@pytest.mark.django_db(transaction=True)
def test_a_wrongly_signed_write_is_401_over_http(base):
    status, body = call(base, "POST", "/demo-business/refunds",
                        {"order_id": "SO-240001", "amount": 1, "reason": "test"}, secret="wrong", key="live-2")
    assert (status, body["error"]) == (401, "invalid_signature")
    assert list(RequestLogEntry.objects.values_list("outcome", "signature_valid")) == [("rejected", False)]
