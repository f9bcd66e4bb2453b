"""Every operation verifies the hub's signature first: a missing, wrong or stale one is 401
invalid_signature, nothing is done, and the log says why."""

from __future__ import annotations

import json
import time

import pytest

from apps.demo_business.models import IdempotencyRecord, RequestLogEntry, StockAdjustment, StockLevel

from .conftest import TEST_SECRET

ADJUST = "/demo-business/stock-adjustments"
RECEIVE = {"sku": "SKU-1003", "direction": "increase", "quantity": 12, "reason": "Goods received"}
BODY = json.dumps(RECEIVE).encode()


def assert_rejected_and_nothing_done(response, detail: str) -> None:
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_signature"
    assert not StockLevel.objects.exists()
    assert not StockAdjustment.objects.exists()
    assert not IdempotencyRecord.objects.exists()
    entry = RequestLogEntry.objects.get()
    assert (entry.outcome, entry.error, entry.signature_valid, entry.detail) == (
        "rejected", "invalid_signature", False, detail)


@pytest.mark.django_db
def test_an_unsigned_write_is_401(shop, client):
    response = client.post(ADJUST, data=BODY, content_type="application/json",
                           headers={"X-Bailing-Idempotency-Key": "k1"})
    assert_rejected_and_nothing_done(response, "signature or timestamp header missing")


@pytest.mark.django_db
def test_a_write_signed_with_another_secret_is_401(shop):
    response = shop.post(ADJUST, RECEIVE, secret="not-the-shop-secret")
    assert_rejected_and_nothing_done(response, "signature does not match")


@pytest.mark.django_db
def test_a_stale_write_is_401(shop):
    response = shop.post(ADJUST, RECEIVE, timestamp=int(time.time()) - 301)
    assert_rejected_and_nothing_done(response, "timestamp outside the allowed skew")


@pytest.mark.django_db
def test_a_body_changed_after_signing_is_401(shop, client):
    headers = shop.headers("POST", ADJUST, BODY, key="k1")
    tampered = json.dumps({**RECEIVE, "quantity": 99}).encode()
    response = client.post(ADJUST, data=tampered, content_type="application/json", headers=headers)
    assert_rejected_and_nothing_done(response, "signature does not match")


@pytest.mark.django_db
def test_a_signature_for_another_path_is_401(shop, client):
    headers = shop.headers("POST", "/demo-business/refunds", BODY, key="k1")
    response = client.post(ADJUST, data=BODY, content_type="application/json", headers=headers)
    assert_rejected_and_nothing_done(response, "signature does not match")


@pytest.mark.django_db
def test_a_read_with_a_changed_query_is_401(shop, client):
    headers = shop.headers("GET", "/demo-business/products?query=tea", b"")
    response = client.get("/demo-business/products?query=keyboard", headers=headers)
    assert (response.status_code, response.json()["error"]) == (401, "invalid_signature")


@pytest.mark.django_db
def test_a_malformed_signature_header_is_401(shop, client):
    headers = {**shop.headers("GET", "/demo-business/orders/SO-240001", b""), "X-Bailing-Signature": "v1=zz"}
    response = client.get("/demo-business/orders/SO-240001", headers=headers)
    assert (response.status_code, response.json()["error"]) == (401, "invalid_signature")


@pytest.mark.django_db
def test_the_signature_is_checked_before_the_idempotency_key(shop):
    shop.post(ADJUST, RECEIVE, key="k-known")
    response = shop.post(ADJUST, RECEIVE, key="k-known", secret="not-the-shop-secret")
    assert (response.status_code, response.json()["error"]) == (401, "invalid_signature")
    assert not response.has_header("Idempotent-Replayed")


@pytest.mark.django_db
def test_the_shop_uses_the_configured_secret(shop, settings):
    settings.DEMO_BUSINESS_SIGNING_SECRET = "rotated-" + TEST_SECRET
    response = shop.get("/demo-business/orders/SO-240001")
    assert response.status_code == 401


@pytest.mark.django_db
def test_the_raw_request_target_is_what_is_verified_when_the_server_gives_it(shop, client):
    # gunicorn passes the request line's target as RAW_URI; it is verified as sent, with an
    # encoding Django's own re-encoding of the path would not reproduce.
    raw = "/demo-business/orders/SO%2D240001"
    response = client.get(raw, headers=shop.headers("GET", raw, b""), RAW_URI=raw)
    assert (response.status_code, response.json()["order_id"]) == (200, "SO-240001")
