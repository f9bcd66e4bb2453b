"""Stock adjustments, refunds and customer notes: each takes effect once per idempotency key, and
every refusal leaves the shop as it was."""

from __future__ import annotations

import json

import pytest

from apps.demo_business.models import (
    CustomerNote,
    IdempotencyRecord,
    OrderAccount,
    Refund,
    RequestLogEntry,
    StockAdjustment,
    StockLevel,
)

ADJUST = "/demo-business/stock-adjustments"
REFUND = "/demo-business/refunds"
NOTE = "/demo-business/customers/C-1001/notes"
RECEIVE = {"sku": "SKU-1003", "direction": "increase", "quantity": 12, "reason": "Goods received"}
REFUND_BOTTLE = {"order_id": "SO-240002", "amount": 89, "reason": "Bottle arrived dented"}


def nothing_written() -> bool:
    return not any(model.objects.exists() for model in (StockLevel, StockAdjustment, OrderAccount, Refund,
                                                        CustomerNote, IdempotencyRecord))


@pytest.mark.django_db
def test_an_increase_adds_to_the_stock_on_hand(shop):
    response = shop.post(ADJUST, RECEIVE, key="adj-1")
    assert response.status_code == 200
    body = response.json()
    assert (body["sku"], body["on_hand_before"], body["on_hand_after"], body["stock_status"]) == (
        "SKU-1003", 260, 272, "in_stock")
    assert shop.get("/demo-business/products?query=SKU-1003").json()["products"][0]["stock"]["on_hand"] == 272


@pytest.mark.django_db
def test_a_whole_quantity_written_as_a_float_is_the_whole_number(shop):
    # JSON Schema's "integer" (the hub's check of the arguments) takes 12.0: the shop must too.
    response = shop.post(ADJUST, {**RECEIVE, "quantity": 12.0}, key="adj-float")
    assert (response.status_code, response.json()["on_hand_after"], response.json()["quantity"]) == (200, 272, 12)
    assert StockAdjustment.objects.get().quantity == 12


@pytest.mark.django_db
def test_a_decrease_records_who_asked(shop):
    shop.post(ADJUST, {"sku": "SKU-1006", "direction": "decrease", "quantity": 5, "reason": "Water damage"},
              on_behalf_of="warehouse@example.com")
    adjustment = StockAdjustment.objects.get()
    assert (adjustment.on_hand_after, adjustment.on_behalf_of) == (13, "warehouse@example.com")


@pytest.mark.django_db
def test_a_decrease_below_zero_is_refused_and_changes_nothing(shop):
    response = shop.post(ADJUST, {"sku": "SKU-1006", "direction": "decrease", "quantity": 19, "reason": "Count"})
    assert (response.status_code, response.json()["error"], response.json()["on_hand"]) == (
        422, "insufficient_stock", 18)
    assert nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize("quantity", [0, -5, 10001, 2.5, 0.0, 10001.0, 1e300, "5", True, None])
def test_an_invalid_quantity_is_422_and_changes_nothing(shop, quantity):
    response = shop.post(ADJUST, {**RECEIVE, "quantity": quantity})
    assert (response.status_code, response.json()["error"], response.json()["field"]) == (
        422, "invalid_quantity", "quantity")
    assert nothing_written()


@pytest.mark.django_db
def test_an_invalid_direction_is_422(shop):
    response = shop.post(ADJUST, {**RECEIVE, "direction": "sideways"})
    assert (response.status_code, response.json()["error"]) == (422, "invalid_direction")
    assert nothing_written()


@pytest.mark.django_db
def test_an_unknown_product_is_404_and_changes_nothing(shop):
    response = shop.post(ADJUST, {**RECEIVE, "sku": "SKU-9999"})
    assert (response.status_code, response.json()["error"]) == (404, "product_not_found")
    assert nothing_written()


@pytest.mark.django_db
def test_an_unknown_field_is_422(shop):
    response = shop.post(ADJUST, {**RECEIVE, "warehouse": "B"})
    assert (response.status_code, response.json()["error"], response.json()["field"]) == (
        422, "unknown_field", "warehouse")
    assert nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000])  # the last: past json's stack
def test_a_body_that_is_not_a_json_object_is_400(shop, raw):
    response = shop.post(ADJUST, None, raw=raw)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_json")
    assert nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize("key", [None, "", "k" * 256, "clé"])
def test_a_write_without_a_usable_idempotency_key_is_400(shop, key):
    response = shop.post(ADJUST, RECEIVE, key=key)
    assert (response.status_code, response.json()["error"]) == (400, "idempotency_key_required")
    assert nothing_written()


@pytest.mark.django_db
def test_the_same_key_replays_the_first_answer_and_adjusts_once(shop):
    first = shop.post(ADJUST, RECEIVE, key="adj-replay")
    second = shop.post(ADJUST, RECEIVE, key="adj-replay")
    assert second.status_code == 200
    assert second.json() == first.json()
    assert (first.has_header("Idempotent-Replayed"), second["Idempotent-Replayed"]) == (False, "true")
    assert StockAdjustment.objects.count() == 1
    assert StockLevel.objects.get(sku="SKU-1003").on_hand == 272


@pytest.mark.django_db
def test_the_same_key_on_another_request_is_409_and_changes_nothing(shop):
    shop.post(ADJUST, RECEIVE, key="adj-conflict")
    response = shop.post(ADJUST, {**RECEIVE, "quantity": 13}, key="adj-conflict")
    assert (response.status_code, response.json()["error"]) == (409, "idempotency_key_reused")
    assert list(StockAdjustment.objects.values_list("quantity", flat=True)) == [12]


