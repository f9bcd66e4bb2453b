"""Product lookup and order status: signed GETs answered from the catalogue and live state."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from apps.demo_business.models import RequestLogEntry


@pytest.mark.django_db
def test_lookup_by_chinese_name_answers_price_and_stock(shop):
    response = shop.get(f"/demo-business/products?query={quote('降噪耳机')}")
    assert response.status_code == 200
    assert response.json() == {"total_matches": 1, "products": [{
        "sku": "SKU-1001", "name_zh": "无线降噪耳机", "name_en": "Wireless Noise-Cancelling Headphones",
        "category": "audio", "price": "899.00", "currency": "CNY",
        "stock": {"on_hand": 42, "status": "in_stock"}}]}


@pytest.mark.django_db
def test_lookup_by_english_name_is_case_insensitive(shop):
    response = shop.get("/demo-business/products?query=BLUETOOTH")
    assert [item["sku"] for item in response.json()["products"]] == ["SKU-1006"]


@pytest.mark.django_db
def test_lookup_by_sku_reports_out_of_stock(shop):
    response = shop.get("/demo-business/products?query=sku-1004")
    assert response.json()["products"][0]["stock"] == {"on_hand": 0, "status": "out_of_stock"}


@pytest.mark.django_db
def test_unknown_product_is_404(shop):
    response = shop.get("/demo-business/products?query=toaster")
    assert response.status_code == 404
    assert response.json()["error"] == "product_not_found"


@pytest.mark.django_db
@pytest.mark.parametrize("target", ["/demo-business/products", "/demo-business/products?query=%20%20",
                                    "/demo-business/products?query=" + "x" * 101])
def test_missing_blank_or_long_query_is_422(shop, target):
    response = shop.get(target)
    assert (response.status_code, response.json()["error"], response.json()["field"]) == (
        422, "invalid_query", "query")


@pytest.mark.django_db
def test_order_status_answers_lines_shipment_and_refundable(shop):
    body = shop.get("/demo-business/orders/SO-240002").json()
    assert body["status"] == "delivered"
    assert body["customer"] == {"customer_id": "C-1002", "name": "李雷 (Li Lei)"}
    assert [(line["sku"], line["quantity"], line["unit_price"]) for line in body["lines"]] == [
        ("SKU-1002", 2, "199.00"), ("SKU-1003", 1, "89.00")]
    assert (body["total"], body["refunded_total"], body["refundable"], body["refunds"]) == (
        "487.00", "0.00", "487.00", [])
    assert body["shipment"]["tracking_number"] == "JDV004512398"


@pytest.mark.django_db
def test_an_order_not_yet_shipped_has_no_shipment(shop):
    assert shop.get("/demo-business/orders/SO-240003").json()["shipment"] is None


@pytest.mark.django_db
def test_unknown_order_is_404(shop):
    response = shop.get("/demo-business/orders/SO-999999")
    assert (response.status_code, response.json()["error"]) == (404, "order_not_found")


@pytest.mark.django_db
def test_a_read_is_logged_with_the_hub_headers(shop):
    shop.get("/demo-business/orders/SO-240001", scope="shop.orders.read", job_id="job-42", on_behalf_of="王芳")
    entry = RequestLogEntry.objects.get()
    assert (entry.operation, entry.method, entry.status_code, entry.outcome, entry.signature_valid,
            entry.tool_scope, entry.job_id, entry.on_behalf_of) == (
        "get_order_status", "GET", 200, "read", True, "shop.orders.read", "job-42", "王芳")


@pytest.mark.django_db
def test_a_post_to_a_read_is_405_and_logged(shop, client):
    response = client.post("/demo-business/orders/SO-240001")
    assert (response.status_code, response.json()["error"], response["Allow"]) == (405, "method_not_allowed", "GET")
    assert RequestLogEntry.objects.get().outcome == "rejected"


@pytest.mark.django_db
def test_a_trailing_slash_is_404_not_a_redirect(shop):
    response = shop.get("/demo-business/products/?query=tea")
    assert (response.status_code, response.json()["error"]) == (404, "not_found")