@pytest.mark.django_db
def test_a_refused_write_is_evaluated_again_under_its_key(shop):
    shop.post(ADJUST, {**RECEIVE, "sku": "SKU-1004", "direction": "decrease", "quantity": 1}, key="adj-retry")
    response = shop.post(ADJUST, {**RECEIVE, "sku": "SKU-1004", "direction": "decrease", "quantity": 1},
                         key="adj-retry")
    assert (response.status_code, response.json()["error"]) == (422, "insufficient_stock")
    assert nothing_written()


@pytest.mark.django_db
def test_a_refund_is_issued_and_shows_on_the_order(shop):
    response = shop.post(REFUND, REFUND_BOTTLE, key="rf-1")
    assert response.status_code == 200
    body = response.json()
    assert (body["order_id"], body["amount"], body["status"], body["refunded_total"], body["refundable"]) == (
        "SO-240002", "89.00", "issued", "89.00", "398.00")
    order = shop.get("/demo-business/orders/SO-240002").json()
    assert [(refund["refund_id"], refund["amount"]) for refund in order["refunds"]] == [(body["refund_id"], "89.00")]


@pytest.mark.django_db
def test_a_replayed_refund_pays_once(shop):
    first = shop.post(REFUND, REFUND_BOTTLE, key="rf-replay")
    second = shop.post(REFUND, REFUND_BOTTLE, key="rf-replay")
    assert second.json() == first.json()
    assert Refund.objects.count() == 1


@pytest.mark.django_db
def test_a_refund_over_the_refundable_balance_is_422_and_changes_nothing(shop):
    response = shop.post(REFUND, {**REFUND_BOTTLE, "amount": 487.01})
    assert (response.status_code, response.json()["error"], response.json()["refundable"]) == (
        422, "refund_exceeds_balance", "487.00")
    assert nothing_written()


@pytest.mark.django_db
def test_refunds_add_up_to_at_most_the_order_total(shop):
    shop.post(REFUND, {**REFUND_BOTTLE, "amount": 400}, key="rf-a")
    response = shop.post(REFUND, {**REFUND_BOTTLE, "amount": 88}, key="rf-b")
    assert (response.status_code, response.json()["refundable"]) == (422, "87.00")
    assert list(Refund.objects.values_list("amount", flat=True)) == [400]


@pytest.mark.django_db
@pytest.mark.parametrize("amount", [0, -1, 10.005, "89", True, None, 100000.01])
def test_an_invalid_amount_is_422_and_changes_nothing(shop, amount):
    response = shop.post(REFUND, {**REFUND_BOTTLE, "amount": amount})
    assert (response.status_code, response.json()["error"]) == (422, "invalid_amount")
    assert nothing_written()


@pytest.mark.django_db
def test_a_refund_of_an_unknown_order_is_404(shop):
    response = shop.post(REFUND, {**REFUND_BOTTLE, "order_id": "SO-000000"})
    assert (response.status_code, response.json()["error"]) == (404, "order_not_found")
    assert nothing_written()


@pytest.mark.django_db
def test_a_note_is_added_with_its_author(shop):
    response = shop.post(NOTE, {"note": "客户希望周末送货。"}, on_behalf_of="agent-user-7")
    assert response.status_code == 200
    assert (response.json()["customer_id"], response.json()["author"]) == ("C-1001", "agent-user-7")
    assert list(CustomerNote.objects.values_list("customer_id", "note")) == [("C-1001", "客户希望周末送货。")]


@pytest.mark.django_db
def test_a_note_for_an_unknown_customer_is_404(shop):
    response = shop.post("/demo-business/customers/C-9999/notes", {"note": "hello"})
    assert (response.status_code, response.json()["error"]) == (404, "customer_not_found")
    assert nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize("note", ["", "   ", "x" * 2001, 7, "a\x00b", "a\ud800b"])
def test_an_invalid_note_is_422(shop, note):
    response = shop.post(NOTE, None, raw=json.dumps({"note": note}).encode())  # escaped as \u0000, \ud800
    assert (response.status_code, response.json()["error"]) == (422, "invalid_note")
    assert nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "body"), [(ADJUST, RECEIVE), (REFUND, REFUND_BOTTLE)], ids=["adjust", "refund"])
@pytest.mark.parametrize("reason", ["Goods\x00received", "\udfff"], ids=["nul", "lone_surrogate"])
def test_a_reason_the_database_cannot_store_is_422_and_changes_nothing(shop, path, body, reason):
    # PostgreSQL text takes no NUL and UTF-8 no lone surrogate: a 500 here would leave the hub's
    # call reconciliation_required, for a person to check, over a value the shop simply refuses.
    response = shop.post(path, None, raw=json.dumps({**body, "reason": reason}).encode())
    assert (response.status_code, response.json()["error"], response.json()["field"]) == (
        422, "invalid_reason", "reason")
    assert nothing_written()


@pytest.mark.django_db
def test_the_log_tells_applied_from_replayed(shop):
    shop.post(NOTE, {"note": "Called back"}, key="note-1")
    shop.post(NOTE, {"note": "Called back"}, key="note-1")
    assert list(RequestLogEntry.objects.values_list("operation", "outcome", "idempotency_key")) == [
        ("add_customer_note", "applied", "note-1"), ("add_customer_note", "replayed", "note-1")]
